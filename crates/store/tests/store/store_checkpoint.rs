//! Checkpoints: recovery from the newest checkpoint plus the log after it must equal the live
//! durable state (S-DUR-1, S-DUR-2), a checkpoint cut short by a crash must never matter, a
//! damaged one must be refused naming the file (S-DUR-7), and the segments a checkpoint covers
//! must go, so that disk use follows the live data, not the history.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use store_common::{Driver, Op, T0_MS, log, log_for, op, replay, setup, store_config};
use wharf_broker::{
    Broker, Command, Event, FieldTable, Message, MessageId, Properties, QueueSnapshot, Snapshot,
    SnapshotMessage,
};
use wharf_store::checkpoint;
use wharf_store::{CheckpointTrigger, RecoverySummary, Store, StoreError};
use wharf_wal::{Lsn, SimStorage, Storage, WalConfig};

fn data_dir() -> PathBuf {
    store_config(false).dir
}

fn wal_config(segment_bytes_max: u64) -> WalConfig {
    WalConfig {
        segment_bytes_max,
        preallocate: false,
        ..WalConfig::default()
    }
}

fn open_on(
    sim: &SimStorage,
    segment_bytes_max: u64,
    salvage: bool,
) -> Result<(Store, Broker, RecoverySummary), StoreError> {
    Store::open_with(
        &store_config(salvage),
        Arc::new(sim.clone()),
        &wal_config(segment_bytes_max),
    )
}

fn open(sim: &SimStorage) -> Result<(Store, Broker, RecoverySummary), StoreError> {
    open_on(sim, wharf_wal::SEGMENT_BYTES_MIN, false)
}

fn files(sim: &SimStorage) -> Vec<String> {
    let mut names = sim.list(&data_dir()).unwrap();
    names.sort();
    names
}

fn segments(sim: &SimStorage) -> usize {
    files(sim)
        .iter()
        .filter(|n| wharf_wal::parse_segment_file_name(n).is_some())
        .count()
}

fn dir_bytes(sim: &SimStorage) -> u64 {
    files(sim)
        .iter()
        .map(|n| sim.file_bytes(&data_dir().join(n)).unwrap().len() as u64)
        .sum()
}

/// Every message of every durable queue, content included, as replay holds them (unacked ones
/// back in their queue): what `durable_state` does not compare (bodies, properties).
type QueueMessages = Vec<(String, Vec<(Arc<Message>, bool)>)>;

fn messages(b: &Broker) -> QueueMessages {
    let state = b.durable_state();
    state
        .queues
        .iter()
        .map(|(q, _)| (q.name.clone(), b.ready_messages(&q.vhost, &q.name)))
        .collect()
}

