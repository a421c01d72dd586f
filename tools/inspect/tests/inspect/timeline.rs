//! The live timeline's reader (`wharf_store::trace::trace_dir`, S-UI-7) against the
//! inspector's: the prefilter that decodes only records holding a traced id must change
//! nothing. For every message of the golden data directory (dead-lettered copies, requeues,
//! expiries and acks included), the steps it finds equal those of the same tracer fed every
//! decoded record of the inspector's scan. On a log of many small segments, the segments
//! searched and found without the story's bytes (read only for their queue definitions) change
//! nothing either, nor does damage in them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::path::Path;

use crate::common::{self, T0_MS};

use wharf_broker::{Command, FieldTable, Properties, Value};
use wharf_inspect::workload::Driver;
use wharf_store::codec::{self, RecordKind, StoreRecord};
use wharf_store::trace::{At, Selector, StepKind, Tracer, trace_dir};
use wharf_wal::{FileStorage, RecordRef, RecoveryMode};

/// The tracer fed every record the inspector's scan decodes (no prefilter), with the
/// positions `trace_dir` names (segment file names, not paths).
fn unfiltered(dir: &std::path::Path, sel: &Selector) -> Tracer {
    let mut tracer = Tracer::new(sel.clone());
    wharf_inspect::scan::scan(dir, false, &mut |s| {
        if let Ok(StoreRecord::Event(e)) = &s.record {
            let file = std::path::Path::new(s.file).file_name().unwrap();
            let at = At {
                file: file.to_string_lossy().into_owned(),
                offset: s.offset,
                lsn: s.lsn,
                in_checkpoint: s.in_checkpoint,
            };
            tracer.visit(&at, e);
        }
    })
    .unwrap();
    tracer
}

#[test]
fn s_ui_7_the_prefiltered_timeline_finds_every_step_the_full_scan_finds() {
    let dir = common::golden_dir().join("basic/data");
    let mut found = 0;
    let mut selectors: Vec<Selector> = (1..=400).map(Selector::Id).collect();
    selectors.push(Selector::parse_by("message_id=order-1").unwrap());
    selectors.push(Selector::parse_by("header:tenant=globex").unwrap());
    selectors.push(Selector::parse_by("correlation_id=c-5").unwrap());
    for sel in selectors {
        let fast = trace_dir(&FileStorage, &dir, sel.clone()).unwrap();
        let full = unfiltered(&dir, &sel);
        assert_eq!(fast.steps, full.steps, "{sel:?}");
        assert_eq!(fast.still_queued(), full.still_queued(), "{sel:?}");
        found += usize::from(!fast.steps.is_empty());
    }
    assert!(
        found >= 15,
        "the golden log has a story for many messages: {found}"
    );
}

/// A log over many 4 KiB segments where the story's queue definitions are far from its
/// messages: `late` (TTL 30 s) is declared, then many segments of other traffic, then
/// messages enter it; `work` holds some messages when it is deleted, segments later.
fn scenario_far_apart(dir: &Path) -> anyhow::Result<()> {
    let mut d = Driver::create(dir, 4096, false, T0_MS)?;
    d.exchange("dlx", "fanout")?;
    d.queue("dlq", FieldTable::new())?;
    d.bind("dlq", "dlx", "")?;
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
    d.queue("work", args)?;
    let mut ttl = FieldTable::new();
    ttl.insert("x-message-ttl", Value::I32(30_000));
    d.queue("late", ttl)?;
    d.queue("filler", FieldTable::new())?;
    let body = vec![b'f'; 200];
    let filler = |d: &mut Driver, n: u64| -> anyhow::Result<()> {
        for _ in 0..n {
            d.publish("", "filler", Properties::default(), &body)?;
            let tag = d.get("filler")?.expect("filler");
            d.ack(tag)?;
        }
        Ok(())
    };
    for i in 0..20u64 {
        d.now_ms = T0_MS + i;
        let props = Properties {
            message_id: Some(format!("w{i}")),
            ..Properties::default()
        };
        d.publish("", "work", props, &body)?;
        filler(&mut d, 3)?;
    }
    // Five of work's messages are acked, five rejected into dlq; ten stay.
    for i in 0..10 {
        let tag = d.get("work")?.expect("work");
        if i % 2 == 0 {
            d.ack(tag)?;
        } else {
            d.reject(tag, false)?;
        }
    }
    filler(&mut d, 60)?;
    for i in 0..5u64 {
        d.now_ms = T0_MS + 1000 + i;
        d.publish("", "late", Properties::default(), &body)?;
        filler(&mut d, 10)?;
    }
    filler(&mut d, 60)?;
    d.run(Command::QueueDelete {
        vhost: "/".to_owned(),
        queue: "work".to_owned(),
        if_unused: false,
        if_empty: false,
        owner: None,
    })?;
    filler(&mut d, 20)?;
    d.close()
}

