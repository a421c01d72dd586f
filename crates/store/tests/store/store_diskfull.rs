//! A full disk and checkpoints, on the simulated disk (S-DISK-1, S-DISK-3, S-DISK-4): a
//! checkpoint that runs out of space removes its partial file at once; one that would take the
//! space the log needs is deferred (and counted in the disk demand the alarm sees) until acks
//! shrink it, and then frees the space by itself, while every log write keeps succeeding.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::sync::Arc;

use store_common::{Driver, Op, log, setup, store_config};
use wharf_store::{CheckpointDone, CheckpointTrigger, LogHealth, Store, StoreError};
use wharf_wal::{SimStorage, Storage, WalConfig};

const SEGMENT_BYTES: u64 = 64 * 1024;

fn open(sim: &SimStorage) -> Store {
    let config = WalConfig {
        segment_bytes_max: SEGMENT_BYTES,
        preallocate: false,
        ..WalConfig::default()
    };
    let (store, _, _) =
        Store::open_with(&store_config(false), Arc::new(sim.clone()), &config).unwrap();
    store
}

fn files(sim: &SimStorage) -> Vec<String> {
    sim.list(&store_config(false).dir).unwrap()
}

/// A store holding `n` persistent messages of 1000 bytes in `q0`.
fn filled(sim: &SimStorage, n: usize) -> (Store, Driver) {
    let store = open(sim);
    let mut live = Driver::new();
    for op in &setup() {
        log(&store, &live.apply(op)).unwrap();
    }
    for _ in 0..n {
        let publish = Op::Publish {
            exchange: None,
            key: 0,
            persistent: true,
            expiration_ms: None,
            delay_ms: None,
            body_len: 1000,
        };
        let ticket = log(&store, &live.apply(&publish)).unwrap();
        store.wait_durable(ticket).unwrap();
    }
    (store, live)
}

#[test]
fn s_disk_4_a_checkpoint_that_finds_the_disk_full_removes_its_partial_file_at_once() {
    let sim = SimStorage::new(41);
    let (mut store, live) = filled(&sim, 300);
    sim.set_capacity(Some(sim.used_bytes() + 50 * 1024));
    let err = store.checkpoint_now(live.broker.snapshot()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull),
        "{err:?}"
    );
    assert!(
        !files(&sim).iter().any(|n| n.ends_with(".checkpoint.tmp")),
        "partial checkpoint left behind: {:?}",
        files(&sim)
    );
    // Space back: the next one is written and the log kept everything meanwhile.
    sim.set_capacity(None);
    store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    store.close().unwrap();
    let (_, recovered, _) = Store::open_with(
        &store_config(false),
        Arc::new(sim),
        &WalConfig {
            segment_bytes_max: SEGMENT_BYTES,
            ..WalConfig::default()
        },
    )
    .unwrap();
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

#[test]
fn s_disk_3_a_checkpoint_that_does_not_fit_waits_for_acks_and_then_frees_the_space() {
    let sim = SimStorage::new(42);
    let (mut store, mut live) = filled(&sim, 400);
    store.set_checkpoint_trigger(CheckpointTrigger {
        space_floor_bytes: 1 << 30,
        ..CheckpointTrigger::default()
    });
    let health = LogHealth::of(&store);
    assert_eq!(
        health.demand_bytes(),
        SEGMENT_BYTES + 400 * 256,
        "the next segment, and an allowance of checkpoint per message logged (S-DISK-10)"
    );
    // Little room left: less than the checkpoint of 400 KB of messages would take.
    sim.set_capacity(Some(sim.used_bytes() + 100 * 1024));
    let full_used = sim.used_bytes();
    let mut deferred_seen = false;
    let mut taken = None;
    for drained in 1..=400 {
        let events = live.apply(&Op::Get { q: 0, no_ack: true });
        let ticket = log(&store, &events).unwrap();
        // Acks always find room in the log (S-DISK-3).
        store.wait_durable(ticket).unwrap();
        if store.maybe_checkpoint(&live.broker) {
            let done = store.wait_checkpoint().unwrap().unwrap();
            taken = Some((drained, done));
            break;
        }
        // Deferred: counted as demand at its estimate, at least its messages' allowances.
        deferred_seen |= store.waits_for_space()
            && health.demand_bytes() >= SEGMENT_BYTES + (400 - drained) * 256;
    }
    let (drained, done) = taken.expect("no checkpoint freed the space");
    assert!(
        deferred_seen,
        "the deferred checkpoint was never counted as demand"
    );
    assert!(drained < 400, "it waited for the queue to be empty");
    assert!(sim.used_bytes() < full_used, "the checkpoint freed nothing");
    assert!(health.demand_bytes() <= SEGMENT_BYTES + 2 * done.bytes);
    assert!(!files(&sim).iter().any(|n| n.ends_with(".checkpoint.tmp")));
}