/// Runs `ops` on a live broker logging to a store, taking a checkpoint wherever `points` says
/// (explicitly, or through the periodic trigger set to fire at once), then cuts the power
/// once everything is durable; recovery must give the live durable state, and the messages
/// replay of the whole event history gives, bodies included.
///
/// With `paging`, the live broker leaves the content of every durable queued message on disk
/// as soon as its record is durable (a memory budget of 0), so deliveries, dead-letterings and
/// checkpoints read messages back from segments and from checkpoints, also after the segments
/// they were written to were deleted (DESIGN "Memory").
fn run_with_checkpoints(seed: u64, ops: &[Op], points: &[u8], paging: bool) {
    let sim = SimStorage::new(seed);
    let (mut store, _, _) = open(&sim).unwrap();
    let mut live = Driver::new();
    live.broker.set_loader(store.loader());
    // The same operations on a broker that keeps everything in memory.
    let mut plain = Driver::new();
    let mut ticket = 0;
    for (i, op) in setup().iter().chain(ops).enumerate() {
        let events = live.apply(op);
        if paging {
            plain.apply(op);
        }
        ticket = ticket.max(log_for(&store, &mut live.broker, &events).unwrap());
        if paging {
            store.wait_durable(ticket).unwrap();
            live.broker.page_out(ticket, 0);
            assert_eq!(live.broker.storage_failure(), None);
        }
        match points.get(i).copied().unwrap_or(0) {
            1 => {
                store.checkpoint_now(live.broker.snapshot()).unwrap();
            }
            2 => {
                store.set_checkpoint_trigger(CheckpointTrigger {
                    enabled: true,
                    log_bytes_min: 0,
                    ..Default::default()
                });
                if store.maybe_checkpoint(&live.broker) {
                    store.wait_checkpoint().unwrap().unwrap();
                }
                store.set_checkpoint_trigger(CheckpointTrigger {
                    enabled: false,
                    log_bytes_min: 0,
                    ..Default::default()
                });
            }
            _ => {}
        }
    }
    store.wait_durable(ticket).unwrap();
    if paging {
        // Everything paged out read back as it was written, wherever it was by then: the
        // dead-lettered copies made from it and what is still queued are the same.
        assert_eq!(live.events, plain.events);
        assert_eq!(messages(&live.broker), messages(&plain.broker));
    }
    let checkpointed = store.checkpoint_lsn();
    drop(store);
    let sim = sim.power_loss();
    let (store, mut recovered, summary) = open(&sim).unwrap();
    assert_eq!(summary.checkpoint_lsn, checkpointed);
    recovered.check_invariants();
    let want = live.broker.durable_state();
    assert_eq!(recovered.durable_state(), want, "checkpoint + tail");
    assert_eq!(messages(&recovered), messages(&replay(&live.events)));

    // End recovery, checkpoint that, lose power again: the next start agrees too.
    let end = recovered.recovered(live.now_ms + 1);
    let ticket = log(&store, &end.events).unwrap();
    store.wait_durable(ticket).unwrap();
    let mut store = store;
    store.checkpoint_now(recovered.snapshot()).unwrap();
    let after = recovered.durable_state();
    // Read while the store is open: a stored message is read back through it.
    let after_messages = messages(&recovered);
    drop(store);
    let sim = sim.power_loss();
    let (_store, again, summary) = open(&sim).unwrap();
    assert!(summary.checkpoint_lsn.is_some());
    assert_eq!(again.durable_state(), after, "second recovery");
    assert_eq!(messages(&again), after_messages);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn s_dur_1_2_checkpoint_plus_tail_equals_live_durable_state(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..80),
        points in prop::collection::vec(prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)], 0..100),
    ) {
        run_with_checkpoints(seed, &ops, &points, false);
    }

    #[test]
    fn s_dur_1_2_paged_out_messages_read_back_from_segments_and_checkpoints(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..80),
        points in prop::collection::vec(prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)], 0..100),
    ) {
        run_with_checkpoints(seed, &ops, &points, true);
    }
}

/// A fixed workload over every kind of durable state: definitions, policies, persistent
/// messages with TTLs, unacked and redelivered messages, dead-lettering, scheduled messages.
fn script() -> Vec<Op> {
    let mut ops = setup();
    ops.push(Op::PolicySet {
        pattern: 2,
        ttl_ms: Some(100_000),
        max_length: None,
    });
    for i in 0..40usize {
        ops.push(Op::Publish {
            exchange: match i % 5 {
                0 => Some(1),
                3 => Some(3),
                _ => None,
            },
            key: i % 3,
            persistent: i % 4 != 3,
            expiration_ms: (i % 6 == 0).then_some(50_000),
            delay_ms: (i % 5 == 3).then_some(60_000),
            body_len: 50 + i,
        });
        if i % 3 == 1 {
            ops.push(Op::Get {
                q: i % 3,
                no_ack: false,
            });
        }
        if i % 7 == 2 {
            ops.push(Op::Reject {
                pick: 0,
                requeue: true,
            });
        }
        if i % 9 == 4 {
            ops.push(Op::Ack {
                pick: 0,
                multiple: false,
            });
        }
    }
    ops
}

/// The live broker and store after the script, everything durable.
fn scripted(sim: &SimStorage) -> (Store, Driver) {
    let (store, _, _) = open(sim).unwrap();
    let mut live = Driver::new();
    let mut ticket = 0;
    for op in &script() {
        let events = live.apply(op);
        ticket = ticket.max(log(&store, &events).unwrap());
    }
    store.wait_durable(ticket).unwrap();
    (store, live)
}

fn checkpoint_files(sim: &SimStorage) -> Vec<String> {
    files(sim)
        .into_iter()
        .filter(|n| n.contains(".checkpoint"))
        .collect()
}

