//! Large bodies spooled as they arrive (S-BIG-3): with a spooler, a body of at least
//! `SPOOL_BODY_BYTES_MIN` octets goes to its spool frame by frame and the assembler holds none
//! of it in memory; a spooler with no room, or a failed spool write, leaves it gathered in
//! memory, intact; smaller bodies and assemblers without a spooler gather as before.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io;
use std::sync::{Arc, Mutex};

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use bytes::Bytes;
use wharf_base::limits;
use wharf_protocol::{
    Assembled, BodySpool, BodySpooler, ChannelId, ContentAssembler, Frame, SPOOL_BODY_BYTES_MIN,
};

const CH: ChannelId = ChannelId(2);
const FRAME: usize = 128 * 1024 - 8;

/// What the fake spooler saw.
#[derive(Debug, Default)]
struct Seen {
    opened: Vec<u64>,
    writes: usize,
    finished: usize,
    read_back: usize,
    /// Spools dropped (given up unfinished, or consumed by finish or read back).
    dropped: usize,
}

/// An in-memory spooler: `room` false refuses every spool; a spool fails its write number
/// `fail_at` (counted from 1), if set.
#[derive(Debug)]
struct Fake {
    seen: Arc<Mutex<Seen>>,
    room: bool,
    fail_at: Option<usize>,
}

#[derive(Debug)]
struct FakeSpool {
    seen: Arc<Mutex<Seen>>,
    bytes: Vec<u8>,
    fail_at: Option<usize>,
    writes: usize,
}

impl BodySpooler for Fake {
    fn open(&self, body_bytes: u64) -> Option<Box<dyn BodySpool>> {
        self.seen.lock().unwrap().opened.push(body_bytes);
        self.room.then(|| {
            Box::new(FakeSpool {
                seen: Arc::clone(&self.seen),
                bytes: Vec::new(),
                fail_at: self.fail_at,
                writes: 0,
            }) as Box<dyn BodySpool>
        })
    }
}

impl Drop for FakeSpool {
    fn drop(&mut self) {
        self.seen.lock().unwrap().dropped += 1;
    }
}

impl BodySpool for FakeSpool {
    fn write(&mut self, piece: &[u8]) -> io::Result<()> {
        self.writes += 1;
        if Some(self.writes) == self.fail_at {
            return Err(io::Error::other("disk on fire"));
        }
        self.seen.lock().unwrap().writes += 1;
        self.bytes.extend_from_slice(piece);
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> io::Result<Bytes> {
        self.seen.lock().unwrap().finished += 1;
        Ok(Bytes::from(std::mem::take(&mut self.bytes)))
    }
    fn read_back(mut self: Box<Self>) -> io::Result<Vec<u8>> {
        self.seen.lock().unwrap().read_back += 1;
        Ok(std::mem::take(&mut self.bytes))
    }
}

fn assembler(room: bool, fail_at: Option<usize>) -> (ContentAssembler, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let fake = Fake {
        seen: Arc::clone(&seen),
        room,
        fail_at,
    };
    let a = ContentAssembler::new(CH, limits::MESSAGE_BODY_BYTES_MAX).with_spooler(Arc::new(fake));
    (a, seen)
}

fn body_of(len: usize) -> Vec<u8> {
    (0..len).map(|i| u8::try_from(i % 253).unwrap()).collect()
}

/// Pushes publish, header and `body` in frame-sized pieces; returns the assembled body and
/// the most the assembler said it held in memory... or on disk, along the way.
fn send(a: &mut ContentAssembler, body: &[u8]) -> (Bytes, usize) {
    let publish = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish::default()));
    assert_eq!(a.push(Frame::Method(CH, publish)).unwrap(), None);
    let header = AMQPContentHeader {
        class_id: 60,
        body_size: body.len() as u64,
        properties: BasicProperties::default(),
    };
    assert_eq!(a.push(Frame::Header(CH, Box::new(header))).unwrap(), None);
    let mut held = a.gathering_capacity_bytes();
    let mut pieces = body.chunks(FRAME).peekable();
    while let Some(piece) = pieces.next() {
        let out = a
            .push(Frame::Body(CH, Bytes::copy_from_slice(piece)))
            .unwrap();
        held = held.max(a.gathering_capacity_bytes());
        if pieces.peek().is_none() {
            match out {
                Some(Assembled::Content(c)) => return (c.body, held),
                other => panic!("expected the content, got {other:?}"),
            }
        }
        assert_eq!(out, None);
    }
    unreachable!("a body of at least one frame")
}

