//! One or more tests per rule of docs/SEMANTICS.md (S-TTL, S-QEXP, S-DLX, S-LEN, S-POL,
//! S-SCHED, S-CONS, S-QQ, S-PRIO), a file per family, each test named after its id, driven through the public
//! `Broker` API with explicit `now` values (no clock, no sleep). Invariants are checked after
//! every step by the helper.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::many_single_char_names,
    clippy::field_reassign_with_default,
    clippy::option_map_or_none,
    reason = "test code: a panic is a failed test, and short scenarios read best"
)]

use crate::broker_common;

use broker_common::*;
use wharf_broker::{
    Command, DeathFate, DeathReason, Effect, Event, ExchangeDeclare, FieldTable, Properties, Reply,
    Value,
};

mod consumers;
mod dead_letter;
mod flow;
mod length;
mod move_back;
mod policies;
mod priority;
mod queue_expiry;
mod quorum;
mod quorum_dlx;
mod scheduling;
mod ttl;

#[test]
fn reply_types_for_get_and_publish() {
    let mut h = H::new();
    h.queue("q", &[]);
    let o = h.send("q", Properties::default());
    assert_eq!(
        o.reply,
        Reply::Published(wharf_broker::PublishResult {
            routed: true,
            refused: false,
            flow: false,
        })
    );
}

#[test]
fn totals_count_what_the_listings_show() {
    let mut h = H::new();
    h.queue("a", &[]);
    h.queue("b", &[]);
    for _ in 0..3 {
        h.send("a", Properties::default());
    }
    h.send("b", Properties::default());
    h.consume("b", "c", false);
    let t = h.b.totals();
    let queues = h.b.queues("/");
    assert_eq!(t.queues, queues.len() as u64);
    assert_eq!(t.exchanges, h.b.exchanges("/").len() as u64);
    assert_eq!(t.consumers, h.b.consumers("/").len() as u64);
    assert_eq!((t.ready, t.unacked), (3, 1));
    assert_eq!(
        t.ready_bytes,
        queues.iter().map(|q| q.ready_bytes).sum::<u64>()
    );
}

/// The lookups the management API uses instead of listings on a broker with many queues
/// (issue 18) answer what the listings show.
#[test]
fn one_queue_lookups_answer_what_the_listings_show() {
    let mut h = H::new();
    h.queue("a", &[]);
    h.queue("b", &[]);
    for _ in 0..3 {
        h.send("a", Properties::default());
    }
    h.send("b", Properties::default());
    h.send("b", Properties::default());
    // One of b's messages held unacked by a consumer: unacked bytes come from the channel.
    h.consume("b", "c", false);
    let listed = h.b.queues("/");
    for q in &listed {
        assert_eq!(h.b.queue("/", &q.name).as_ref(), Some(q), "{}", q.name);
    }
    assert!(listed.iter().any(|q| q.unacked_bytes > 0));
    assert_eq!(h.b.queue("/", "missing"), None);
    assert_eq!(h.b.queue("nowhere", "a"), None);
    assert_eq!(
        h.b.queue_names("/"),
        listed.iter().map(|q| q.name.clone()).collect::<Vec<_>>()
    );
    let t = h.b.totals_in("/");
    assert_eq!(t.queues, listed.len() as u64);
    assert_eq!(t.exchanges, h.b.exchanges("/").len() as u64);
    assert_eq!(
        (t.ready, t.unacked),
        (
            listed.iter().map(|q| q.ready).sum::<u64>(),
            listed.iter().map(|q| q.unacked).sum::<u64>()
        )
    );
    assert_eq!(h.b.totals_in("nowhere").queues, 0);
}
