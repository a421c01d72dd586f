//! What the management API and the Prometheus metrics show of a cluster (S-CLU-40..45):
//! every node by name and whether it runs, a quorum queue's leader, members and replication
//! on every node (a follower included), the group's Raft figures as `rabbitmq_raft_*` and the
//! followers' lag, before and after the leader stops. Servers in one process on the in-memory
//! network (`tests/support/group_servers.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use serde_json::Value;

use crate::support::group_servers::{Cluster, declare_quorum};

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    crate::support::within(20, fut).await
}

/// The name of node `id` on the in-memory network (its seed is `member-<id>`).
fn name(id: u64) -> String {
    format!("wharf-{id}@member-{id}")
}

/// Declares the quorum queue `qq` on node `id` (the leader) and publishes `n` confirmed
/// persistent messages to it.
async fn quorum_queue_with(cluster: &Cluster, id: u64, n: usize) {
    let (_conn, ch) = cluster.channel(id).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    declare_quorum(&ch, "qq").await;
    for i in 0..n {
        let confirm = within(ch.basic_publish(
            "".into(),
            "qq".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .unwrap();
        assert!(within(confirm).await.unwrap().is_ack());
    }
}

/// `(name, running)` of each node `/api/nodes` on node `id` lists.
async fn nodes_seen(cluster: &Cluster, id: u64) -> Vec<(String, bool)> {
    let (status, nodes) = cluster.api(id, "/api/nodes").await;
    assert_eq!(status, 200, "{nodes}");
    nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["running"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The names in a JSON array of strings.
fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

/// The value of the unlabelled sample `metric` in a Prometheus text (its first sample whose
/// labels start with `labels`, when given).
fn sample(text: &str, metric: &str, labels: &str) -> Option<u64> {
    let head = if labels.is_empty() {
        format!("{metric} ")
    } else {
        format!("{metric}{{{labels}")
    };
    text.lines()
        .find(|l| l.starts_with(&head))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// S-CLU-40, S-CLU-41, S-CLU-42, S-CLU-45: every node lists the three nodes running, names itself and
/// the cluster consistently; every node, a follower included, shows the quorum queue with
/// RabbitMQ's `type`, `leader`, `members` and `online`, and its replication; only the leader
/// knows its consumers and its followers' lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_40_every_node_shows_the_cluster_and_the_quorum_queue_with_its_leader() {
    let cluster = Cluster::start(3).await;
    quorum_queue_with(&cluster, 1, 2).await;
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    let all: Vec<(String, bool)> = (1..=3).map(|i| (name(i), true)).collect();
    for id in 1..=3 {
        assert_eq!(
            nodes_seen(&cluster, id).await,
            all,
            "node {id}'s /api/nodes"
        );
        let (_, overview) = cluster.api(id, "/api/overview").await;
        assert_eq!(overview["node"], name(id));
        assert_eq!(overview["cluster_name"], name(1));
        // This node's entry carries its own figures; the others what wharf knows of them.
        let (status, own) = cluster.api(id, &format!("/api/nodes/{}", name(id))).await;
        assert_eq!(status, 200);
        assert!(own["mem_used"].is_u64(), "{own}");
        assert_eq!(own["wharf_cluster"]["slot"], id);
        let other = if id == 1 { 2 } else { 1 };
        let (_, theirs) = cluster
            .api(id, &format!("/api/nodes/{}", name(other)))
            .await;
        assert_eq!(theirs["running"], true);
        assert!(theirs.get("mem_used").is_none(), "{theirs}");
        assert_eq!(cluster.api(id, "/api/nodes/wharf-9@nowhere").await.0, 404);
    }
    // S-CLU-45: with every voter running, stopping any one leaves a majority.
    let (status, ok) = cluster
        .api(1, "/api/health/checks/node-is-quorum-critical")
        .await;
    assert_eq!((status, &ok["status"]), (200, &Value::from("ok")), "{ok}");
    let members = vec![name(1), name(2), name(3)];
    for id in 1..=3 {
        let (status, q) = cluster.api(id, "/api/queues/%2F/qq").await;
        assert_eq!(status, 200, "node {id}: {q}");
        assert_eq!(q["type"], "quorum");
        assert_eq!(q["leader"], name(1), "node {id}");
        assert_eq!(q["node"], name(1), "node {id}");
        assert_eq!(names(&q["members"]), members);
        assert_eq!(names(&q["online"]), members);
        assert_eq!(q["messages"], 2, "node {id}: {q}");
        let r = &q["wharf_replication"];
        assert_eq!(r["raft_group"], 1);
        assert_eq!(r["members"].as_array().unwrap().len(), 3);
        if id == 1 {
            assert_eq!(r["raft_state"], "leader");
            assert_eq!(q["consumers"], 0);
            for m in r["members"].as_array().unwrap() {
                assert!(m["lag"].is_u64(), "the leader knows each lag: {m}");
            }
        } else {
            assert_eq!(r["raft_state"], "follower");
            assert!(
                q.get("consumers").is_none(),
                "a follower does not know: {q}"
            );
            assert!(r["members"][0]["lag"].is_null());
        }
        // Its messages can be peeked at, from the committed state on a follower.
        let peek =
            serde_json::json!({"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"});
        let (status, got) = cluster
            .api_request(id, "POST", "/api/queues/%2F/qq/get", Some(peek))
            .await;
        assert_eq!(status, 200, "node {id}: {got}");
        let payloads: Vec<&str> = got
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["payload"].as_str().unwrap())
            .collect();
        assert_eq!(payloads, ["m0", "m1"], "node {id}");
        // The listing shows it too, with the same fields.
        let (_, list) = cluster.api(id, "/api/queues/%2F").await;
        let listed = list
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "qq")
            .unwrap_or_else(|| panic!("node {id} lists qq: {list}"));
        assert_eq!(listed["leader"], name(1));
    }
    cluster.shutdown().await;
}

/// S-CLU-43, S-CLU-44, S-CLU-41: the group's Raft figures under RabbitMQ's names, aggregated
/// and per quorum queue (with `raft_group`); the leader's followers' lag; after the leader
/// stops, the survivors show it not running, the new leader, and a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_43_raft_metrics_and_a_leader_change_in_api_and_metrics() {
    let mut cluster = Cluster::start(3).await;
    quorum_queue_with(&cluster, 1, 3).await;
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    let text = cluster.metrics(1, "/metrics").await;
    let term = sample(&text, "rabbitmq_raft_term_total", "").unwrap();
    let commit = sample(&text, "rabbitmq_raft_log_commit_index", "").unwrap();
    let applied = sample(&text, "rabbitmq_raft_log_last_applied_index", "").unwrap();
    let written = sample(&text, "rabbitmq_raft_log_last_written_index", "").unwrap();
    assert!(term >= 1, "{text}");
    assert!(
        commit >= 3 && applied <= commit && commit <= written,
        "{text}"
    );
    assert!(
        text.contains("# TYPE rabbitmq_raft_term_total counter"),
        "{text}"
    );
    assert!(text.contains("# TYPE rabbitmq_raft_log_snapshot_index gauge"));
    for follower in [2, 3] {
        let labels = format!("raft_group=\"1\",follower=\"{}\"", name(follower));
        assert!(
            sample(&text, "wharf_raft_follower_lag_entries", &labels).is_some(),
            "{text}"
        );
    }
    assert!(text.contains(&format!("rabbitmq_cluster=\"{}\"", name(1))));
    // A follower: per queue, with the group's values; no lag (it does not lead).
    let per_object = cluster.metrics(2, "/metrics/per-object").await;
    let labels = "vhost=\"/\",queue=\"qq\",raft_group=\"1\"";
    assert_eq!(
        sample(&per_object, "rabbitmq_raft_term_total", labels),
        Some(term),
        "{per_object}"
    );
    assert!(!per_object.contains("wharf_raft_follower_lag_entries{"));
    let detailed = cluster
        .metrics(3, "/metrics/detailed?family=ra_metrics")
        .await;
    assert!(
        sample(&detailed, "rabbitmq_detailed_raft_log_commit_index", labels).is_some(),
        "{detailed}"
    );
    let no_vhost = cluster
        .metrics(3, "/metrics/detailed?family=ra_metrics&vhost=other")
        .await;
    assert!(!no_vhost.contains("queue=\"qq\""), "{no_vhost}");

    cluster.stop(1).await;
    let leader = cluster.new_leader(1, 2).await;
    for id in [2, 3] {
        let expected: Vec<(String, bool)> = (1..=3).map(|i| (name(i), i != 1)).collect();
        assert_eq!(nodes_seen(&cluster, id).await, expected, "node {id}");
        // The follower learns the new leader from its heartbeats.
        let mut shown = Value::Null;
        for _ in 0..100 {
            shown = cluster.api(id, "/api/queues/%2F/qq").await.1;
            if shown["leader"] == name(leader) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(shown["leader"], name(leader), "node {id}: {shown}");
        assert_eq!(names(&shown["online"]), vec![name(2), name(3)]);
        assert_eq!(names(&shown["members"]).len(), 3);
        let text = cluster.metrics(id, "/metrics").await;
        let now = sample(&text, "rabbitmq_raft_term_total", "").unwrap();
        assert!(now > term, "node {id}: term {now} after {term}");
    }
    let lag = cluster.metrics(leader, "/metrics").await;
    let labels = format!("raft_group=\"1\",follower=\"{}\"", name(1));
    assert!(
        sample(&lag, "wharf_raft_follower_lag_entries", &labels).is_some(),
        "the stopped member is still a member: {lag}"
    );
    let (status, critical) = cluster
        .api(leader, "/api/health/checks/node-is-quorum-critical")
        .await;
    assert_eq!(status, 503, "two of three voters run: {critical}");
    assert_eq!(critical["queues"][0]["name"], "qq");
    cluster.shutdown().await;
}

/// S-CLU-61, S-CLU-60: an entry that does not fit the committed state (proposed straight to the
/// group here, as a drifted leader would) is voided on every member, and every node counts it:
/// in its quorum queue's `wharf_replication`, in its own `/api/nodes` entry, and as
/// `wharf_raft_voided_entries_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_61_every_node_shows_how_many_entries_its_member_voided() {
    let cluster = Cluster::start(3).await;
    quorum_queue_with(&cluster, 1, 1).await;
    let voided_on = |text: &str, id: u64| {
        let labels = format!("raft_group=\"1\",member=\"{id}\"");
        sample(text, "wharf_raft_voided_entries_total", &labels)
    };
    let text = cluster.metrics(1, "/metrics").await;
    assert!(
        text.contains("# TYPE wharf_raft_voided_entries_total counter"),
        "{text}"
    );
    assert_eq!(voided_on(&text, 1), Some(0), "{text}");

    // A queue deleted in a vhost the committed state does not hold: the entry does not fit.
    let misfit = wharf_cluster::Proposal {
        now_ms: 1,
        events: vec![wharf_broker::Event::QueueDeleted {
            vhost: "no-such-vhost".into(),
            queue: "qq".into(),
        }]
        .into(),
        origin: None,
    };
    let commit = within(cluster.nodes[&1].group.submit(misfit))
        .await
        .unwrap();
    match within(commit).await {
        Err(wharf_cluster::ProposeError::Voided(_)) => {}
        other => panic!("the entry should be voided: {other:?}"),
    }
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    for id in 1..=3 {
        let (_, q) = cluster.api(id, "/api/queues/%2F/qq").await;
        assert_eq!(
            q["wharf_replication"]["voided_entries"], 1,
            "node {id}: {q}"
        );
        assert_eq!(q["messages"], 1, "node {id}: nothing of it applied");
        let (_, own) = cluster.api(id, &format!("/api/nodes/{}", name(id))).await;
        let groups = own["wharf_cluster"]["raft_groups"].as_array().unwrap();
        let queues = groups.iter().find(|g| g["raft_group"] == 1).unwrap();
        assert_eq!(queues["voided_entries"], 1, "node {id}: {own}");
        let other = if id == 1 { 2 } else { 1 };
        let (_, theirs) = cluster
            .api(id, &format!("/api/nodes/{}", name(other)))
            .await;
        let groups = theirs["wharf_cluster"]["raft_groups"].as_array().unwrap();
        assert!(
            groups.iter().all(|g| g.get("voided_entries").is_none()),
            "another node's status text does not carry it: {theirs}"
        );
        let text = cluster.metrics(id, "/metrics").await;
        assert_eq!(voided_on(&text, id), Some(1), "node {id}: {text}");
        let per_object = cluster.metrics(id, "/metrics/per-object").await;
        assert_eq!(
            voided_on(&per_object, id),
            Some(1),
            "node {id}: {per_object}"
        );
        let detailed = cluster
            .metrics(id, "/metrics/detailed?family=ra_metrics")
            .await;
        assert_eq!(voided_on(&detailed, id), Some(1), "node {id}: {detailed}");
    }
    cluster.shutdown().await;
}

/// S-CLU-42: a follower reads a quorum queue's messages, deadlines and bindings from the
/// group's committed state, as it lists the queue: the browse page, the expiry horizon, the
/// scheduled listing and the queue's bindings answer on every node, alike (the dashboard's
/// queue page calls all four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_42_every_node_browses_a_quorum_queue_and_counts_its_deadlines() {
    let cluster = Cluster::start(3).await;
    quorum_queue_with(&cluster, 1, 3).await;
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    for id in 1..=3 {
        let (status, page) = cluster.api(id, "/api/queues/%2F/qq/browse?count=10").await;
        assert_eq!(status, 200, "node {id}: {page}");
        assert_eq!(page["messages_ready"], 3, "node {id}: {page}");
        let bodies: Vec<&str> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["payload"].as_str().unwrap())
            .collect();
        assert_eq!(bodies, ["m0", "m1", "m2"], "node {id}");
        let (status, h) = cluster
            .api(id, "/api/wharf/queues/%2F/qq/expiry-horizon")
            .await;
        assert_eq!(status, 200, "node {id}: {h}");
        assert_eq!(h["messages_ready"], 3, "node {id}: {h}");
        assert_eq!(h["with_deadline"], 0, "node {id}: {h}");
        let (status, s) = cluster.api(id, "/api/wharf/queues/%2F/qq/scheduled").await;
        assert_eq!(status, 200, "node {id}: {s}");
        assert_eq!(s["total"], 0, "node {id}: {s}");
        // Its bindings: the default exchange's, as on the leader.
        let (status, b) = cluster.api(id, "/api/queues/%2F/qq/bindings").await;
        assert_eq!(status, 200, "node {id}: {b}");
        assert_eq!(b.as_array().map(Vec::len), Some(1), "node {id}: {b}");
        assert_eq!(b[0]["source"], "", "node {id}: {b}");
        assert_eq!(b[0]["destination"], "qq", "node {id}: {b}");
    }
    let (status, _) = cluster.api(2, "/api/queues/%2F/no-such-queue/browse").await;
    assert_eq!(status, 404);
    cluster.shutdown().await;
}
