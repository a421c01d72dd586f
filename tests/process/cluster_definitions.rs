//! Definitions of `wharf` processes in a cluster (issue #17): vhosts, users, permissions,
//! exchanges, bindings between exchanges and policies made on any node go through the metadata
//! group (group 0) and reach every node (S-CLU-51, S-CLU-52); one made without a majority is
//! refused, and the group alone decides whether it takes it later (S-CLU-53); a node that lost
//! its disk gets them back (S-CLU-54). Three processes behind the fault-injecting proxy
//! (tests/support/cluster.rs); what a node holds is read from its management API, what a
//! client sees from lapin.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use lapin::ExchangeKind;
use lapin::options::{ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions};
use lapin::types::FieldTable;
use serde_json::json;

use crate::support::cluster::{Cluster, connect, eventually};
use crate::support::{reply_code, reply_text, within};

/// The metadata group.
const METADATA: u64 = wharf_cluster::METADATA_GROUP;
/// How long a test waits for a group to form or a node to catch up.
const WAIT: Duration = Duration::from_secs(60);

fn durable() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    }
}

/// What node `id` must show of the definitions made in
/// [`s_clu_52_definitions_made_on_any_node_reach_every_node`].
async fn holds_the_definitions(c: &Cluster, id: u64) -> Result<(), String> {
    let (status, x) = c
        .api_request(id, "GET", "/api/exchanges/%2f/defs.topic", None)
        .await;
    if status != 200 || x["type"] != "topic" {
        return Err(format!("exchange defs.topic: {status} {x}"));
    }
    let (_, bindings) = c.api_request(id, "GET", "/api/bindings/%2f", None).await;
    let bound = bindings.as_array().is_some_and(|a| {
        a.iter().any(|b| {
            b["source"] == "defs.topic"
                && b["destination"] == "defs.fan"
                && b["destination_type"] == "exchange"
                && b["routing_key"] == "a.#"
        })
    });
    if !bound {
        return Err(format!("binding defs.topic -> defs.fan: {bindings}"));
    }
    for path in [
        "/api/vhosts/extra",
        "/api/users/alice",
        "/api/permissions/extra/alice",
        "/api/policies/%2f/defs-ttl",
    ] {
        let (status, body) = c.api_request(id, "GET", path, None).await;
        if status != 200 {
            return Err(format!("{path}: {status} {body}"));
        }
    }
    Ok(())
}

