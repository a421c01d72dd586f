//! The segment index (storage-format.md, "Segment index"; S-UI-7): its golden bytes, its
//! decoder against damage, and the store writing it as the log rolls: the ids and queue
//! definitions of every sealed segment, none for the segment the log appends to, stale ones
//! removed at open.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::Path;

use proptest::prelude::*;

use crate::store_checkpoint::golden;
use wharf_store::codec::{self, RecordKind, StoreRecord};
use wharf_store::segment_index::{self, SegmentIndex};
use wharf_wal::{FileStorage, Lsn, RecordRef, RecoveryMode, SegmentId};

fn example() -> SegmentIndex {
    SegmentIndex::new(
        SegmentId(3),
        Lsn(1000),
        vec![300, 9, 7, 12, 8, 10, 9],
        vec![32, 150, 4096],
    )
}

#[test]
fn s_ui_7_the_segment_index_is_the_documented_bytes() {
    let bytes = golden("segment-index");
    assert_eq!(example().encode(), bytes);
    let decoded = SegmentIndex::decode(&bytes, SegmentId(3)).unwrap();
    assert_eq!(decoded, example());
    assert_eq!(decoded.runs, vec![(7, 10), (12, 12), (300, 300)]);
    for (id, held) in [
        (6, false),
        (7, true),
        (10, true),
        (11, false),
        (12, true),
        (300, true),
    ] {
        assert_eq!(decoded.holds(id), held, "{id}");
    }
    assert!(
        SegmentIndex::decode(&bytes, SegmentId(4)).is_err(),
        "another segment"
    );
}

/// Re-seals `bytes` after an edit (a valid CRC over the damage).
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn s_ui_7_a_damaged_truncated_or_newer_index_is_refused() {
    let bytes = golden("segment-index");
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(
            SegmentIndex::decode(&damaged, SegmentId(3)).is_err(),
            "byte {at}"
        );
    }
    for len in 0..bytes.len() {
        assert!(
            SegmentIndex::decode(&bytes[..len], SegmentId(3)).is_err(),
            "{len} bytes"
        );
    }
    let mut newer = bytes.clone();
    newer[8] = 2;
    reseal(&mut newer);
    assert_eq!(
        SegmentIndex::decode(&newer, SegmentId(3)),
        Err("newer version")
    );
    // Counts that do not fill the bytes, with a valid CRC.
    let mut counts = bytes.clone();
    counts[28] = 2;
    reseal(&mut counts);
    assert!(SegmentIndex::decode(&counts, SegmentId(3)).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any ids and offsets come back as written; any bytes decode without a panic.
    #[test]
    fn s_ui_7_an_index_round_trips_and_no_bytes_panic_the_decoder(
        ids in proptest::collection::vec(any::<u64>(), 0..200),
        small in proptest::collection::vec(0u64..500, 0..200),
        mut offsets in proptest::collection::btree_set(any::<u64>(), 0..50),
        noise in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let all: Vec<u64> = ids.iter().chain(&small).copied().collect();
        let offsets: Vec<u64> = std::mem::take(&mut offsets).into_iter().collect();
        let index = SegmentIndex::new(SegmentId(9), Lsn(77), all.clone(), offsets);
        let bytes = index.encode();
        let back = SegmentIndex::decode(&bytes, SegmentId(9)).unwrap();
        prop_assert_eq!(&back, &index);
        for id in &all {
            prop_assert!(back.holds(*id));
        }
        for probe in 0..600u64 {
            prop_assert_eq!(back.holds(probe), all.contains(&probe));
        }
        let _ = SegmentIndex::decode(&noise, SegmentId(9));
        let mut mixed = bytes[..44.min(bytes.len())].to_vec();
        mixed.extend_from_slice(&noise);
        let _ = SegmentIndex::decode(&mixed, SegmentId(9));
    }
}

/// The message ids and definition offsets of each segment, by a full scan.
fn truth(dir: &Path) -> Vec<(SegmentId, Vec<u64>, Vec<u64>)> {
    let mut by: Vec<(SegmentId, Vec<u64>, Vec<u64>)> = Vec::new();
    wharf_wal::scan(
        &FileStorage,
        dir,
        RecoveryMode::Strict,
        &mut |r: RecordRef<'_>| {
            if by.last().is_none_or(|(s, _, _)| *s != r.position.segment) {
                by.push((r.position.segment, Vec::new(), Vec::new()));
            }
            let (_, ids, defs) = by.last_mut().unwrap();
            if r.kind == RecordKind::QueueDeclared.byte()
                || r.kind == RecordKind::QueueDeleted.byte()
            {
                defs.push(r.position.offset);
            }
            if let Ok(StoreRecord::Event(e)) = codec::decode(r.kind, r.payload) {
                ids.extend(event_ids(&e));
            }
            Ok(())
        },
    )
    .unwrap();
    by
}

