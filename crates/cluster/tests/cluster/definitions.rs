//! S-CLU-51: a node's live broker converges on the metadata group's committed definitions
//! (`wharf_cluster::reconcile`), keeping its own classic queues, whether it lagged by a few
//! changes or starts from nothing (a wiped member that installed the group's snapshot).

use std::collections::BTreeSet;

use std::time::Duration;
use wharf_broker::{ApplyTo, Broker, DestName, Event, ExchangeKind, FieldTable, PolicySpec};

use wharf_cluster::{Proposer, reconcile, shared_definitions};

use crate::support::{Cluster, GROUP, HangGuard};

fn exchange(vhost: &str, name: &str, kind: ExchangeKind) -> Event {
    Event::ExchangeDeclared {
        vhost: vhost.into(),
        exchange: name.into(),
        kind,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::default(),
    }
}

fn bind(vhost: &str, source: &str, destination: DestName, key: &str) -> Event {
    Event::Bound {
        vhost: vhost.into(),
        source: source.into(),
        destination,
        routing_key: key.into(),
        arguments: FieldTable::default(),
    }
}

fn policy(vhost: &str, name: &str, definition: &str) -> Event {
    Event::PolicySet {
        vhost: vhost.into(),
        policy: PolicySpec {
            name: name.into(),
            pattern: ".*".into(),
            apply_to: ApplyTo::Queues,
            priority: 0,
            definition: definition.into(),
        },
        operator: false,
    }
}

fn user(name: &str, hash: &str) -> Event {
    Event::UserPut {
        name: name.into(),
        password_hash: hash.into(),
        tags: vec![],
    }
}

fn permission(user: &str, vhost: &str) -> Event {
    Event::PermissionSet {
        user: user.into(),
        vhost: vhost.into(),
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    }
}

fn broker(events: &[Event]) -> Broker {
    let mut b = Broker::new();
    for e in events {
        b.apply(e).unwrap();
    }
    b
}

/// A broker's cluster-wide definitions and vhosts, as a set to compare.
fn shared(b: &Broker) -> (BTreeSet<String>, BTreeSet<String>) {
    let defs = shared_definitions(b.snapshot().definitions)
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    (defs, b.vhost_names().into_iter().collect())
}

