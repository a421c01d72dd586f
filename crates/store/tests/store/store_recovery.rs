//! How recovery treats a damaged or foreign log (S-DUR-7): damage in the middle of the log,
//! an intact record that does not decode, a record the model refuses, and a newer format stop
//! recovery with the file and offset named, unless salvage is asked for; a settle of a message
//! the queue does not hold is harmless. Also: an event that cannot be encoded appends nothing,
//! and the store works on real files.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::path::Path;
use std::sync::Arc;

use store_common::{Driver, Op, log, open, setup, store_config, wal_config};
use wharf_broker::{Event, MessageId, SettleKind};
use wharf_store::codec::{self, RecordKind};
use wharf_store::{Store, StoreConfig, StoreError};
use wharf_wal::{SimStorage, Wal, WalConfig, segment_file_name};

/// A log holding the setup and `publishes` persistent messages to `q0`, closed cleanly.
fn logged_workload(publishes: usize) -> (SimStorage, Driver) {
    let sim = SimStorage::new(7);
    let (store, _, _) = open(&sim).unwrap();
    let mut live = Driver::new();
    let publish = Op::Publish {
        exchange: None,
        key: 0,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len: 300,
    };
    for op in setup()
        .iter()
        .chain(std::iter::repeat_n(&publish, publishes))
    {
        let events = live.apply(op);
        log(&store, &events).unwrap();
    }
    store.close().unwrap();
    (sim, live)
}

fn open_salvage(
    sim: &SimStorage,
) -> Result<(Store, wharf_broker::Broker, wharf_store::RecoverySummary), StoreError> {
    Store::open_with(&store_config(true), Arc::new(sim.clone()), &wal_config())
}

/// Appends raw records after what is in the log, as a foreign or buggy writer would.
fn append_raw(sim: &SimStorage, records: &[(u8, Vec<u8>)]) {
    let dir = store_config(false).dir;
    let (wal, _) = Wal::open(&dir, Arc::new(sim.clone()), &wal_config(), &mut |_| Ok(())).unwrap();
    let appender = wal.appender();
    for (kind, payload) in records {
        appender.append_durable(*kind, payload).unwrap();
    }
    wal.close().unwrap();
}

fn encoded(e: &Event) -> (u8, Vec<u8>) {
    let mut out = Vec::new();
    let kind = codec::encode_event(e, &mut out).unwrap();
    (kind.byte(), out)
}

fn segment(id: u64) -> std::path::PathBuf {
    store_config(false)
        .dir
        .join(segment_file_name(wharf_wal::SegmentId(id)))
}

#[test]
fn s_dur_7_corruption_mid_log_names_file_and_offset_unless_salvaged() {
    let (sim, live) = logged_workload(40);
    let first = segment(0);
    let mut bytes = sim.file_bytes(&first).unwrap();
    assert!(
        sim.file_bytes(&segment(1)).is_some(),
        "the workload spans segments"
    );
    // A bit flipped in the middle of the first (sealed) segment.
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    sim.set_file_bytes(&first, bytes);
    match open(&sim) {
        Err(StoreError::Corrupt { path, offset, .. }) => {
            assert_eq!(path, first);
            assert!(
                offset <= at as u64,
                "offset {offset} after the damage at {at}"
            );
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, _, s)| s)),
    }
    let (_, recovered, summary) = open_salvage(&sim).unwrap();
    assert!(summary.salvaged_records >= 1, "{summary:?}");
    let lost = usize::try_from(summary.salvaged_records).unwrap();
    let live_msgs = live.broker.durable_state().queues[0].1.len();
    let got = recovered.durable_state().queues[0].1.len();
    assert!(
        got + lost >= live_msgs && got < live_msgs,
        "{got} of {live_msgs}, {lost} lost"
    );
}

#[test]
fn s_dur_7_an_intact_record_that_does_not_decode_stops_recovery() {
    let (sim, live) = logged_workload(3);
    append_raw(&sim, &[(0x7f, b"not a store record".to_vec())]);
    match open(&sim) {
        Err(StoreError::Corrupt {
            path, lsn, reason, ..
        }) => {
            assert_eq!(path, segment(0));
            assert!(lsn.is_some());
            assert!(
                reason.to_string().contains("unknown record kind"),
                "{reason}"
            );
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, _, s)| s)),
    }
    let (_, recovered, summary) = open_salvage(&sim).unwrap();
    assert_eq!(summary.salvaged_records, 1);
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

