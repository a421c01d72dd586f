//! Length limits (S-LEN): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::dead_letter::{dlx_setup, first_death_reason};
use super::*;

#[test]
fn s_len_1_max_length_and_bytes_lower_wins() {
    let mut h = H::new();
    dlx_setup(&mut h, &[("x-max-length", Value::I32(3))]);
    h.policy("len", "^q$", r#"{"max-length": 2}"#, 0, false)
        .unwrap();
    for _ in 0..3 {
        h.send("q", Properties::default());
    }
    assert_eq!(h.ready("q"), 2, "policy 2 < argument 3");
    assert_eq!(h.ready("dead"), 1);
    let g = h.get("dead", true).unwrap();
    assert_eq!(first_death_reason(&g), "maxlen");
    // Bytes: "body" is 4 bytes; 9 bytes hold two.
    h.queue("b", &[("x-max-length-bytes", Value::I32(9))]);
    for _ in 0..3 {
        h.send("b", Properties::default());
    }
    assert_eq!(h.ready("b"), 2);
    assert_eq!(h.info("b").unwrap().ready_bytes, 8);
}

#[test]
fn s_len_2_overflow_modes() {
    let mut h = H::new();
    dlx_setup(
        &mut h,
        &[
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish")),
        ],
    );
    let first = h.send("q", Properties::default()).published().unwrap();
    assert!(first.routed && !first.refused);
    let second = h.send("q", Properties::default()).published().unwrap();
    assert!(second.refused, "nack under confirms");
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.ready("dead"), 0, "reject-publish does not dead-letter");
    h.queue(
        "r",
        &[
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish-dlx")),
            ("x-dead-letter-exchange", s("dlx")),
        ],
    );
    h.send("r", Properties::default());
    let o = h.send("r", Properties::default());
    assert!(o.published().unwrap().refused);
    assert_eq!(h.ready("r"), 1);
    assert_eq!(
        h.ready("dead"),
        1,
        "reject-publish-dlx dead-letters the refused message"
    );
    assert_eq!(first_death_reason(&h.get("dead", true).unwrap()), "maxlen");
    // drop-head is the default.
    h.queue("d", &[("x-max-length", Value::I32(1))]);
    h.send("d", props_ttl("111"));
    h.send("d", Properties::default());
    assert_eq!(
        h.get("d", true).unwrap().message.ttl_ms,
        None,
        "the oldest went"
    );
}

#[test]
fn s_len_1_drop_head_dead_lettering_into_a_sibling_target_keeps_queue_order() {
    // A fanout reaches `a` (max-length 0, dead-letters to `b`) and `b`: the copy from `a`
    // is newer than the original, so `b` must hold the original first.
    let mut h = H::new();
    h.exchange("f", "fanout", false, FieldTable::new());
    h.queue(
        "a",
        &[
            ("x-max-length", Value::I32(0)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("b")),
        ],
    );
    h.queue("b", &[]);
    h.bind("a", "f", "");
    h.bind("b", "f", "");
    h.ok(H::publish_cmd("f", "", Properties::default(), b"x"));
    assert_eq!((h.ready("a"), h.ready("b")), (0, 2));
    let first = h.get("b", true).unwrap();
    assert!(
        header(&first.message.properties, "x-death").is_none(),
        "the original first"
    );
    let second = h.get("b", true).unwrap();
    assert!(header(&second.message.properties, "x-death").is_some());
}
