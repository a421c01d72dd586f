//! Checkpoints that refer to messages in place (store format 4): a checkpoint costs a small
//! record per live message, not its body, and the next start reads no body and replays
//! nothing it covers; sparse segments are compacted (live messages copied forward in the
//! log) so that one old message never pins a segment, and the directory stays within twice
//! the queued bytes plus two segments (S-DISK-9); a crash or a failing disk at any step of a
//! compacting checkpoint loses and doubles nothing (S-DUR-7).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::sync::Arc;

use store_common::{CH, Driver, Op, T0_MS, log_for, setup, store_config};
use wharf_broker::{Broker, ChanRef, ChannelId, Command, ConnId, Reply};
use wharf_store::{CheckpointTrigger, RecoverySummary, Store, StoreError, Ticket};
use wharf_wal::{SimStorage, Storage, WalConfig};

const SEG: u64 = 16 * 1024;

fn open_seg(sim: &SimStorage, seg: u64) -> Result<(Store, Broker, RecoverySummary), StoreError> {
    let wal = WalConfig {
        segment_bytes_max: seg,
        preallocate: false,
        ..WalConfig::default()
    };
    Store::open_with(&store_config(false), Arc::new(sim.clone()), &wal)
}

/// A driver of the broker the store recovered (so it reads stored messages back through the
/// store), its channel open.
fn driver(broker: Broker) -> Driver {
    let mut live = Driver {
        broker,
        now_ms: T0_MS,
        tags: Vec::new(),
        events: Vec::new(),
    };
    live.run(Command::ConnectionOpen {
        conn: CH.conn,
        vhost: "/".into(),
    });
    live.run(Command::ChannelOpen { chan: CH });
    live
}

/// The channel [`drain`] reads on (not the driver's).
const READER: ChanRef = ChanRef {
    conn: ConnId(77),
    channel: ChannelId(1),
};

/// Applies `op` to the live broker and logs its events as the server does.
fn step(store: &Store, live: &mut Driver, op: &Op) -> Ticket {
    let events = live.apply(op);
    log_for(store, &mut live.broker, &events).unwrap()
}

fn publish(q: usize, body_len: usize) -> Op {
    Op::Publish {
        exchange: None,
        key: q,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len,
    }
}

fn segment_files(sim: &SimStorage) -> Vec<String> {
    let mut names: Vec<String> = sim
        .list(&store_config(false).dir)
        .unwrap()
        .into_iter()
        .filter(|n| wharf_wal::parse_segment_file_name(n).is_some())
        .collect();
    names.sort();
    names
}

/// Takes every message of `queue` with `basic.get` (no ack) and returns their body lengths;
/// the broker must have read every stored one back.
fn drain(broker: &mut Broker, queue: &str) -> Vec<usize> {
    // Opened once per broker (a second open is refused, and changes nothing).
    let _ = broker.handle(
        Command::ConnectionOpen {
            conn: READER.conn,
            vhost: "/".into(),
        },
        T0_MS,
    );
    let _ = broker.handle(Command::ChannelOpen { chan: READER }, T0_MS);
    let mut lens = Vec::new();
    loop {
        let get = Command::Get {
            chan: READER,
            queue: queue.into(),
            no_ack: true,
        };
        match broker.handle(get, T0_MS).unwrap().reply {
            Reply::GetOk(g) => lens.push(g.message.body.len()),
            _ => break,
        }
    }
    assert_eq!(broker.storage_failure(), None);
    lens
}

/// A store on `sim` with segments of `seg` bytes holding `n` persistent messages in `q0`
/// (bodies of 900 + i bytes), durable.
fn backlog(sim: &SimStorage, seg: u64, n: usize) -> (Store, Driver, Ticket) {
    let (store, broker, _) = open_seg(sim, seg).unwrap();
    let mut live = driver(broker);
    let mut ticket = 0;
    for op in setup() {
        ticket = ticket.max(step(&store, &mut live, &op));
    }
    for i in 0..n {
        ticket = ticket.max(step(&store, &mut live, &publish(0, 900 + i)));
    }
    store.wait_durable(ticket).unwrap();
    (store, live, ticket)
}