/// The tracer fed every record of a full salvage scan of the log (no checkpoint here): the
/// reader before segments were searched first.
pub(crate) fn full_scan(dir: &Path, sel: &Selector) -> Tracer {
    let mut tracer = Tracer::new(sel.clone());
    wharf_wal::scan(
        &FileStorage,
        dir,
        RecoveryMode::Salvage,
        &mut |r: RecordRef<'_>| {
            if let Ok(StoreRecord::Event(e)) = codec::decode(r.kind, r.payload) {
                tracer.visit(&At::in_log(&r), &e);
            }
            Ok(())
        },
    )
    .unwrap();
    tracer
}

fn assert_same_stories(dir: &Path, ids: std::ops::RangeInclusive<u64>) -> usize {
    let ids: Vec<u64> = ids.collect();
    crate::timeline_index::same_stories(dir, &ids).0
}

#[test]
fn s_ui_7_segments_without_the_story_are_read_for_queue_definitions_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    scenario_far_apart(&dir).unwrap();
    let segments = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    assert!(segments.len() > 20, "many segments: {}", segments.len());
    let ids: Vec<u64> = {
        let t = trace_dir(
            &FileStorage,
            &dir,
            Selector::parse_by("message_id=w15").unwrap(),
        );
        t.unwrap().steps.iter().map(|s| s.message.0).collect()
    };
    let last = 400;
    assert!(assert_same_stories(&dir, 1..=last) > 100);
    // The stories do reach across segments: a deadline from a declaration segments before,
    // a deletion segments after.
    let late = (1..=last)
        .map(|id| trace_dir(&FileStorage, &dir, Selector::Id(id)).unwrap())
        .find(|t| {
            t.steps.iter().any(|s| {
                matches!(&s.kind, StepKind::Entered { queues, deadlines_ms, .. }
                    if queues == &["late".to_owned()] && deadlines_ms[0].1.is_some())
            })
        });
    assert!(late.is_some(), "a message entered late with its deadline");
    // Every sealed segment has its index (storage-format.md, "Segment index"): none is
    // searched, few are read whole.
    let w15 = trace_dir(&FileStorage, &dir, Selector::Id(ids[0])).unwrap();
    assert_eq!(w15.read.searched, 0, "{:?}", w15.read);
    assert_eq!(w15.read.indexed, segments.len() as u64 - 1);
    assert!(
        w15.read.indexed_whole * 3 < w15.read.indexed,
        "{:?}",
        w15.read
    );
    // Without the indexes every sealed segment is searched, and the stories are the same.
    crate::timeline_index::remove_indexes(&dir);
    assert!(assert_same_stories(&dir, 1..=last) > 100);
    let searched = trace_dir(&FileStorage, &dir, Selector::Id(ids[0])).unwrap();
    assert_eq!(searched.steps, w15.steps);
    assert_eq!(searched.read.indexed, 0);
    assert_eq!(searched.read.searched, segments.len() as u64 - 1);
    assert!(
        searched.read.read_whole * 3 < searched.read.searched,
        "{:?}",
        searched.read
    );
    let events: Vec<&str> = w15.steps.iter().map(|s| s.kind.event()).collect();
    assert_eq!(events.last(), Some(&"queue deleted"), "{events:?}");
    let published = &w15.steps[0].at.file;
    let deleted = &w15.steps.last().unwrap().at.file;
    assert_ne!(published, deleted, "the deletion is in a later segment");
}

#[test]
fn s_ui_7_damage_in_a_segment_read_for_definitions_only_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("data");
    scenario_far_apart(&clean).unwrap();
    // The queue definitions' frames, and the filler's, by segment (a full scan's positions).
    let mut frames = Vec::new();
    wharf_wal::scan(
        &FileStorage,
        &clean,
        RecoveryMode::Strict,
        &mut |r: RecordRef<'_>| {
            frames.push((r.position, r.kind, r.payload.len()));
            Ok(())
        },
    )
    .unwrap();
    let declared = RecordKind::QueueDeclared.byte();
    let deleted = RecordKind::QueueDeleted.byte();
    let (definition, _, _) = *frames
        .iter()
        .find(|(p, k, _)| *k == deleted && p.segment.0 > 0)
        .unwrap();
    let (other, _, len) = *frames
        .iter()
        .rev()
        .find(|(p, k, _)| p.segment.0 + 3 < definition.segment.0 && *k != declared && *k != deleted)
        .unwrap();
    // A queue deletion's payload (its CRC fails: the skim reads the segment whole), a
    // length field (the step lands elsewhere: the same), another record's payload (the skim
    // steps over it, the full scan drops it).
    let cases = [
        ("definition", definition.segment, definition.offset + 22),
        ("length", other.segment, other.offset),
        ("other", other.segment, other.offset + 21 + len as u64 / 2),
    ];
    for (case, segment, at) in cases {
        let dir = tmp.path().join(case);
        std::fs::create_dir(&dir).unwrap();
        for entry in std::fs::read_dir(&clean).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        let path = dir.join(wharf_wal::segment_file_name(segment));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[usize::try_from(at).unwrap()] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        assert!(assert_same_stories(&dir, 1..=400) > 100, "{case}");
    }
}
