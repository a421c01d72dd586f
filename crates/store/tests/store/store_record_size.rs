//! The store's record-size rule, installed in the broker (`wharf_store::MessageRecordSize`,
//! what `Store::open` hands it): a persistent message whose one log record could not hold it
//! is refused by the broker before anything changes (S-DUR-3).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use wharf_broker::{Command, FieldTable, Properties, Publish};
use wharf_store::MessageRecordSize;

use crate::broker_common::{H, persistent};

/// The broker's own test driver, with the store's rule installed as `Store::open` does.
fn broker_with_the_stores_rule() -> H {
    let mut h = H::new();
    h.b.set_record_size(Arc::new(MessageRecordSize));
    h
}

/// A persistent message whose one log record could not hold it (a maximal body fanned out to
/// many long-named durable queues) is refused with 406 before it changes anything, instead of
/// failing the log after the broker applied it (S-DUR-3: what is accepted is made durable).
#[test]
fn s_dur_3_a_message_too_large_to_log_is_refused_before_anything_changes() {
    let mut h = broker_with_the_stores_rule();
    h.exchange("fan", "fanout", true, FieldTable::new());
    let names: Vec<String> = (0..1100).map(|i| format!("{i:0>250}")).collect();
    for name in &names {
        h.durable_queue(name, &[]);
        h.bind(name, "fan", "");
    }
    // Zeroed memory: a maximal body whose pages are never touched (nothing here copies it).
    let body = bytes::Bytes::from(vec![
        0u8;
        wharf_base::limits::MESSAGE_BODY_BYTES_MAX as usize
    ]);
    let publish = |p: Properties| {
        Command::Publish(Publish {
            vhost: "/".into(),
            exchange: "fan".into(),
            routing_key: String::new(),
            mandatory: false,
            properties: p,
            body: body.clone(),
        })
    };
    let err = h.err(publish(persistent()));
    assert_eq!(
        err.kind,
        wharf_broker::ErrorKind::PreconditionFailed,
        "{err:?}"
    );
    assert!(err.text.contains("too large to store"), "{}", err.text);
    assert_eq!(h.ready(&names[0]), 0, "nothing entered");
    // The same message, transient, is never logged: it is accepted.
    h.ok(publish(Properties::default()));
    assert_eq!(h.ready(&names[1099]), 1);
}