#[test]
fn s_disk_9_a_checkpoint_refers_to_messages_and_the_next_start_reads_no_body() {
    const N: usize = 200;
    let sim = SimStorage::new(11);
    let seg = 64 * 1024;
    let (mut store, mut live, ticket) = backlog(&sim, seg, N);
    live.broker.page_out(ticket, 0);
    let done = store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    // About a hundred bytes per message, where the bodies alone are over 180 000.
    assert!(done.bytes < (N as u64) * 150, "{done:?}");
    assert_eq!(
        done.messages_copied, 0,
        "dense segments are kept as they are"
    );
    store.close().unwrap();

    let (store, mut recovered, summary) = open_seg(&sim, seg).unwrap();
    assert_eq!(summary.checkpoint_lsn, Some(done.lsn));
    assert_eq!(summary.checkpoint_messages, N as u64);
    assert_eq!(summary.events, 0, "nothing after the checkpoint to replay");
    // Only the last segment is read (the one appending continues in); the others are
    // covered whole and kept only for the messages they hold.
    assert!(summary.covered_records < N as u64 / 2, "{summary:?}");
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
    let lens = drain(&mut recovered, "q0");
    assert_eq!(lens, (0..N).map(|i| 900 + i).collect::<Vec<_>>());

    // S-DUR-7: a segment the checkpoint refers to that is gone is damage, found at the start.
    drop(store);
    let first = segment_files(&sim)[0].clone();
    sim.remove(&store_config(false).dir.join(&first)).unwrap();
    let err = open_seg(&sim, seg).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptCheckpoint { .. }) && err.to_string().contains("missing"),
        "{err}"
    );
}

/// One message (500 bytes) left in `q0` at the start, then `rounds` messages of 1000 bytes
/// published to `q1` and taken at once: the old message's segment is mostly dead. Every
/// message is left on disk (paged out). Returns the store, the live broker and the last ticket.
fn one_old_message(sim: &SimStorage, rounds: usize) -> (Store, Driver, Ticket) {
    let (store, broker, _) = open_seg(sim, SEG).unwrap();
    let mut live = driver(broker);
    let mut ticket = 0;
    for op in setup() {
        ticket = ticket.max(step(&store, &mut live, &op));
    }
    ticket = ticket.max(step(&store, &mut live, &publish(0, 500)));
    for _ in 0..rounds {
        ticket = ticket.max(step(&store, &mut live, &publish(1, 1000)));
        let get = Op::Get { q: 1, no_ack: true };
        ticket = ticket.max(step(&store, &mut live, &get));
    }
    store.wait_durable(ticket).unwrap();
    live.broker.page_out(ticket, 0);
    (store, live, ticket)
}

#[test]
fn s_disk_9_compaction_copies_an_old_message_forward_and_its_segment_goes() {
    let sim = SimStorage::new(12);
    let (mut store, mut live, _) = one_old_message(&sim, 60);
    let first = segment_files(&sim)[0].clone();
    let before = segment_files(&sim).len() as u64;
    let done = store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    assert_eq!(done.messages_copied, 1, "{done:?}");
    assert!(done.segments_deleted + 1 >= before, "{done:?}");
    assert!(
        !segment_files(&sim).contains(&first),
        "the old message's segment went: {:?}",
        segment_files(&sim)
    );
    let expected = live.broker.durable_state();
    // The live broker still holds the old position: it finds the copy.
    assert_eq!(drain(&mut live.broker, "q0"), vec![500]);
    store.close().unwrap();
    let (_store, mut recovered, summary) = open_seg(&sim, SEG).unwrap();
    assert_eq!(summary.checkpoint_messages, 1);
    assert_eq!(recovered.durable_state(), expected);
    assert_eq!(drain(&mut recovered, "q0"), vec![500]);
    assert_eq!(drain(&mut recovered, "q1"), Vec::<usize>::new());
}

