//! S-UI-7 and S-UI-25: the timeline with the segment index (storage-format.md, "Segment index"): for random logs over
//! small segments (messages published, delivered, requeued, acked, expired, dead-lettered,
//! moved back, purged; queues declared with TTLs and deleted between them), the timeline of
//! random messages read through the indexes equals the one a full scan of the log gives, and
//! so does the one read with indexes missing, damaged, truncated, of a newer version, or
//! copied from another segment (each ignored: the segment is searched).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is the test failing; casts are of small test values"
)]

use std::path::Path;

use proptest::prelude::*;
use wharf_broker::{Command, FieldTable, Properties, Value};
use wharf_inspect::workload::Driver;
use wharf_store::trace::{Selector, trace_dir};
use wharf_wal::FileStorage;

use crate::common::T0_MS;
use crate::timeline::full_scan;

/// Removes every segment index of `dir`.
pub(crate) fn remove_indexes(dir: &Path) {
    for path in index_files(dir) {
        std::fs::remove_file(path).unwrap();
    }
}

fn index_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".wal.idx"))
        .collect();
    files.sort();
    files
}

/// A small deterministic generator (xorshift), so a case is its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A random log over 4 KiB segments; returns the highest message id it may hold.
fn random_log(dir: &Path, seed: u64) -> u64 {
    let mut rng = Rng(seed | 1);
    let mut d = Driver::create(dir, 4096, false, T0_MS).unwrap();
    d.exchange("dlx", "fanout").unwrap();
    d.queue("dlq", FieldTable::new()).unwrap();
    d.bind("dlq", "dlx", "").unwrap();
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
    args.insert("x-message-ttl", Value::I32(400));
    d.queue("work", args).unwrap();
    let mut queues = vec!["work".to_owned(), "dlq".to_owned()];
    let body = vec![b'r'; 120];
    let mut published = 0u64;
    for step in 0..500u64 {
        d.now_ms += rng.below(40);
        let q = queues[rng.below(queues.len() as u64) as usize].clone();
        match rng.below(20) {
            0..=6 => {
                let props = Properties {
                    message_id: Some(format!("m{step}")),
                    ..Properties::default()
                };
                d.publish("", &q, props, &body).unwrap();
                published += 1;
            }
            7..=11 => {
                if let Some(tag) = d.get(&q).unwrap() {
                    match rng.below(4) {
                        0 => d.ack(tag).unwrap(),
                        1 => d.reject(tag, true).unwrap(),
                        _ => d.reject(tag, false).unwrap(),
                    }
                }
            }
            12 | 13 => d.expire_at(d.now_ms + rng.below(600)).unwrap(),
            14 => {
                d.run(Command::MoveBack {
                    vhost: "/".to_owned(),
                    queue: "dlq".to_owned(),
                    ids: None,
                })
                .unwrap();
            }
            15 => {
                d.run(Command::QueuePurge {
                    vhost: "/".to_owned(),
                    queue: q.clone(),
                    owner: None,
                })
                .unwrap();
            }
            16 | 17 => {
                let name = format!("t{step}");
                let mut args = FieldTable::new();
                args.insert("x-message-ttl", Value::I32(1000 + step as i32));
                args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
                d.queue(&name, args).unwrap();
                queues.push(name);
            }
            _ => {
                if queues.len() > 2 {
                    let at = 2 + rng.below(queues.len() as u64 - 2) as usize;
                    let name = queues.remove(at);
                    d.run(Command::QueueDelete {
                        vhost: "/".to_owned(),
                        queue: name,
                        if_unused: false,
                        if_empty: false,
                        owner: None,
                    })
                    .unwrap();
                }
            }
        }
    }
    d.close().unwrap();
    // Dead-lettered and moved-back copies take ids too.
    published * 4 + 10
}

/// Traces `ids` through the indexes and by a full scan: the same steps, the same messages
/// left. Returns how many stories were found and how many segments were read by index.
pub(crate) fn same_stories(dir: &Path, ids: &[u64]) -> (usize, u64) {
    let mut found = 0;
    let mut indexed = 0;
    for &id in ids {
        let sel = Selector::Id(id);
        let fast = trace_dir(&FileStorage, dir, sel.clone()).unwrap();
        let full = full_scan(dir, &sel);
        assert_eq!(fast.steps, full.steps, "message {id}");
        assert_eq!(fast.still_queued(), full.still_queued(), "message {id}");
        found += usize::from(!fast.steps.is_empty());
        indexed += fast.read.indexed;
    }
    (found, indexed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// S-UI-7, S-UI-25: indexed, damaged-index and index-less timelines all equal the full
    /// scan's.
    #[test]
    fn s_ui_25_the_indexed_timeline_equals_the_full_scan(seed in any::<u64>(), picks in proptest::collection::vec(any::<u64>(), 40)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let max = random_log(&dir, seed);
        let mut ids: Vec<u64> = picks.iter().map(|p| 1 + p % max).collect();
        ids.extend(1..=12);
        let segments = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
        prop_assert!(segments.len() > 10, "{} segments", segments.len());
        prop_assert_eq!(index_files(&dir).len(), segments.len() - 1);
        let (found, indexed) = same_stories(&dir, &ids);
        prop_assert!(found > 10, "stories found: {found}");
        prop_assert!(indexed > 0);

        // Every kind of bad index, one per sealed segment in turn: ignored, the segment
        // searched, the stories the same.
        let bad_dir = crate::common::copy_dir(&dir);
        let bad = bad_dir.path();
        let files = index_files(bad);
        let other = std::fs::read(&files[0]).unwrap();
        for (i, path) in files.iter().enumerate() {
            let mut bytes = std::fs::read(path).unwrap();
            match i % 6 {
                0 => std::fs::remove_file(path).unwrap(),
                1 => std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap(),
                2 => {
                    let at = (seed as usize).wrapping_add(i) % bytes.len();
                    bytes[at] ^= 0x41;
                    std::fs::write(path, &bytes).unwrap();
                }
                3 => {
                    // A newer version, properly sealed.
                    bytes[8] = 2;
                    let n = bytes.len() - 4;
                    let crc = crc32fast::hash(&bytes[..n]);
                    bytes[n..].copy_from_slice(&crc.to_le_bytes());
                    std::fs::write(path, &bytes).unwrap();
                }
                4 if i > 0 => std::fs::write(path, &other).unwrap(),
                _ => std::fs::write(path, b"").unwrap(),
            }
        }
        same_stories(bad, &ids);

        // No index at all: every sealed segment searched.
        remove_indexes(bad);
        let (found_without, indexed_without) = same_stories(bad, &ids);
        prop_assert_eq!(found_without, found);
        prop_assert_eq!(indexed_without, 0);
    }
}
