//! `wharf-inspect raft` on a directory a real group wrote: a one-member group (it leads
//! alone) on the real disk, with its member file, a snapshot, an entry that was voided
//! (S-CLU-60) and entries after it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value as Json;
use wharf_broker::{
    Broker, Command, DestName, Event, FieldTable, Properties, Publish, QueueDeclare, Value,
};
use wharf_cluster::testing::{Router, initialize, realtime_config};
use wharf_cluster::{
    LeaderAddrs, Proposal, ProposeError, QueueGroup, QueueStateMachine, Raft, Role, WalLogStore,
    incarnation,
};
use wharf_wal::{FileStorage, WalConfig};

use crate::common::{T0_MS, inspect};

const WAIT: Duration = Duration::from_secs(30);

fn events(broker: &mut Broker, cmd: Command) -> Vec<Event> {
    broker.handle(cmd, T0_MS).unwrap().events
}

fn publish(body: &str) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: "q".into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        body: Bytes::from(body.as_bytes().to_vec()),
    })
}

/// Writes the directory: member 1's member file, group 1's log and snapshot. Returns the
/// index of the voided entry and of the last one.
async fn write_member(data: &std::path::Path) -> (u64, u64, u64) {
    let raft_dir = data.join("raft");
    incarnation::write(&FileStorage, &raft_dir, 1, 1).unwrap();
    let gdir = raft_dir.join("group-1");
    let store = WalLogStore::open(
        &gdir.join("log"),
        Arc::new(FileStorage),
        &WalConfig::default(),
        1,
    )
    .unwrap();
    let machine = QueueStateMachine::open(Arc::new(FileStorage), &gdir.join("snapshot"))
        .unwrap()
        .with_log(1, store.reader());
    let router = Router::new();
    let raft = Raft::new(1, realtime_config(), router.net(1), store, machine.clone())
        .await
        .unwrap();
    router.add(1, raft.clone());
    let group = QueueGroup {
        node: 1,
        raft: raft.clone(),
        machine,
        leaders: LeaderAddrs::default(),
        peers: Arc::clone(&router) as wharf_cluster::SharedPeers,
    };
    initialize(&group, &[1]).await.unwrap();
    let mut metrics = group.metrics();
    tokio::time::timeout(WAIT, metrics.wait_for(|m| Role::of(1, m) == Role::Leader))
        .await
        .unwrap()
        .unwrap();

    let mut live = Broker::new();
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type", Value::long_str("quorum"));
    let mut first = events(
        &mut live,
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: "q".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments,
            owner: None,
        }),
    );
    first.extend(events(&mut live, publish("hello")));
    let propose = |events: Vec<Event>| {
        let group = group.clone();
        async move {
            let commit = group
                .submit(Proposal {
                    now_ms: T0_MS,
                    events: events.into(),
                    origin: None,
                })
                .await
                .unwrap();
            tokio::time::timeout(WAIT, commit).await.unwrap()
        }
    };
    let snapshotted = propose(first).await.unwrap();
    raft.trigger().snapshot().await.unwrap();
    tokio::time::timeout(
        WAIT,
        metrics.wait_for(|m| m.snapshot.map(|s| s.index) == Some(snapshotted)),
    )
    .await
    .unwrap()
    .unwrap();
    let unfit = vec![Event::Bound {
        vhost: "/".into(),
        source: "no-such-exchange".into(),
        destination: DestName::Queue("q".into()),
        routing_key: String::new(),
        arguments: FieldTable::new(),
    }];
    let voided = match propose(unfit).await {
        Err(ProposeError::Voided(index)) => index,
        other => panic!("the binding from a missing exchange should be voided: {other:?}"),
    };
    let last = propose(events(&mut live, publish("after"))).await.unwrap();
    raft.shutdown().await.unwrap();
    (snapshotted, voided, last)
}