#[test]
fn s_dur_7_a_failure_or_crash_at_any_step_of_a_compacting_checkpoint_loses_and_doubles_nothing() {
    let mut failed = 0;
    for n in 0..12 {
        for writes in [false, true] {
            let sim = SimStorage::new(100 + n);
            let (mut store, mut live, _) = one_old_message(&sim, 40);
            if writes {
                sim.fail_write_after(n);
            } else {
                sim.fail_sync_after(n);
            }
            let result = store.checkpoint_now(live.broker.snapshot());
            failed += u32::from(result.is_err());
            // The running broker still reads its old message back, whatever failed.
            let expected = live.broker.durable_state();
            assert_eq!(
                drain(&mut live.broker, "q0"),
                vec![500],
                "n {n} writes {writes}"
            );
            drop(store);
            let sim = sim.power_loss();
            let (_store, mut recovered, _) = open_seg(&sim, SEG)
                .unwrap_or_else(|e| panic!("n {n} writes {writes} ({result:?}): {e}"));
            assert_eq!(
                recovered.durable_state(),
                expected,
                "n {n} writes {writes} ({result:?})"
            );
            assert_eq!(
                drain(&mut recovered, "q0"),
                vec![500],
                "n {n} writes {writes}"
            );
            assert_eq!(drain(&mut recovered, "q1"), Vec::<usize>::new());
        }
    }
    assert!(failed >= 6, "the failures hit the checkpoint ({failed})");
}

/// A 30-minute run in small: a few messages held unacked throughout while traffic flows
/// through another queue, checkpoints taken as the server takes them. At every step the
/// directory (every file's bytes, segments counted at their reserved size) stays within twice
/// the queued bytes plus two segments, plus the checkpoint and the durable mark.
#[test]
fn s_disk_9_the_directory_stays_within_twice_the_queued_bytes_plus_two_segments() {
    let sim = SimStorage::new(13);
    let (mut store, broker, _) = open_seg(&sim, SEG).unwrap();
    store.set_checkpoint_trigger(CheckpointTrigger {
        log_bytes_min: SEG,
        ..CheckpointTrigger::default()
    });
    let mut live = driver(broker);
    let mut ticket = 0;
    for op in setup() {
        ticket = ticket.max(step(&store, &mut live, &op));
    }
    // Three messages delivered and never acked.
    for _ in 0..3 {
        ticket = ticket.max(step(&store, &mut live, &publish(0, 700)));
        let get = Op::Get {
            q: 0,
            no_ack: false,
        };
        ticket = ticket.max(step(&store, &mut live, &get));
    }
    let mut checkpoints = 0;
    let mut copied = 0;
    for round in 0..600 {
        ticket = ticket.max(step(&store, &mut live, &publish(1, 1000)));
        let get = Op::Get { q: 1, no_ack: true };
        ticket = ticket.max(step(&store, &mut live, &get));
        store.wait_durable(ticket).unwrap();
        if store.maybe_checkpoint(&live.broker) {
            let done = store.wait_checkpoint().unwrap().unwrap();
            checkpoints += 1;
            copied += done.messages_copied;
        }
        let queued: u64 = 3 * 700;
        let allowance = 2 * queued + 2 * SEG + 4096 + 1024;
        let used = sim.used_bytes();
        assert!(
            used <= allowance,
            "round {round}: {used} bytes on disk, bound {allowance}: {:?}",
            segment_files(&sim)
        );
    }
    assert!(checkpoints > 10, "{checkpoints} checkpoints");
    assert!(
        copied >= 3,
        "the held messages were copied forward ({copied})"
    );
    drop(store);
    let (_store, recovered, _) = open_seg(&sim, SEG).unwrap();
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

/// S-DISK-8: salvage gives up a damaged record, and with it the queued message a checkpoint
/// refers to there, durably; the others stay readable and a plain start agrees.
#[test]
fn s_disk_8_salvage_drops_a_referenced_message_whose_record_is_damaged() {
    const N: usize = 40;
    let sim = SimStorage::new(14);
    let (mut store, live, _) = backlog(&sim, SEG, N);
    store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    store.close().unwrap();
    // A byte in the middle of the first segment: inside one message's record.
    let path = store_config(false).dir.join(&segment_files(&sim)[0]);
    let mut bytes = sim.file_bytes(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    sim.set_file_bytes(&path, bytes);
    let wal = WalConfig {
        segment_bytes_max: SEG,
        preallocate: false,
        ..WalConfig::default()
    };
    let (store, _, summary) =
        Store::open_with(&store_config(true), Arc::new(sim.clone()), &wal).unwrap();
    assert_eq!(summary.salvaged_records, 1, "{summary:?}");
    drop(store);
    let (_store, mut again, summary) = open_seg(&sim, SEG).unwrap();
    assert_eq!(summary.salvaged_records, 0);
    let lens = drain(&mut again, "q0");
    assert_eq!(lens.len(), N - 1, "{lens:?}");
}