#[test]
fn s_dur_7_crash_while_writing_a_checkpoint_recovers_from_the_log() {
    // The checkpoint's own fsync fails (the file is half written, never renamed), then the
    // power goes: the temporary file is ignored and removed, the log alone recovers all.
    for seed in 0..8 {
        let sim = SimStorage::new(seed);
        let (mut store, live) = scripted(&sim);
        sim.fail_sync_after(0);
        let err = store.checkpoint_now(live.broker.snapshot()).unwrap_err();
        assert!(err.to_string().contains(".checkpoint.tmp"), "{err}");
        assert_eq!(store.checkpoint_lsn(), None);
        drop(store);
        let sim = sim.power_loss();
        let (_store, recovered, summary) = open(&sim).unwrap();
        assert_eq!(summary.checkpoint_lsn, None);
        assert_eq!(recovered.durable_state(), live.broker.durable_state());
        assert!(checkpoint_files(&sim).is_empty(), "{:?}", files(&sim));
    }
}

#[test]
fn s_dur_7_power_loss_before_the_directory_sync_keeps_either_checkpoint_or_log() {
    // The rename is done but the directory sync fails: after the power loss the checkpoint
    // may or may not be there. Nothing was deleted, so recovery is right either way.
    let mut outcomes = [false, false];
    for seed in 0..16 {
        let sim = SimStorage::new(seed);
        let (mut store, live) = scripted(&sim);
        sim.fail_sync_after(1);
        store.checkpoint_now(live.broker.snapshot()).unwrap_err();
        drop(store);
        let sim = sim.power_loss();
        let (_store, recovered, summary) = open(&sim).unwrap();
        outcomes[usize::from(summary.checkpoint_lsn.is_some())] = true;
        assert_eq!(recovered.durable_state(), live.broker.durable_state());
        assert!(!files(&sim).iter().any(|n| n.contains(".tmp")));
    }
    assert_eq!(
        outcomes,
        [true, true],
        "both outcomes reached over the seeds"
    );
}

#[test]
fn s_dur_7_a_damaged_checkpoint_is_refused_naming_the_file() {
    let sim = SimStorage::new(3);
    let (mut store, live) = scripted(&sim);
    let done = store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    store.close().unwrap();
    let path = data_dir().join(checkpoint::file_name(Lsn(done.lsn)));
    let mut bytes = sim.file_bytes(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    sim.set_file_bytes(&path, bytes);
    let err = open(&sim).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptCheckpoint { path: p, .. } if *p == path),
        "{err}"
    );
    // Cut short (a file that lost its end) is refused too.
    let mut bytes = sim.file_bytes(&path).unwrap();
    bytes[at] ^= 0x40;
    bytes.truncate(bytes.len() - 3);
    sim.set_file_bytes(&path, bytes);
    let err = open(&sim).unwrap_err();
    assert!(matches!(err, StoreError::CorruptCheckpoint { .. }), "{err}");
    // Salvage mode (the operator's explicit choice) skips it and replays what the log has
    // left (its covered segments are gone, so that is only the tail).
    let (_store, _, summary) = open_on(&sim, wharf_wal::SEGMENT_BYTES_MIN, true).unwrap();
    assert_eq!(summary.checkpoint_lsn, None);
    assert!(done.segments_deleted > 0);
}

#[test]
fn a_log_without_checkpoint_still_recovers_and_the_next_start_uses_one() {
    let sim = SimStorage::new(4);
    let (store, live) = scripted(&sim);
    store.close().unwrap();
    let (mut store, recovered, summary) = open(&sim).unwrap();
    assert_eq!(summary.checkpoint_lsn, None);
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
    let done = store.checkpoint_now(recovered.snapshot()).unwrap().unwrap();
    store.close().unwrap();
    let (_store, again, summary) = open(&sim).unwrap();
    assert_eq!(summary.checkpoint_lsn, Some(done.lsn));
    assert!(summary.checkpoint_messages > 0);
    // Everything comes from the checkpoint (format 4 keeps the segments it refers to, but
    // replays none of their records).
    assert_eq!(summary.events, 0, "{summary:?}");
    assert_eq!(again.durable_state(), live.broker.durable_state());
    assert_eq!(checkpoint_files(&sim).len(), 1);
}