#[test]
fn s_big_3_a_large_body_goes_to_its_spool_frame_by_frame() {
    let (mut a, seen) = assembler(true, None);
    let body = body_of(3 * 1024 * 1024 + 5);
    let (got, held) = send(&mut a, &body);
    assert!(got == body, "intact");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.opened, [body.len() as u64]);
    assert_eq!(
        seen.writes,
        body.len().div_ceil(FRAME),
        "one write per body frame"
    );
    assert_eq!((seen.finished, seen.read_back), (1, 0));
    // Counted against the connection's bound on partly received bodies as its reservation.
    assert_eq!(held, body.len());
    assert_eq!(a.gathering_capacity_bytes(), 0);
    assert!(!a.is_mid_content());
}

#[test]
fn s_big_3_smaller_bodies_and_assemblers_without_spooler_gather_in_memory() {
    let (mut a, seen) = assembler(true, None);
    let small = body_of(usize::try_from(SPOOL_BODY_BYTES_MIN).unwrap() - 1);
    assert!(send(&mut a, &small).0 == small);
    assert!(
        seen.lock().unwrap().opened.is_empty(),
        "below the threshold"
    );

    let mut plain = ContentAssembler::new(CH, limits::MESSAGE_BODY_BYTES_MAX);
    let big = body_of(2 * 1024 * 1024);
    assert!(send(&mut plain, &big).0 == big);
}

#[test]
fn s_big_3_no_room_for_a_spool_gathers_in_memory() {
    let (mut a, seen) = assembler(false, None);
    let body = body_of(2 * 1024 * 1024);
    let (got, held) = send(&mut a, &body);
    assert!(got == body);
    assert_eq!(seen.lock().unwrap().opened.len(), 1);
    assert!(held >= body.len() / 2, "gathered in memory: {held}");
}

#[test]
fn s_big_3_a_failed_spool_write_carries_on_in_memory_intact() {
    let (mut a, seen) = assembler(true, Some(4));
    let body = body_of(2 * 1024 * 1024 + 3);
    let (got, _) = send(&mut a, &body);
    assert!(
        got == body,
        "what was spooled came back, the rest was gathered"
    );
    let seen = seen.lock().unwrap();
    assert_eq!((seen.writes, seen.read_back, seen.finished), (3, 1, 0));
}

#[test]
fn s_big_3_a_body_cut_short_gives_its_spool_up() {
    // A frame the content state does not allow (505), or the channel going (the assembler
    // dropped): the spool is dropped unfinished, which removes its file (the WAL's tests).
    for drop_assembler in [false, true] {
        let (mut a, seen) = assembler(true, None);
        let publish = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish::default()));
        a.push(Frame::Method(CH, publish.clone())).unwrap();
        let header = AMQPContentHeader {
            class_id: 60,
            body_size: 4 * SPOOL_BODY_BYTES_MIN,
            properties: BasicProperties::default(),
        };
        a.push(Frame::Header(CH, Box::new(header))).unwrap();
        a.push(Frame::Body(CH, Bytes::from(vec![1; FRAME])))
            .unwrap();
        assert_eq!(seen.lock().unwrap().dropped, 0, "still spooling");
        if drop_assembler {
            drop(a);
        } else {
            assert!(a.push(Frame::Method(CH, publish)).is_err());
            assert!(!a.is_mid_content());
        }
        let seen = seen.lock().unwrap();
        assert_eq!((seen.dropped, seen.finished), (1, 0));
    }
}