/// The same at another step: the checkpoint's own fsync fails. Its file goes at once, and the
/// log, which never depended on it, still holds everything.
#[test]
fn s_disk_4_a_checkpoint_whose_sync_fails_removes_its_partial_file_at_once() {
    let sim = SimStorage::new(43);
    let (mut store, live) = filled(&sim, 50);
    sim.fail_sync_after(0);
    assert!(store.checkpoint_now(live.broker.snapshot()).is_err());
    assert!(
        !files(&sim).iter().any(|n| n.contains(".checkpoint")),
        "{:?}",
        files(&sim)
    );
    store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
}

/// The disk holds at least a segment less than the `before` bytes it held.
fn assert_freed_a_segment(sim: &SimStorage, before: u64) {
    assert!(
        sim.used_bytes() + SEGMENT_BYTES <= before,
        "{} used before, {} after: {:?}",
        before,
        sim.used_bytes(),
        files(sim)
    );
}

/// A store whose 150 messages were published (and checkpointed, when `checkpoint`) then
/// drained, under space pressure (a space floor above any free space).
fn drained(sim: &SimStorage, checkpoint: bool) -> (Store, Driver) {
    let (mut store, mut live) = filled(sim, 150);
    if checkpoint {
        store
            .checkpoint_now(live.broker.snapshot())
            .unwrap()
            .unwrap();
    }
    for _ in 0..150 {
        let events = live.apply(&Op::Get { q: 0, no_ack: true });
        let ticket = log(&store, &events).unwrap();
        store.wait_durable(ticket).unwrap();
    }
    store.set_checkpoint_trigger(CheckpointTrigger {
        space_floor_bytes: 1 << 30,
        ..CheckpointTrigger::default()
    });
    (store, live)
}

/// A store whose 150 messages were published and drained, on a disk then left with `room`
/// bytes free, under space pressure: the checkpoint it takes now gives the drained segments
/// back (at least a segment's worth), and nothing stays counted as demand but the next
/// segment. Returns the disk and what the checkpoint did.
fn drained_then_checkpointed(seed: u64, room: u64) -> (SimStorage, CheckpointDone) {
    let sim = SimStorage::new(seed);
    let (mut store, live) = drained(&sim, false);
    sim.set_capacity(Some(sim.used_bytes() + room));
    let before = sim.used_bytes();
    assert!(
        store.maybe_checkpoint(&live.broker),
        "the checkpoint that frees the drained segments was deferred: {:?}",
        files(&sim)
    );
    let done = store.wait_checkpoint().unwrap().unwrap();
    assert_freed_a_segment(&sim, before);
    // Nothing deferred stays counted: the next segment, and room for the next checkpoint,
    // about the size of this drained one (S-DISK-10).
    let demand = LogHealth::of(&store).demand_bytes();
    assert!(
        demand > SEGMENT_BYTES && demand <= SEGMENT_BYTES + 2 * done.bytes,
        "demand {demand}, checkpoint {done:?}"
    );
    (sim, done)
}

/// S-DISK-3 (found by the whole-server simulation): a queue drained on a disk left with less
/// room than a segment. The checkpoint that would give the drained segments back cannot leave
/// the log room for one more segment, but the log has no room for one anyway (its acks go
/// into the segment already reserved), so it is written: waiting for it to "fit" waited for
/// good, and the disk alarm stayed on with every queue empty.
#[test]
fn s_disk_3_a_drained_log_with_no_room_for_a_segment_still_checkpoints_and_frees_it() {
    drained_then_checkpointed(44, SEGMENT_BYTES / 4);
}