/// Publishes a persistent message to `q0` through the default exchange and takes it with
/// `no_ack`, so the pair logs a publish and a settle and leaves nothing behind.
fn publish_and_take(live: &mut Driver, body_len: usize) -> Vec<Event> {
    let mut events = live.apply(&Op::Publish {
        exchange: None,
        key: 0,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len,
    });
    events.extend(live.apply(&Op::Get { q: 0, no_ack: true }));
    events
}

fn periodic(store: &mut Store) {
    store.set_checkpoint_trigger(CheckpointTrigger {
        enabled: true,
        log_bytes_min: 0,
        ..Default::default()
    });
}

#[test]
fn segments_are_deleted_after_a_checkpoint_and_a_long_lived_message_keeps_o1_segments() {
    let sim = SimStorage::new(5);
    let (mut store, _, _) = open(&sim).unwrap();
    periodic(&mut store);
    let mut live = Driver::new();
    for op in &setup() {
        log(&store, &live.apply(op)).unwrap();
    }
    // One message that is never consumed, in q1 (another queue; its TTL never runs out, as
    // the clock does not move).
    let ev = live.apply(&Op::Publish {
        exchange: None,
        key: 1,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len: 10,
    });
    log(&store, &ev).unwrap();
    let mut most = 0;
    let mut checkpoints = 0;
    for _ in 0..2000 {
        let events = publish_and_take(&mut live, 300);
        log(&store, &events).unwrap();
        if store.maybe_checkpoint(&live.broker) {
            store.wait_checkpoint().unwrap().unwrap();
            checkpoints += 1;
        }
        most = most.max(segments(&sim));
    }
    // 2000 pairs of ~350 bytes are ~170 segments of 4 KiB; a handful stay at any time.
    assert!(checkpoints > 50, "{checkpoints} checkpoints");
    assert!(most <= 4, "{most} segments at once");
    assert!(!files(&sim).contains(&"00000000000000000000.wal".to_owned()));
    let want = live.broker.durable_state();
    drop(store);
    let sim = sim.power_loss();
    let (_store, recovered, summary) = open(&sim).unwrap();
    assert!(summary.checkpoint_lsn.is_some());
    assert_eq!(recovered.durable_state(), want);
    assert_eq!(recovered.ready_messages("/", "q1").len(), 1);
}

#[test]
fn disk_stays_bounded_by_the_live_data_over_a_long_workload() {
    // 200k publish/take pairs with 10 messages that stay: after each pair (checkpoints are
    // waited for, so this is every instant between batches) the directory holds at most the
    // checkpoint, about as much log again, and two segments.
    const SEGMENT: u64 = 16 * 1024;
    let sim = SimStorage::new(6);
    let (mut store, _, _) = open_on(&sim, SEGMENT, false).unwrap();
    periodic(&mut store);
    let mut live = Driver::new();
    for op in &setup() {
        log(&store, &live.apply(op)).unwrap();
    }
    for _ in 0..10 {
        let ev = live.apply(&Op::Publish {
            exchange: Some(0),
            key: 0,
            persistent: true,
            expiration_ms: None,
            delay_ms: None,
            body_len: 1000,
        });
        log(&store, &ev).unwrap();
    }
    let mut checked = 0u64;
    for i in 0..200_000u32 {
        let events = publish_and_take_queue(&mut live, 2);
        log(&store, &events).unwrap();
        if store.maybe_checkpoint(&live.broker) {
            store.wait_checkpoint().unwrap().unwrap();
        }
        if i % 97 == 0
            && let Some(lsn) = store.checkpoint_lsn()
        {
            let live_bytes = sim
                .file_bytes(&data_dir().join(checkpoint::file_name(Lsn(lsn))))
                .unwrap()
                .len() as u64;
            let total = dir_bytes(&sim);
            assert!(
                total <= 3 * live_bytes + 2 * SEGMENT,
                "pair {i}: {total} bytes on disk, live {live_bytes}"
            );
            checked += 1;
        }
    }
    assert!(checked > 1000);
    assert_eq!(live.broker.ready_messages("/", "q0").len(), 10);
}

