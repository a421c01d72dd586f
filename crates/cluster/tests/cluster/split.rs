//! A member's batch split between its own log and its group (S-CLU-10), and a take-over into a
//! live broker that keeps the member's own queues (S-CLU-6, S-CLU-12). Pure: brokers and a state
//! machine driven by hand, no network.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload};
use wharf_broker::{Broker, ChanRef, Command, Event, FieldTable, Value};
use wharf_cluster::{Entry, LogId, Proposal, QueueStateMachine, Replicated, Split, adopt};

use crate::commands::{
    CONN, bind, declare, declare_classic, declare_quorum, get, open, publish, publish_to,
};
use crate::support::LiveBroker;

const T0: u64 = 1_700_000_000_000;

/// The bodies of `queue`'s ready messages in `broker`, with their `redelivered` marks.
fn ready(broker: &Broker, queue: &str) -> Vec<(String, bool)> {
    broker
        .ready_messages("/", queue)
        .into_iter()
        .map(|(m, r)| (String::from_utf8_lossy(&m.body).into_owned(), r))
        .collect()
}

/// Applies `events` to `broker`, as a replay does.
fn apply_all(broker: &mut Broker, events: &[Event]) {
    for e in events {
        broker.apply(e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
    }
}

/// S-CLU-10: a message a fanout exchange routes to a classic and a quorum queue is cut in two
/// (one `Published` per side, the same id); the exchange's bindings follow their queues; a
/// dead-lettering from the quorum queue into a classic queue is cut into its removal (the
/// group's) and its new copy (the member's). Each side replays cleanly on its own, and the
/// two together hold what the live broker holds.
#[test]
fn s_clu_10_a_batch_is_split_between_the_members_log_and_its_group() {
    let mut live = LiveBroker::new();
    let mut dlx = FieldTable::new();
    dlx.insert("x-queue-type", Value::long_str("quorum"));
    dlx.insert("x-dead-letter-exchange", Value::long_str("amq.direct"));
    dlx.insert("x-dead-letter-routing-key", Value::long_str("dead"));
    let dead_key = Command::QueueBind {
        vhost: "/".into(),
        queue: "dlq".into(),
        exchange: "amq.direct".into(),
        routing_key: "dead".into(),
        arguments: FieldTable::new(),
        bind: true,
        owner: None,
    };
    let (p, _) = live.batch(
        [
            vec![
                declare_quorum("qq", None),
                declare_classic("cq"),
                bind("qq", "amq.fanout"),
                bind("cq", "amq.fanout"),
                publish_to("amq.fanout", "", "both", None),
                declare("src", dlx),
                declare_classic("dlq"),
                dead_key,
                publish("src", "doomed", None),
            ],
            open(),
            vec![
                get("src"),
                Command::Reject {
                    chan: ChanRef::new(CONN, 1),
                    delivery_tag: 1,
                    requeue: false,
                },
            ],
        ]
        .concat(),
        T0,
    );
    let mut replicated = Replicated::default();
    let mut split = Split::default();
    replicated.split(p.events.to_vec(), &mut split);
    assert!(replicated.contains("/", "qq") && replicated.contains("/", "src"));
    assert!(!replicated.contains("/", "cq") && !replicated.contains("/", "dlq"));

    let published = |events: &[Event]| -> Vec<(u64, Vec<String>)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Published {
                    message, queues, ..
                } => Some((message.message.id.0, queues.clone())),
                _ => None,
            })
            .collect()
    };
    let group_published = published(&split.replicated);
    let own_published = published(&split.local);
    assert_eq!(group_published[0].1, vec!["qq".to_owned()]);
    assert_eq!(own_published[0].1, vec!["cq".to_owned()]);
    assert_eq!(
        group_published[0].0, own_published[0].0,
        "one message, one id"
    );

    let mut group = Broker::new();
    apply_all(&mut group, &split.replicated);
    let mut own = Broker::new();
    apply_all(&mut own, &split.local);
    assert_eq!(ready(&group, "qq"), vec![("both".to_owned(), false)]);
    assert_eq!(ready(&own, "cq"), vec![("both".to_owned(), false)]);
    assert!(
        ready(&group, "src").is_empty(),
        "the removal is the group's"
    );
    assert_eq!(ready(&own, "dlq").len(), 1, "the copy is the member's");
    assert_eq!(
        group.queue_kind("/", "cq"),
        None,
        "a classic queue stays out of the group"
    );
    assert_eq!(
        own.queue_kind("/", "qq"),
        None,
        "a quorum queue stays out of the member's log"
    );
    assert_eq!(
        group.bindings("/").len() + own.bindings("/").len(),
        live.broker.bindings("/").len(),
        "every binding on exactly one side"
    );
}