/// S-DISK-3 (whole-server simulation seeds 412, 935, 1961, 3024, 4288, 5598, 8127, 9477): a
/// queue drained on a disk left with a little more room than a segment, but less than a
/// segment and the checkpoint together. The checkpoint takes a few hundred bytes of the room
/// the log's next segment needs only while it is written: once durable it gives back the
/// drained segments, far more. It is written, not deferred: deferred, it waited for acks
/// that could not shrink it (the queues were empty), and the disk alarm stayed on with every
/// queue empty and publishers blocked for good.
#[test]
fn s_disk_3_a_drained_log_checkpoints_when_what_it_frees_leaves_room_for_a_segment() {
    // Room for a segment and 100 bytes: less than a segment and any checkpoint.
    let (sim, done) = drained_then_checkpointed(45, SEGMENT_BYTES + 100);
    assert_eq!(done.segments_deleted, 2, "{done:?}");
    // The log still has room for its next segment (S-DISK-1).
    let free = sim
        .available_bytes(&store_config(false).dir)
        .unwrap()
        .unwrap();
    assert!(free >= SEGMENT_BYTES, "{free}");
}

/// S-DISK-2, S-DISK-3 (whole-server simulation seed 8290): the checkpoint that would give a
/// drained log's space back (here the previous checkpoint, which carries the drained
/// messages) fails (its fsync) on a short disk. Nothing more is logged
/// (under the disk alarm publishers are blocked; the queues are empty), so a retry "after
/// more log" never came and the alarm stayed on. The store says it waits for space, and the
/// broker task's once-a-second turn (`recheck_space`) tries it again with nothing logged.
#[test]
fn s_disk_3_a_failed_checkpoint_on_a_short_disk_is_retried_with_nothing_logged() {
    let sim = SimStorage::new(46);
    let (mut store, live) = drained(&sim, true);
    sim.set_capacity(Some(sim.used_bytes() + SEGMENT_BYTES + 100));
    assert!(!store.waits_for_space());
    sim.fail_sync_after(0);
    assert!(store.maybe_checkpoint(&live.broker));
    assert!(store.wait_checkpoint().unwrap().is_err());
    assert!(!files(&sim).iter().any(|n| n.ends_with(".checkpoint.tmp")));
    assert!(
        store.waits_for_space(),
        "a failed checkpoint on a short disk"
    );
    for _ in 0..3 {
        assert!(
            !store.maybe_checkpoint(&live.broker),
            "retried at every batch"
        );
    }
    store.recheck_space();
    let before = sim.used_bytes();
    assert!(store.maybe_checkpoint(&live.broker), "not retried");
    store.wait_checkpoint().unwrap().unwrap();
    assert_freed_a_segment(&sim, before);
    assert!(!store.waits_for_space());
}

/// S-DISK-10 (whole-server simulation seeds 42982 and 55439): the disk demand keeps room for
/// the checkpoint that gives segments back, always, not only while one is deferred or being
/// written. Counted only then, the alarm cleared with free space for the next segment but
/// not for it; publishers filled that segment, the acks of the drain then needed one more,
/// which did not fit, nor did the checkpoint (which also needs the log durable first): the
/// log stayed paused and the consumer got nothing, with the alarm on, for good.
#[test]
fn s_disk_10_the_disk_demand_keeps_room_for_the_next_checkpoint() {
    let sim = SimStorage::new(47);
    let (mut store, mut live) = filled(&sim, 40);
    let health = LogHealth::of(&store);
    // Each message logged counts its allowance in the next checkpoint.
    let full = health.demand_bytes();
    assert!(full >= SEGMENT_BYTES + 40 * 256, "demand {full}");
    // A checkpoint's estimate sets it; once the queue is drained, the next one is small.
    store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    assert!(health.demand_bytes() >= SEGMENT_BYTES + 40 * 256);
    for _ in 0..40 {
        let events = live.apply(&Op::Get { q: 0, no_ack: true });
        let ticket = log(&store, &events).unwrap();
        store.wait_durable(ticket).unwrap();
    }
    let done = store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    let drained = health.demand_bytes();
    assert!(
        drained > SEGMENT_BYTES && drained <= SEGMENT_BYTES + 2 * done.bytes,
        "demand {drained} after a drained checkpoint {done:?}"
    );
    store.close().unwrap();
}

/// S-DISK-10: a reopened store keeps that room from its start, before any estimate: the
/// allowance of the messages it recovered.
#[test]
fn s_disk_10_a_reopened_store_keeps_room_for_the_checkpoint_of_what_it_recovered() {
    let sim = SimStorage::new(48);
    let (store, _live) = filled(&sim, 40);
    store.close().unwrap();
    let store = open(&sim);
    let demand = LogHealth::of(&store).demand_bytes();
    assert!(demand >= SEGMENT_BYTES + 40 * 256, "demand {demand}");
    store.close().unwrap();
}
