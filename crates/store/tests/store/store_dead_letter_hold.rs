//! At-least-once dead-lettering across restarts (S-QQ-10): messages a quorum queue holds to
//! dead-letter them come back held, from a checkpoint or from the log after it, with their
//! content on disk or not, and go exactly once when a route appears, also after a power loss.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use bytes::Bytes;
use store_common::{CH, Live, open};
use wharf_broker::{
    Broker, Command, ExchangeDeclare, FieldTable, Properties, Publish, QueueDeclare, Value,
};
use wharf_wal::SimStorage;

fn queue(name: &str, arguments: FieldTable) -> Command {
    Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: name.into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
        owner: None,
    })
}

fn at_least_once() -> FieldTable {
    let mut a = FieldTable::new();
    for (k, v) in [
        ("x-queue-type", "quorum"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-overflow", "reject-publish"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-routing-key", "k"),
    ] {
        a.insert(k, Value::long_str(v));
    }
    a
}

fn publish(body: u8) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: "qq".into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        body: Bytes::from(vec![body; 100]),
    })
}

fn get() -> Command {
    Command::Get {
        chan: CH,
        queue: "qq".into(),
        no_ack: false,
    }
}

fn bind() -> Command {
    Command::QueueBind {
        vhost: "/".into(),
        queue: "dead".into(),
        exchange: "dlx".into(),
        routing_key: "k".into(),
        arguments: FieldTable::new(),
        bind: true,
        owner: None,
    }
}

/// (held, ready) of `qq` and ready of `dead`.
fn counts(b: &Broker) -> (u64, u64, u64) {
    let qs = b.queues("/");
    let q = |n: &str| qs.iter().find(|q| q.name == n).unwrap();
    (q("qq").dead_letter_held, q("qq").ready, q("dead").ready)
}

/// Three messages to `qq`; the first rejected (held) before a checkpoint, the second after
/// it; then the power goes.
fn workload(paging: bool) -> (SimStorage, u64, Broker) {
    let sim = SimStorage::new(43);
    let mut live = Live::open(&sim, paging);
    live.step(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "dlx".into(),
        kind: "direct".into(),
        passive: false,
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }));
    live.step(queue("dead", FieldTable::new()));
    live.step(queue("qq", at_least_once()));
    for body in 0..3 {
        live.step(publish(body));
    }
    live.step(get());
    live.settle(Some(false));
    live.store
        .checkpoint_now(live.driver.broker.snapshot())
        .unwrap();
    live.step(get());
    live.settle(Some(false));
    assert_eq!(counts(&live.driver.broker), (2, 1, 0));
    let now = live.driver.now_ms;
    let Live { driver, .. } = live;
    (sim.power_loss(), now, driver.broker)
}

fn run(paging: bool) {
    let (sim, now, live) = workload(paging);
    let (store, mut recovered, summary) = open(&sim).unwrap();
    assert!(
        summary.checkpoint_lsn.is_some(),
        "one came from the checkpoint"
    );
    recovered.check_invariants();
    assert_eq!(recovered.durable_state(), live.durable_state());
    let end = recovered.recovered(now + 1);
    assert!(end.events.is_empty(), "still no route: {:?}", end.events);
    assert_eq!(counts(&recovered), (2, 1, 0));
    // A binding gives them a route: both go, in one event each, and are logged.
    let o = recovered.handle(bind(), now + 2).unwrap();
    assert_eq!(counts(&recovered), (0, 1, 2));
    let mut logged = Vec::new();
    let ticket = store.log(&o.events, &mut logged).unwrap().unwrap();
    store.wait_durable(ticket).unwrap();
    let bodies: Vec<u8> = recovered
        .ready_messages("/", "dead")
        .iter()
        .map(|(m, _)| m.body[0])
        .collect();
    assert_eq!(bodies, [0, 1], "in the order they died, content intact");
    drop(store);
    let (_store, again, _) = open(&sim.power_loss()).unwrap();
    assert_eq!(counts(&again), (0, 1, 2), "moved once, never twice");
    assert_eq!(again.durable_state(), recovered.durable_state());
}

#[test]
fn s_qq_10_held_messages_survive_a_power_loss_and_a_checkpoint() {
    run(false);
}

#[test]
fn s_qq_10_held_messages_paged_out_are_read_back_when_they_go() {
    run(true);
}