/// What the metadata group committed: a vhost with an exchange, a binding between exchanges,
/// a policy, a user and its permissions; the default vhost's policy.
fn committed() -> Broker {
    broker(&[
        Event::VhostAdded { vhost: "v".into() },
        exchange("v", "x", ExchangeKind::Topic),
        exchange("v", "y", ExchangeKind::Fanout),
        bind("v", "x", DestName::Exchange("y".into()), "a.#"),
        policy("v", "ttl", r#"{"message-ttl":1000}"#),
        policy("/", "len", r#"{"max-length":5}"#),
        user("ann", "hash-2"),
        permission("ann", "v"),
    ])
}

fn apply_all(live: &mut Broker, events: &[Event]) {
    for e in events {
        live.apply(e)
            .unwrap_or_else(|err| panic!("{e:?} does not apply: {err}"));
    }
}

/// S-CLU-51: a node that lagged (an old password, a policy of another definition, an exchange
/// and a vhost deleted since, an exchange declared otherwise since) converges; its classic
/// queue and the queue's binding stay; a second pass has nothing to do.
#[test]
fn s_clu_51_a_lagging_node_converges_on_the_committed_definitions() {
    let mut live = broker(&[
        Event::VhostAdded { vhost: "v".into() },
        Event::VhostAdded {
            vhost: "gone".into(),
        },
        exchange("v", "x", ExchangeKind::Direct),
        exchange("v", "old", ExchangeKind::Direct),
        bind("v", "old", DestName::Exchange("x".into()), "k"),
        policy("v", "ttl", r#"{"message-ttl":5}"#),
        user("ann", "hash-1"),
        user("bob", "hash-b"),
        Event::QueueDeclared {
            vhost: "v".into(),
            queue: "local".into(),
            auto_delete: false,
            arguments: FieldTable::default(),
        },
        bind("v", "amq.direct", DestName::Queue("local".into()), "k"),
    ]);
    let committed = committed();
    assert_ne!(shared(&live), shared(&committed));
    let events = reconcile(&committed, &live);
    apply_all(&mut live, &events);
    assert_eq!(shared(&live), shared(&committed));
    assert_eq!(live.queue_names("v"), ["local"], "the classic queue stays");
    assert!(
        live.bindings("v")
            .iter()
            .any(|b| b.destination == DestName::Queue("local".into()) && b.source == "amq.direct"),
        "and its binding"
    );
    assert!(reconcile(&committed, &live).is_empty());
}

/// S-CLU-51: an exchange declared otherwise in the group is declared anew on the node, and
/// its bindings between exchanges, the same on both, come back with it.
#[test]
fn s_clu_51_a_redeclared_exchange_keeps_its_bindings() {
    let mut live = broker(&[
        Event::VhostAdded { vhost: "v".into() },
        exchange("v", "x", ExchangeKind::Direct),
        exchange("v", "y", ExchangeKind::Fanout),
        bind("v", "x", DestName::Exchange("y".into()), "a.#"),
    ]);
    let committed = broker(&[
        Event::VhostAdded { vhost: "v".into() },
        exchange("v", "x", ExchangeKind::Topic),
        exchange("v", "y", ExchangeKind::Fanout),
        bind("v", "x", DestName::Exchange("y".into()), "a.#"),
    ]);
    let events = reconcile(&committed, &live);
    apply_all(&mut live, &events);
    assert_eq!(shared(&live), shared(&committed));
    assert_eq!(live.bindings("v").len(), committed.bindings("v").len());
}

/// S-CLU-51: a wiped member starts from an empty broker; once it holds the group's committed
/// state (a snapshot installed), its live broker gets every definition.
#[test]
fn s_clu_51_a_fresh_node_gets_every_definition() {
    let committed = committed();
    let mut live = Broker::new();
    let events = reconcile(&committed, &live);
    assert!(!events.is_empty());
    apply_all(&mut live, &events);
    assert_eq!(shared(&live), shared(&committed));
    assert!(reconcile(&committed, &live).is_empty());
}

/// S-CLU-51: the default vhost deleted in the group is deleted on the node.
#[test]
fn s_clu_51_a_vhost_deleted_in_the_group_goes() {
    let committed = broker(&[Event::VhostDeleted { vhost: "/".into() }]);
    let mut live = Broker::new();
    let events = reconcile(&committed, &live);
    apply_all(&mut live, &events);
    assert!(live.vhost_names().is_empty());
    assert_eq!(shared(&live), shared(&committed));
}

/// S-CLU-50, S-CLU-51 together, on the in-memory network (the group standing for the metadata
/// group): node 2, a follower, makes definitions on its live broker and proposes them through
/// the leader; node 1 converges on the committed state; node 3, cut off meanwhile while the
/// leader snapshotted and purged its log, catches up from the snapshot and, with a live broker
/// as empty as a wiped node's, converges too, knowing node 2's proposal applied.
#[tokio::test(start_paused = true)]
async fn s_clu_51_definitions_made_on_a_follower_reach_every_node() {
    let _guard = HangGuard::new("s_clu_51_definitions_made_on_a_follower_reach_every_node");
    let c = Cluster::start(3).await;
    c.settle(1).await;
    c.isolate(3);
    let made = [
        Event::VhostAdded { vhost: "v".into() },
        exchange("v", "x", ExchangeKind::Topic),
        exchange("v", "y", ExchangeKind::Fanout),
        bind("v", "x", DestName::Exchange("y".into()), "a.#"),
        policy("v", "ttl", r#"{"message-ttl":1000}"#),
        user("ann", "hash-2"),
        permission("ann", "v"),
    ];
    let live2 = broker(&made);
    let proposer = Proposer::new(2, GROUP, c.raft(2).clone(), 0x0202);
    let committed_at = proposer
        .propose(
            &c.router.forward(2),
            1_000,
            made.to_vec(),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    c.wait_applied(1, committed_at.index).await;

    let mut live1 = Broker::new();
    let events = c.members[&1]
        .machine
        .with(|m| reconcile(m.broker(), &live1));
    apply_all(&mut live1, &events);
    assert_eq!(shared(&live1), shared(&live2));

    let last = c.last_index(1);
    c.raft(1).trigger().snapshot().await.unwrap();
    c.until(1, "its snapshot", |m| {
        m.snapshot.map(|s| s.index) == Some(last)
    })
    .await;
    c.raft(1).trigger().purge_log(last).await.unwrap();
    c.until(1, "its purge", |m| m.purged.map(|p| p.index) == Some(last))
        .await;
    c.heal(3);
    c.raft(1).trigger().heartbeat().await.unwrap();
    c.wait_applied(3, last).await;
    let installed = c.raft(3).metrics().borrow().snapshot.map(|s| s.index);
    assert_eq!(
        installed,
        Some(last),
        "member 3 caught up from the snapshot"
    );
    let mut live3 = Broker::new();
    let events = c.members[&3]
        .machine
        .with(|m| reconcile(m.broker(), &live3));
    apply_all(&mut live3, &events);
    assert_eq!(shared(&live3), shared(&live2));
    let seq = c.members[&3].machine.with(|m| m.session_seq(0x0202));
    assert_eq!(seq, Some(1), "the session came with the snapshot");
}