#[test]
fn s_dur_7_a_record_the_model_refuses_stops_recovery() {
    // A message for a queue that was never declared: the log is not this broker's.
    let (sim, live) = logged_workload(2);
    let Event::Published { vhost, message, .. } = live
        .events
        .iter()
        .rev()
        .find(|e| matches!(e, Event::Published { .. }))
        .unwrap()
        .clone()
    else {
        unreachable!()
    };
    let foreign = Event::Published {
        vhost,
        message,
        queues: vec!["nowhere".into()],
        scheduled: None,
    };
    append_raw(&sim, &[encoded(&foreign)]);
    match open(&sim) {
        Err(StoreError::Inconsistent {
            path, lsn, reason, ..
        }) => {
            assert_eq!(path, segment(0));
            assert!(lsn > 0);
            assert!(reason.to_string().contains("unknown queue"), "{reason}");
        }
        other => panic!("expected Inconsistent, got {:?}", other.map(|(_, _, s)| s)),
    }
    let (_, recovered, summary) = open_salvage(&sim).unwrap();
    assert_eq!(summary.salvaged_records, 1);
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

#[test]
fn a_settle_of_a_message_the_queue_lacks_is_ignored_by_replay() {
    // Broker::apply ignores it (the message may have been removed by an earlier record).
    let (sim, live) = logged_workload(2);
    let stray = Event::Settled {
        vhost: "/".into(),
        queue: "q0".into(),
        ids: vec![MessageId(999_999)],
        kind: SettleKind::Ack,
    };
    let unknown_queue = Event::Settled {
        vhost: "/".into(),
        queue: "nowhere".into(),
        ids: vec![MessageId(1)],
        kind: SettleKind::Ack,
    };
    append_raw(&sim, &[encoded(&stray), encoded(&unknown_queue)]);
    let (_, recovered, summary) = open(&sim).unwrap();
    assert_eq!(summary.events, live.events.len() as u64 + 2);
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

#[test]
fn a_newer_store_format_is_refused_even_when_salvaging() {
    let (sim, _) = logged_workload(1);
    let newer = codec::STORE_FORMAT_VERSION + 1;
    append_raw(
        &sim,
        &[(RecordKind::Format.byte(), newer.to_le_bytes().to_vec())],
    );
    for result in [open(&sim), open_salvage(&sim)] {
        match result {
            Err(StoreError::UnsupportedVersion { found, path, .. }) => {
                assert_eq!(found, newer);
                assert_eq!(path, segment(0));
            }
            other => panic!(
                "expected UnsupportedVersion, got {:?}",
                other.map(|(_, _, s)| s)
            ),
        }
    }
}

#[test]
fn an_event_that_cannot_be_encoded_appends_nothing_of_its_batch() {
    let sim = SimStorage::new(3);
    let (store, _, _) = open(&sim).unwrap();
    let good = Event::VhostAdded { vhost: "v".into() };
    let bad = Event::VhostAdded {
        vhost: "v".repeat(70_000),
    };
    let before = store
        .log(std::slice::from_ref(&good), &mut Vec::new())
        .unwrap()
        .unwrap();
    assert!(matches!(
        store.log(&[good.clone(), bad], &mut Vec::new()),
        Err(StoreError::Encode(_))
    ));
    let ticket = store
        .log(std::slice::from_ref(&good), &mut Vec::new())
        .unwrap()
        .unwrap();
    assert_eq!(ticket, before + 1, "the refused batch took no Lsn");
    store.close().unwrap();
    let (_, _, summary) = open(&sim).unwrap();
    assert_eq!(summary.events, 2);
}

#[test]
fn s_dur_2_the_store_on_real_files_recovers_what_it_logged() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        dir: dir.path().join("data"),
        salvage: false,
    };
    let (store, _, summary) = Store::open(&config).unwrap();
    assert_eq!(summary.events, 0);
    let mut live = Driver::new();
    let mut ticket = 0;
    for op in setup() {
        ticket = log(&store, &live.apply(&op)).unwrap().max(ticket);
    }
    for i in 0..50 {
        let events = live.apply(&Op::Publish {
            exchange: Some(1),
            key: 0,
            persistent: i % 5 != 0,
            expiration_ms: None,
            delay_ms: (i % 7 == 0).then_some(1000),
            body_len: 100,
        });
        ticket = log(&store, &events).unwrap().max(ticket);
    }
    futures_lite_block_on(store.durable(ticket)).unwrap();
    assert!(store.durable_watermark() >= ticket);
    store.close().unwrap();
    let (_, recovered, summary) = Store::open(&config).unwrap();
    assert!(
        Path::new(&config.dir)
            .join(segment_file_name(wharf_wal::SegmentId(0)))
            .exists()
    );
    assert_eq!(summary.events, live.events.len() as u64);
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

/// Runs a future to completion on this thread (the store's futures need no runtime).
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

#[test]
fn wal_config_is_validated_through_the_store() {
    let sim = SimStorage::new(1);
    let bad = WalConfig {
        segment_bytes_max: 10,
        ..WalConfig::default()
    };
    assert!(matches!(
        Store::open_with(&store_config(false), Arc::new(sim), &bad),
        Err(StoreError::Open(_))
    ));
}
