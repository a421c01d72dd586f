//! The fuzz corpora of the protocol decoders (`fuzz/seeds/{frame_decode,content_assembly,
//! field_table_decode}`) are what they claim to be: well-formed inputs that reach past the
//! first check (a corpus of inputs refused at once would start the fuzzer nowhere). Each
//! frame seed decodes to the end, each content seed assembles at least one message or is
//! refused only for its size, each table seed decodes and re-encodes to the same bytes.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;

use bytes::BytesMut;
use wharf_protocol::{self as protocol, Assembled, ContentAssembler, Frame};

/// `(name, bytes)` of every file of `fuzz/seeds/<target>`, sorted.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{target}: an empty corpus");
    files
}

/// The fuzz targets' framing: two octets of parameter, then the stream.
fn split(data: &[u8]) -> (u16, &[u8]) {
    match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => panic!("a seed shorter than its parameter"),
    }
}

#[test]
fn frame_decode_seeds_decode_to_their_end() {
    for (name, data) in corpus("frame_decode") {
        let (quarter, stream) = split(&data);
        let mut buf = BytesMut::from(stream);
        let mut frames = 0;
        loop {
            match protocol::decode(&mut buf, u32::from(quarter) * 4) {
                Ok(Some(_)) => frames += 1,
                Ok(None) => break,
                // A seed may end in a refusal (frame_max too small), after frames.
                Err(e) => {
                    assert!(e.is_connection_error(), "{name}: {e}");
                    break;
                }
            }
        }
        assert!(frames > 0 || !buf.is_empty(), "{name}: no frame decoded");
    }
}

#[test]
fn content_assembly_seeds_assemble_messages() {
    for (name, data) in corpus("content_assembly") {
        let (limit, stream) = split(&data);
        let mut buf = BytesMut::from(stream);
        let mut assemblers: BTreeMap<u16, ContentAssembler> = BTreeMap::new();
        let mut contents = 0;
        let mut refused = 0;
        while let Ok(Some(frame)) = protocol::decode(&mut buf, 4096) {
            if frame == Frame::Heartbeat {
                continue;
            }
            let channel = frame.channel();
            let a = assemblers
                .entry(channel.0)
                .or_insert_with(|| ContentAssembler::new(channel, u32::from(limit)));
            match a.push(frame) {
                Ok(Some(Assembled::Content(_))) => contents += 1,
                Ok(_) => {}
                Err(_) => refused += 1,
            }
        }
        assert!(
            contents + refused > 0,
            "{name}: nothing assembled or refused"
        );
        assert!(buf.is_empty(), "{name}: bytes left undecoded");
    }
}

#[test]
fn field_table_decode_seeds_round_trip() {
    for (name, data) in corpus("field_table_decode") {
        let table = protocol::decode_field_table(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut buf = BytesMut::new();
        protocol::put_table(&mut buf, &table);
        let again = protocol::decode_field_table(&buf).unwrap();
        assert_eq!(table, again, "{name}");
    }
}