/// Exchanges and a binding between them declared by a client of node 2; a vhost, a user, a
/// permission and a policy put through node 3's management API.
async fn make_definitions(c: &Cluster) {
    let conn = connect(&c.url(2)).await;
    let ch = conn.create_channel().await.unwrap();
    for (name, kind) in [
        ("defs.topic", ExchangeKind::Topic),
        ("defs.fan", ExchangeKind::Fanout),
    ] {
        within(
            20,
            ch.exchange_declare(name.into(), kind, durable(), FieldTable::default()),
        )
        .await
        .unwrap();
    }
    within(
        20,
        ch.exchange_bind(
            "defs.fan".into(),
            "defs.topic".into(),
            "a.#".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap();
    let puts = [
        ("/api/vhosts/extra", json!({})),
        (
            "/api/users/alice",
            json!({"password": "alice-pw", "tags": ""}),
        ),
        (
            "/api/permissions/extra/alice",
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        ),
        (
            "/api/policies/%2f/defs-ttl",
            json!({"pattern": "^defs", "definition": {"message-ttl": 60000}, "apply-to": "queues"}),
        ),
    ];
    for (path, body) in puts {
        let (status, answer) = c.api_request(3, "PUT", path, Some(body)).await;
        assert!(
            status == 201 || status == 204,
            "PUT {path} on node 3: {status} {answer}"
        );
    }
}

/// S-CLU-51, S-CLU-52, S-CLU-54: exchanges and a binding between them declared by a client of
/// node 2, a vhost, a user, a permission and a policy put through node 3's management API,
/// are on every node; the user logs in to the vhost on node 1; an exchange deleted on node 1
/// is gone everywhere; node 3, its data directory wiped, gets every definition back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_52_definitions_made_on_any_node_reach_every_node() {
    let mut c = Cluster::start(3).await;
    c.leader(METADATA, &[], 0, WAIT).await;
    make_definitions(&c).await;
    for id in 1..=3 {
        eventually(
            id,
            "holds the definitions made on nodes 2 and 3",
            WAIT,
            || holds_the_definitions(&c, id),
        )
        .await;
    }
    let alice = c.url(1).replace("guest:guest@", "alice:alice-pw@");
    let alice = format!("{}/extra", alice.rsplit_once('/').unwrap().0);
    let conn1 = connect(&alice).await;
    conn1.close(200, "done".into()).await.unwrap();

    let ch1 = connect(&c.url(1)).await.create_channel().await.unwrap();
    within(
        20,
        ch1.exchange_delete("defs.fan".into(), ExchangeDeleteOptions::default()),
    )
    .await
    .unwrap();
    for id in 1..=3 {
        eventually(id, "lost the exchange deleted on node 1", WAIT, || async {
            let (status, _) = c
                .api_request(id, "GET", "/api/exchanges/%2f/defs.fan", None)
                .await;
            (status == 404)
                .then_some(())
                .ok_or(format!("defs.fan answers {status}"))
        })
        .await;
    }

    // S-CLU-54: a node that lost its disk gets the cluster's definitions back.
    c.kill(3);
    c.wipe(3);
    c.start_node(3);
    eventually(3, "serves its management API", WAIT, || async {
        let line = "management API listening addr";
        c.output(3)
            .contains(line)
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    eventually(
        3,
        "holds the cluster's definitions after its wipe",
        WAIT,
        || async {
            let (status, x) = c
                .api_request(3, "GET", "/api/exchanges/%2f/defs.topic", None)
                .await;
            let (user, _) = c.api_request(3, "GET", "/api/users/alice", None).await;
            let (gone, _) = c
                .api_request(3, "GET", "/api/exchanges/%2f/defs.fan", None)
                .await;
            (status == 200 && x["type"] == "topic" && user == 200 && gone == 404)
                .then_some(())
                .ok_or(format!(
                    "defs.topic {status}, alice {user}, defs.fan {gone}"
                ))
        },
    )
    .await;
}

/// Panics for a definition committed while nodes `ids` were paused (of three), saying whether
/// they were still stopped: a node the kernel continued (see `Cluster::pause`) is not wharf's
/// fault.
fn declared_while_paused(c: &Cluster, ids: &[u64]) -> ! {
    let stopped: Vec<bool> = ids.iter().map(|&id| c.is_stopped(id)).collect();
    panic!(
        "a definition without a majority is refused, yet declared; nodes {ids:?} still \
         stopped: {stopped:?} (false: continued by someone else, see Cluster::pause)"
    )
}

/// Whether the metadata group settled (every node applied its last entry, the same one, with a
/// leader known) and every node gives the same answer, 200 or 404, for the exchange and the
/// vhost named `lonely`.
async fn lonely_settled(c: &Cluster) -> Result<(), String> {
    let views: Vec<_> = (1..=3).map(|id| c.view(id, METADATA)).collect();
    let first = views[0].as_ref().map(|v| v.applied);
    let settled = views.iter().all(|v| {
        v.as_ref().is_some_and(|v| {
            v.leader.is_some() && v.applied == v.last_log && Some(v.applied) == first
        })
    });
    let mut answers = Vec::new();
    for id in 1..=3 {
        let (x, _) = c
            .api_request(id, "GET", "/api/exchanges/%2f/lonely", None)
            .await;
        let (v, _) = c.api_request(id, "GET", "/api/vhosts/lonely", None).await;
        answers.push((x, v));
    }
    let agreed = answers.iter().all(|a| *a == answers[0])
        && [answers[0].0, answers[0].1]
            .iter()
            .all(|s| [200, 404].contains(s));
    (settled && agreed).then_some(()).ok_or(format!(
        "views {views:?}; (exchange, vhost) answers {answers:?}"
    ))
}

/// S-CLU-53: with both other nodes paused, an exchange declared on node 1 does not commit: the
/// client gets no `declare-ok` but its connection closed with 541 (and the management API's
/// vhost a 500); once the others are back, every node holds the same answer for both, taken or
/// not, as the group decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_53_a_definition_without_a_majority_is_refused_and_the_group_decides_it() {
    let mut c = Cluster::start(3).await;
    c.leader(METADATA, &[], 0, WAIT).await;
    c.leader(wharf_cluster::QUEUE_GROUP, &[], 0, WAIT).await;
    let conn = connect(&c.url(1)).await;
    let ch = conn.create_channel().await.unwrap();
    // Node 1 serves definitions (it reached the metadata group; what it proposed to the
    // quorum queues' group before committed): the refusal below is the pause's doing.
    within(
        30,
        ch.exchange_declare(
            "before".into(),
            ExchangeKind::Direct,
            durable(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap();
    c.pause(2);
    c.pause(3);
    let declared = tokio::time::timeout(
        Duration::from_secs(60),
        ch.exchange_declare(
            "lonely".into(),
            ExchangeKind::Direct,
            durable(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer in 60 s; node 1:\n{}", c.output(1)));
    let err = declared
        .err()
        .unwrap_or_else(|| declared_while_paused(&c, &[2, 3]));
    assert_eq!(reply_code(&err), Some(541), "{}", reply_text(&err));
    assert!(
        reply_text(&err).contains("metadata group"),
        "{}",
        reply_text(&err)
    );
    // The management API's definitions too: 500 naming the reason, and not kept.
    let (status, answer) = c
        .api_request(1, "PUT", "/api/vhosts/lonely", Some(json!({})))
        .await;
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .is_some_and(|r| r.contains("metadata group")),
        "{answer}"
    );
    c.resume(2);
    c.resume(3);
    // Refused for the wait, the two entries are the group's to decide: node 1 appended them,
    // and commits them if it keeps the lead once the others are back, or a new leader without
    // them truncates them. Whichever it is, every node ends with the same answer (S-CLU-53).
    eventually(
        1,
        "every node agrees on the refused definitions",
        WAIT,
        || lonely_settled(&c),
    )
    .await;
    // The node serves definitions again once the group has its majority back (a connection
    // may meanwhile be closed with 320 by a change of the quorum queues' leader, S-CLU-12).
    eventually(1, "declares an exchange again", WAIT, || async {
        let ch = connect(&c.url(1)).await.create_channel().await.unwrap();
        let declared = within(
            30,
            ch.exchange_declare(
                "back".into(),
                ExchangeKind::Direct,
                durable(),
                FieldTable::default(),
            ),
        )
        .await;
        declared.map_err(|e| reply_text(&e))
    })
    .await;
    for id in 1..=3 {
        eventually(
            id,
            "holds the exchange declared after the pause",
            WAIT,
            || async {
                let (status, _) = c
                    .api_request(id, "GET", "/api/exchanges/%2f/back", None)
                    .await;
                (status == 200)
                    .then_some(())
                    .ok_or(format!("back answers {status}"))
            },
        )
        .await;
    }
}
