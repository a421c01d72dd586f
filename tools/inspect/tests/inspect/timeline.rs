//! The live timeline's reader (`wharf_store::trace::trace_dir`, S-UI-7) against the
//! inspector's: the prefilter that decodes only records holding a traced id must change
//! nothing. For every message of the golden data directory (dead-lettered copies, requeues,
//! expiries and acks included), the steps it finds equal those of the same tracer fed every
//! decoded record of the inspector's scan.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use wharf_store::codec::StoreRecord;
use wharf_store::trace::{At, Selector, Tracer, trace_dir};
use wharf_wal::FileStorage;

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