fn keys(v: &Json) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// S-CLU-60, issue #17: the inspector lists the member file, every record of the group's log,
/// the snapshot file's summary and a summary line, and marks the voided entry.
#[tokio::test]
async fn raft_lists_a_members_log_snapshot_and_voided_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let (snapshotted, voided, last) = write_member(tmp.path()).await;
    let dir = tmp.path().to_str().unwrap();

    let (code, out) = inspect(&["--json", "raft", dir]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let what = |w: &'static str| lines.iter().filter(move |l| l["what"] == w);
    let member: Vec<&Json> = what("member").collect();
    assert_eq!(member.len(), 1);
    assert_eq!(
        (member[0]["id"].as_u64(), member[0]["slot"].as_u64()),
        (Some(1), Some(1))
    );

    let records: Vec<&Json> = what("record").collect();
    let kinds: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r["record"].as_str())
        .collect();
    for k in ["format", "vote", "committed", "entry"] {
        assert!(kinds.contains(k), "a {k} record in {out}");
    }
    let lsns: Vec<u64> = records.iter().filter_map(|r| r["lsn"].as_u64()).collect();
    assert!(lsns.windows(2).all(|w| w[0] < w[1]), "in Lsn order");
    let entry = |index: u64| {
        records
            .iter()
            .find(|r| r["record"] == "entry" && r["index"] == index)
            .unwrap_or_else(|| panic!("entry {index} in {out}"))
    };
    let bad = entry(voided);
    assert_eq!(bad["voided"], true);
    assert_eq!(bad["committed"], true);
    assert_eq!(bad["events"][0]["kind"], "Bound", "{bad}");
    let expected: BTreeSet<String> = [
        "what",
        "group",
        "lsn",
        "record",
        "term",
        "leader",
        "index",
        "committed",
        "held",
        "payload",
        "now_ms",
        "voided",
        "events",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(keys(bad), expected, "an entry line's shape");
    let after = entry(last);
    assert_eq!(after["voided"], false);
    assert_eq!(after["events"][0]["kind"], "Published", "{after}");
    assert_eq!(after["leader"], 1);
    assert!(
        entry(snapshotted).get("voided").is_none(),
        "an entry behind the snapshot was applied before it: not replayed, not judged"
    );

    let snapshot: Vec<&Json> = what("snapshot").collect();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot[0]["last_log_id"]["index"], snapshotted);
    assert_eq!(
        (
            snapshot[0]["queues"].as_u64(),
            snapshot[0]["messages"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(snapshot[0]["voters"], serde_json::json!([1]));

    let group: Vec<&Json> = what("group").collect();
    assert_eq!(group.len(), 1);
    assert_eq!(group[0]["voided"], serde_json::json!([voided]));
    assert!(group[0]["committed"]["index"].as_u64() >= Some(last));
    assert_eq!(group[0]["vote"]["node"], 1);

    // The text form: one line per item, led by what it is.
    let (code, text) = inspect(&["raft", dir, "--group", "1"]);
    assert_eq!(code, 0);
    let heads: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let want: BTreeSet<&str> = ["member", "record", "snapshot", "group"]
        .into_iter()
        .collect();
    assert_eq!(heads, want, "{text}");
    assert!(text.lines().any(|l| l.contains("voided=true")), "{text}");
    let (_, other) = inspect(&["--json", "raft", dir, "--group", "2"]);
    assert_eq!(other.lines().count(), 1, "only the member line: {other}");
}

/// A damaged snapshot file is a problem of `raft` (named; exit 1) and of `verify`'s part.
#[tokio::test]
async fn raft_names_a_damaged_snapshot_file() {
    let tmp = tempfile::tempdir().unwrap();
    write_member(tmp.path()).await;
    let dir = tmp.path().to_str().unwrap();
    assert!(
        wharf_inspect::raft::findings(tmp.path())
            .unwrap()
            .is_empty()
    );
    let snap = tmp.path().join("raft/group-1/snapshot/snapshot.raft");
    let mut bytes = std::fs::read(&snap).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xFF;
    std::fs::write(&snap, bytes).unwrap();
    let (code, out) = inspect(&["--json", "raft", dir]);
    assert_eq!(code, 1, "{out}");
    let problems: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap())
        .filter(|l| l["what"] == "problem")
        .collect();
    assert_eq!(problems.len(), 1, "{out}");
    assert!(
        problems[0]["file"]
            .as_str()
            .unwrap()
            .ends_with("snapshot.raft"),
        "{out}"
    );
    let found = wharf_inspect::raft::findings(tmp.path()).unwrap();
    assert_eq!(found.len(), 1, "verify's part: {found:?}");
}