fn event_ids(e: &wharf_broker::Event) -> Vec<u64> {
    use wharf_broker::Event;
    match e {
        Event::Published {
            message, scheduled, ..
        } => {
            let mut v = vec![message.message.id.0];
            v.extend(scheduled.map(|s| s.0));
            v
        }
        Event::Scheduled { message, .. } => vec![message.message.id.0],
        Event::DeadLettered { id, message, .. } => {
            let mut v = vec![id.0];
            v.extend(message.as_ref().map(|m| m.message.id.0));
            v
        }
        Event::Settled { ids, .. }
        | Event::Delivered { ids, .. }
        | Event::Returned { ids, .. }
        | Event::Purged { ids, .. }
        | Event::DeadLetterHeld { ids, .. } => ids.iter().map(|i| i.0).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn s_ui_7_the_store_indexes_every_segment_it_seals_and_removes_stale_indexes_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    wharf_inspect_free_workload(&dir);
    let segments = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    assert!(segments.len() > 5, "{segments:?}");
    let (last, sealed) = segments.split_last().unwrap();
    assert!(
        segment_index::load(&FileStorage, &dir, *last).is_none(),
        "the last segment has none"
    );
    let truth = truth(&dir);
    for (i, id) in sealed.iter().enumerate() {
        let index = segment_index::load(&FileStorage, &dir, *id).expect("a sealed segment's index");
        let next = wharf_wal::read_segment_header(&FileStorage, &dir, segments[i + 1]).unwrap();
        assert_eq!(index.next_first, next.first_lsn);
        let (_, ids, defs) = truth.iter().find(|(s, _, _)| s == id).unwrap();
        assert_eq!(&index.definitions, defs, "segment {id:?}");
        let exact = SegmentIndex::new(*id, index.next_first, ids.clone(), Vec::new());
        assert_eq!(index.runs, exact.runs, "segment {id:?}");
    }
    // Stale files: a half-written index, one of a segment long gone, one for the segment the
    // log appends to. The next open removes them and keeps the others.
    let name =
        |id: SegmentId, ext: &str| dir.join(format!("{}{ext}", wharf_wal::segment_file_name(id)));
    std::fs::write(name(sealed[0], ".idx.tmp"), b"x").unwrap();
    std::fs::write(name(SegmentId(last.0 + 1000), ".idx"), b"x").unwrap();
    std::fs::copy(name(sealed[0], ".idx"), name(*last, ".idx")).unwrap();
    let (store, _, _) = wharf_store::Store::open(&wharf_store::StoreConfig {
        dir: dir.clone(),
        salvage: false,
    })
    .unwrap();
    store.close().unwrap();
    assert!(!name(sealed[0], ".idx.tmp").exists());
    assert!(!name(SegmentId(last.0 + 1000), ".idx").exists());
    assert!(!name(*last, ".idx").exists());
    assert!(name(sealed[0], ".idx").exists());
}

/// A small workload straight on the store: queues declared between messages, published,
/// delivered, acked or returned, over 4 KiB segments.
fn wharf_inspect_free_workload(dir: &Path) {
    use crate::broker_common::{H, persistent};
    use std::sync::Arc;
    use wharf_broker::{Command, FieldTable};
    let config = wharf_store::StoreConfig {
        dir: dir.to_owned(),
        salvage: false,
    };
    let wal = wharf_wal::WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..wharf_wal::WalConfig::default()
    };
    let (store, mut broker, _) =
        wharf_store::Store::open_with(&config, Arc::new(FileStorage), &wal).unwrap();
    let chan = crate::broker_common::CH;
    let now = 1_700_000_000_000;
    let mut run = |cmd: Command| {
        let o = broker.handle(cmd, now).unwrap();
        store.log(&o.events, &mut Vec::new()).unwrap();
        o
    };
    run(Command::ConnectionOpen {
        conn: chan.conn,
        vhost: "/".into(),
    });
    run(Command::ChannelOpen { chan });
    for i in 0..150u32 {
        if i % 7 == 0 {
            run(H::queue_cmd(&format!("q{i}"), true, FieldTable::new()));
        }
        let queue = format!("q{}", i / 7 * 7);
        run(H::publish_cmd("", &queue, persistent(), &[b'b'; 150]));
        let got = run(Command::Get {
            chan,
            queue,
            no_ack: false,
        });
        if let wharf_broker::Reply::GetOk(ok) = got.reply {
            run(Command::Reject {
                chan,
                delivery_tag: ok.delivery_tag.0,
                requeue: i % 3 == 0,
            });
        }
    }
    let ticket = store.log(&[], &mut Vec::new()).unwrap();
    let _ = ticket;
    store.close().unwrap();
}

#[test]
fn s_ui_25_a_segment_deleted_by_a_checkpoint_takes_its_index_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    wharf_inspect_free_workload(&dir);
    let before = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    let indexed = |dir: &Path| -> Vec<SegmentId> {
        let mut ids: Vec<SegmentId> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                wharf_wal::parse_segment_file_name(name.strip_suffix(".idx")?)
            })
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(indexed(&dir), before[..before.len() - 1]);
    let config = wharf_store::StoreConfig {
        dir: dir.clone(),
        salvage: false,
    };
    let (mut store, broker, _) = wharf_store::Store::open(&config).unwrap();
    store.checkpoint_now(broker.snapshot()).unwrap();
    store.close().unwrap();
    let after = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");
    let left = indexed(&dir);
    assert!(!left.is_empty() || after.len() <= 2, "{after:?}");
    for id in &left {
        assert!(after.contains(id), "index of deleted segment {id:?}");
    }
}