/// S-CLU-6, S-CLU-12: a member's live broker, holding a classic queue of its own, adopts the
/// group's committed state: its queue stays as it was; the quorum queue comes with its
/// messages in order, the one delivered before marked redelivered. A second adoption of the
/// same queue into the same broker is refused, never merged.
#[tokio::test]
async fn s_clu_12_a_take_over_keeps_the_members_own_queues() {
    let mut old = LiveBroker::new();
    let (p, _) = old.batch(
        [
            vec![declare_quorum("qq", None)],
            open(),
            vec![
                publish("qq", "a", None),
                publish("qq", "b", None),
                publish("qq", "c", None),
                get("qq"),
            ],
        ]
        .concat(),
        T0,
    );
    let mut split = Split::default();
    Replicated::default().split(p.events.to_vec(), &mut split);
    let mut machine = QueueStateMachine::new();
    let entry = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
        payload: EntryPayload::Normal(Proposal {
            now_ms: T0,
            events: split.replicated.into(),
            origin: None,
        }),
    };
    machine.apply(vec![entry]).await.unwrap();

    let mut live = LiveBroker::new();
    live.batch(vec![declare_classic("cq"), publish("cq", "own", None)], T0);
    let adopted = machine
        .with(|m| adopt(&mut live.broker, m, T0 + 5))
        .unwrap();
    assert!(adopted.replicated.contains("/", "qq"));
    assert_eq!(
        ready(&live.broker, "qq"),
        vec![
            ("a".to_owned(), true),
            ("b".to_owned(), false),
            ("c".to_owned(), false)
        ]
    );
    assert_eq!(ready(&live.broker, "cq"), vec![("own".to_owned(), false)]);
    assert!(
        machine
            .with(|m| adopt(&mut live.broker, m, T0 + 5))
            .is_err(),
        "a queue of the group already in the live broker"
    );
}

/// S-CLU-11: what a member that does not lead must refuse, as the group's committed state knows
/// it: declaring a quorum queue, or any queue under the name of one the group holds; using one;
/// a publish whose committed routing reaches one (through the default exchange or a binding).
/// Its own classic queues, and publishes routed elsewhere, are its own.
#[test]
fn s_clu_11_a_follower_knows_what_needs_the_leader() {
    let mut committed = LiveBroker::new();
    committed.batch(
        vec![
            declare_quorum("qq", None),
            declare_classic("cq"),
            bind("qq", "amq.fanout"),
        ],
        T0,
    );
    let b = &committed.broker;
    let needs = |cmd: &Command| wharf_cluster::needs_leader(b, "/", cmd);
    let consume = |queue: &str| Command::Consume {
        chan: ChanRef::new(CONN, 1),
        queue: queue.into(),
        consumer_tag: String::new(),
        no_ack: false,
        exclusive: false,
        arguments: FieldTable::new(),
    };
    assert_eq!(needs(&declare_quorum("new", None)), Some("new".into()));
    assert_eq!(needs(&declare_classic("qq")), Some("qq".into()));
    assert_eq!(needs(&declare_classic("mine")), None);
    assert_eq!(needs(&consume("qq")), Some("qq".into()));
    assert_eq!(needs(&get("qq")), Some("qq".into()));
    assert_eq!(needs(&consume("cq")), None);
    assert_eq!(needs(&publish("qq", "m", None)), Some("qq".into()));
    assert_eq!(
        needs(&publish_to("amq.fanout", "any", "m", None)),
        Some("qq".into())
    );
    assert_eq!(needs(&publish("cq", "m", None)), None);
    assert_eq!(needs(&publish_to("amq.direct", "qq", "m", None)), None);
}
