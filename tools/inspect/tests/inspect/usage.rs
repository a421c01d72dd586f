//! S-OPS-7: the inspector's times read as RFC 3339 next to epoch milliseconds, and an
//! unknown `--kind` (or stage) is a usage error, exit 2, not an empty success.

use crate::common;

use common::{golden_dir, inspect};

fn data() -> String {
    golden_dir().join("basic/data").display().to_string()
}

#[test]
fn s_ops_7_an_unknown_kind_is_a_usage_error_and_a_known_one_filters() {
    let dir = data();
    let (code, out) = inspect(&["dump", &dir, "--kind", "publishd"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "nothing printed on stdout: {out}");
    let (code, out) = inspect(&["dump", &dir, "--kind", "dead_lettered", "--body", "none"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().all(|l| l.contains(" DeadLettered ")), "{out}");
    let (code, _) = inspect(&["bench-scan", &dir, "--stage", "nonsense"]);
    assert_eq!(code, 2);
}

#[test]
fn s_ops_7_times_are_shown_as_rfc_3339_next_to_milliseconds() {
    assert_eq!(
        wharf_inspect::render::rfc3339(0).as_deref(),
        Some("1970-01-01T00:00:00.000Z")
    );
    assert_eq!(
        wharf_inspect::render::rfc3339(1_767_225_600_123).as_deref(),
        Some("2026-01-01T00:00:00.123Z")
    );
    assert_eq!(wharf_inspect::render::rfc3339(u64::MAX), None);
    let (code, out) = inspect(&["--json", "queues", &data(), "--now", "1700000001000"]);
    assert_eq!(code, 0);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["oldest_enqueued_ms"], 1_700_000_000_002_u64);
    assert_eq!(first["oldest_enqueued"], "2023-11-14T22:13:20.002Z");
}