/// As [`publish_and_take`], through the `dlx` fanout exchange (bound to `q2` only), taking
/// from `q`.
fn publish_and_take_queue(live: &mut Driver, q: usize) -> Vec<Event> {
    let mut events = live.apply(&Op::Publish {
        exchange: Some(2),
        key: q,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len: 100,
    });
    events.extend(live.apply(&Op::Get { q, no_ack: true }));
    events
}

// ----- Store::log bounds its records -----

#[test]
fn a_purge_of_many_ids_is_logged_as_several_records_and_replays() {
    // 200k ids are 1.6 MB: over one record's id limit, so the store splits it itself.
    let sim = SimStorage::new(8);
    let (store, _, _) = open_on(&sim, 1024 * 1024, false).unwrap();
    let mut live = Driver::new();
    let mut before = 0;
    for op in &setup() {
        before = before.max(log(&store, &live.apply(op)).unwrap());
    }
    let ids: Vec<MessageId> = (1..=200_000).map(MessageId).collect();
    let purge = Event::Purged {
        vhost: "/".into(),
        queue: "q0".into(),
        ids,
    };
    let ticket = log(&store, &[purge]).unwrap();
    // ceil(200_000 / limits::RECORD_IDS_MAX (65,536)) records.
    assert_eq!(ticket - before, 4, "one record per 64Ki ids");
    store.wait_durable(ticket).unwrap();
    drop(store);
    let sim = sim.power_loss();
    let (_store, recovered, _) = open_on(&sim, 1024 * 1024, false).unwrap();
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

#[test]
fn a_publish_too_large_for_one_record_fails_cleanly_and_logs_nothing() {
    // A message whose body and routing together exceed what one record can hold: the batch
    // is refused before anything of it is appended. (The body's pages are never touched: it
    // is zeroed memory, and the store does not copy a body while encoding, S-BIG-3.)
    let sim = SimStorage::new(9);
    let (store, _, _) = open_on(&sim, 1024 * 1024, false).unwrap();
    let mut live = Driver::new();
    let setup_ticket = log(&store, &live.apply(&setup()[0])).unwrap();
    store.wait_durable(setup_ticket).unwrap();
    let message = golden_snapshot().queues[0].messages[0].message.clone();
    let wharf_broker::MessageRef::Loaded(message) = message else {
        unreachable!("the golden message is in memory")
    };
    let mut message = (*message).clone();
    message.body = vec![0u8; wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX].into();
    let too_large = Event::Published {
        vhost: "/".into(),
        message: wharf_broker::MessageRecord {
            message: std::sync::Arc::new(message),
        },
        queues: vec!["q".into()],
        scheduled: None,
    };
    let small = Event::VhostAdded {
        vhost: "other".into(),
    };
    let err = store.log(&[small, too_large], &mut Vec::new()).unwrap_err();
    assert!(matches!(err, StoreError::RecordTooLarge { .. }), "{err}");
    drop(store);
    let (_store, recovered, _) = open_on(&sim, 1024 * 1024, false).unwrap();
    assert!(!recovered.vhost_names().contains(&"other".to_owned()));
    assert_eq!(recovered.durable_state(), live.broker.durable_state());
}

// ----- the golden checkpoint (storage-format.md, "Checkpoints") -----

/// The bytes of the fenced block after `<!-- golden:{name} -->` in storage-format.md; text
/// after a `|` on a line is a comment.
pub(crate) fn golden(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../storage-format.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let marker = format!("<!-- golden:{name} -->");
    let after = &doc[doc.find(&marker).expect("marker in storage-format.md") + marker.len()..];
    let block = after
        .split("```")
        .nth(1)
        .expect("fenced block after marker");
    block
        .lines()
        .skip(1)
        .flat_map(|l| l.split('|').next().unwrap_or("").split_whitespace())
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

/// The documented example: queue `q` in vhost `/` holding message 7 (`hi`, persistent,
/// enqueued at 1 700 000 000 000 ms, in memory with no log position: carried), delivered once
/// and returned once, and message 9 (5 bytes, own TTL 60 s, its record at offset 4096 of
/// segment 3: referred to); next id 10; Lsn 42.
fn golden_snapshot() -> Snapshot {
    let message = Arc::new(Message {
        id: MessageId(7),
        enqueued_at_ms: T0_MS,
        ttl_ms: None,
        exchange: String::new(),
        routing_key: "q".into(),
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        body: Bytes::from_static(b"hi"),
        stored: wharf_broker::StoredSlot::default(),
    });
    Snapshot {
        definitions: vec![Event::QueueDeclared {
            vhost: "/".into(),
            queue: "q".into(),
            auto_delete: false,
            arguments: FieldTable::new(),
        }],
        scheduled: Vec::new(),
        queues: vec![QueueSnapshot {
            vhost: "/".into(),
            queue: "q".into(),
            messages: vec![
                SnapshotMessage {
                    message: wharf_broker::MessageRef::Loaded(message),
                    delivery_count: 1,
                    redelivered: true,
                    held: None,
                },
                SnapshotMessage {
                    message: wharf_broker::MessageRef::Stored(wharf_broker::StoredMessage {
                        id: MessageId(9),
                        enqueued_at_ms: T0_MS + 1000,
                        ttl_ms: Some(60_000),
                        body_len: 5,
                        priority: 0,
                        // The store's packing of a log position: segment in bits 40..63.
                        at: (3 << 40) | 4096,
                    }),
                    delivery_count: 0,
                    redelivered: false,
                    held: None,
                },
            ],
        }],
        next_message_id: 10,
    }
}

#[test]
fn checkpoint_bytes_match_the_document() {
    let bytes = checkpoint::encode_to_vec(&golden_snapshot(), Lsn(42)).unwrap();
    let hex: Vec<String> = bytes
        .chunks(16)
        .map(|c| {
            c.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(bytes, golden("checkpoint"), "encoded:\n{}", hex.join("\n"));
}

/// Formats 3 and 4 changed nothing a version-2 checkpoint holds: the documented version-3
/// checkpoint loads, and so does the same as version 2 wrote it (version 2, and the header
/// CRC over that).
#[test]
fn version_2_and_3_checkpoints_still_load() {
    let sim = SimStorage::new(7);
    let path = data_dir().join(checkpoint::file_name(Lsn(42)));
    sim.set_file_bytes(&path, golden("checkpoint-v3"));
    let loaded = checkpoint::load(&sim, &path, &mut Broker::new()).unwrap();
    assert_eq!((loaded.header.version, loaded.messages), (3, 1));
    let mut bytes = golden("checkpoint-v3");
    bytes[8..10].copy_from_slice(&[0x02, 0x00]);
    bytes[36..40].copy_from_slice(&[0xf1, 0xfb, 0x61, 0x35]);
    let sim = SimStorage::new(7);
    let path = data_dir().join(checkpoint::file_name(Lsn(42)));
    sim.set_file_bytes(&path, bytes);
    let mut broker = Broker::new();
    let loaded = checkpoint::load(&sim, &path, &mut broker).unwrap();
    assert_eq!(loaded.header.version, 2);
    assert_eq!(loaded.messages, 1);
}

#[test]
fn the_documented_checkpoint_loads_into_the_state_it_describes() {
    let sim = SimStorage::new(7);
    let path = data_dir().join(checkpoint::file_name(Lsn(42)));
    sim.set_file_bytes(&path, golden("checkpoint"));
    let mut broker = Broker::new();
    let loaded = checkpoint::load(&sim, &path, &mut broker).unwrap();
    let header = loaded.header;
    assert_eq!(header.lsn, Lsn(42));
    assert_eq!(header.version, 4);
    assert_eq!(header.records, 3);
    assert_eq!(loaded.messages, 2);
    // The carried message's frame starts right after the header and the first record.
    assert_eq!(loaded.index, vec![(7, 40 + 21 + 11)]);
    // The referenced one is in segment 3, which recovery then requires.
    assert_eq!(
        loaded.referenced.iter().copied().collect::<Vec<_>>(),
        vec![3]
    );
    let state = broker.durable_state();
    let (_, msgs) = &state.queues[0];
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].id, MessageId(7));
    assert_eq!(msgs[0].delivery_count, 1);
    assert!(msgs[0].redelivered);
    assert_eq!(msgs[1].id, MessageId(9));
    assert_eq!(msgs[1].enqueued_at_ms, T0_MS + 1000);
    assert_eq!(msgs[1].deadline_ms, Some(T0_MS + 1000 + 60_000));
    assert!(!msgs[1].redelivered);
    // Loading leaves the body in the file; reading the file gives it.
    let mut bodies = Vec::new();
    checkpoint::read(&sim, &path, &mut |rec, _, _| {
        if let checkpoint::CheckpointRecord::Carried(c) = rec {
            bodies.push(c.message.body.clone());
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(bodies, vec![Bytes::from_static(b"hi")]);
}

/// Users and permissions are definitions too (S-DUR-1): a checkpoint carries them, and a
/// history whose users were all deleted stays "users ever defined" (the default user is
/// seeded only on a broker that never had any).
#[test]
fn s_dur_1_users_and_permissions_survive_a_checkpoint_and_segment_deletion() {
    let sim = SimStorage::new(7);
    let (store, mut live) = scripted(&sim);
    let mut events = live.run(Command::UserPut {
        name: "ops".into(),
        password_hash: "c2FsdGhhc2g=".into(),
        tags: vec!["administrator".into()],
    });
    events.extend(live.run(Command::PermissionSet {
        user: "ops".into(),
        vhost: "/".into(),
        configure: "^ops-.*".into(),
        write: ".*".into(),
        read: ".*".into(),
    }));
    log(&store, &events).unwrap();
    store.close().unwrap();
    let (mut store, recovered, _) = open(&sim).unwrap();
    let done = store.checkpoint_now(recovered.snapshot()).unwrap().unwrap();
    store.close().unwrap();
    let (store, again, summary) = open(&sim).unwrap();
    assert_eq!(summary.checkpoint_lsn, Some(done.lsn));
    assert_eq!(
        summary.events, 0,
        "nothing is replayed: the users come from the checkpoint"
    );
    assert_eq!(again.users(), live.broker.users());
    assert_eq!(again.permissions(), live.broker.permissions());
    assert_eq!(again.durable_state(), live.broker.durable_state());

    // Delete the only user, checkpoint again: none comes back, and the fact stays.
    let events = live.run(Command::UserDelete { name: "ops".into() });
    log(&store, &events).unwrap();
    store.close().unwrap();
    let (mut store, recovered, _) = open(&sim).unwrap();
    store.checkpoint_now(recovered.snapshot()).unwrap().unwrap();
    store.close().unwrap();
    let (_store, last, _) = open(&sim).unwrap();
    assert!(last.users().is_empty());
    assert!(last.users_ever_defined(), "guest must not be seeded again");
}

/// What `Store::log` reports is what lets the broker leave content on disk (DESIGN "Memory"):
/// handed to the broker (`Broker::messages_logged`, as the server does), every durable
/// queued message's content leaves memory at a budget of 0; not handed over, none does, and
/// the store itself never writes into the broker's messages.
#[test]
fn the_broker_pages_out_only_what_the_store_reported() {
    for hand_over in [true, false] {
        let sim = SimStorage::new(7);
        let (store, _, _) = open(&sim).unwrap();
        let mut live = Driver::new();
        live.broker.set_loader(store.loader());
        let mut ticket = 0;
        for op in setup() {
            let events = live.apply(&op);
            ticket = ticket.max(log_for(&store, &mut live.broker, &events).unwrap());
        }
        let empty = live.broker.loaded_bytes();
        let publish = Op::Publish {
            exchange: Some(0),
            key: 0,
            persistent: true,
            expiration_ms: None,
            delay_ms: None,
            body_len: 1000,
        };
        for _ in 0..10 {
            let events = live.apply(&publish);
            let logged = if hand_over {
                log_for(&store, &mut live.broker, &events)
            } else {
                log(&store, &events)
            };
            ticket = ticket.max(logged.unwrap());
        }
        store.wait_durable(ticket).unwrap();
        let queued = live.broker.loaded_bytes();
        assert!(queued >= empty + 10 * 1000, "{queued} {empty}");
        live.broker.page_out(ticket, 0);
        let expected = if hand_over { empty } else { queued };
        assert_eq!(
            live.broker.loaded_bytes(),
            expected,
            "hand_over: {hand_over}"
        );
    }
}
