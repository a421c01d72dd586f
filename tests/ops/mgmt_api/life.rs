//! The dashboard's message life and dead-letter explorer (S-UI-7..10): a message's timeline
//! read from the log of the running broker, a dead-letter queue grouped by death, and
//! moving messages back to their original route; who may do what, and bad input.

use super::*;
use lapin::options::BasicRejectOptions;
use lapin::types::{AMQPValue, ShortString};

async fn topology(ch: &Channel, sources: &[&str]) {
    support::dead_letter_topology(ch, "dlx", "dlq", sources).await;
}

/// Publishes a persistent message with message id `mid` to `queue` and waits for its confirm.
async fn send(ch: &Channel, queue: &str, mid: &str) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        mid.as_bytes(),
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(mid)),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// Takes the head of `queue` and rejects it, requeued or not; then waits until the
/// rejection is in the log (a reply on the channel follows it, S-DUR-4).
async fn take_and_reject(ch: &Channel, queue: &str, requeue: bool) {
    let m = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    ch.basic_reject(m.delivery.delivery_tag, BasicRejectOptions { requeue })
        .await
        .unwrap();
    ready_via_amqp(ch, queue).await;
}

/// The broker's id of each ready message of `queue`, in order (from the browse view).
async fn ids_in(admin: &Client, queue: &str) -> Vec<u64> {
    let page = get_json(admin, &format!("/api/queues/%2F/{queue}/browse")).await;
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"].as_u64().unwrap())
        .collect()
}

fn timeline_path(id: u64) -> String {
    format!("/api/wharf/messages/%2F/{id}/timeline")
}

fn events(timeline: &Value) -> Vec<String> {
    timeline["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["event"].as_str().unwrap().to_owned())
        .collect()
}

/// S-UI-7: a message published, delivered, requeued, dead-lettered, moved back and taken
/// (a `no_ack` get is logged as its ack alone):
/// each step read from the log, with its queues, its copies and where its record is.
#[tokio::test]
async fn s_ui_7_the_timeline_tells_a_message_life_from_the_log() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    topology(&ch, &["work"]).await;
    send(&ch, "work", "order-1").await;
    let original = ids_in(&admin, "work").await[0];
    take_and_reject(&ch, "work", true).await;
    take_and_reject(&ch, "work", false).await;
    let copy = ids_in(&admin, "dlq").await[0];

    let t = get_json(&admin, &timeline_path(original)).await;
    assert_eq!(
        events(&t),
        [
            "published",
            "delivered",
            "requeued",
            "delivered",
            "dead-lettered",
            "enqueued (dead-lettered copy)"
        ],
        "{t:#}"
    );
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps[0]["queues"], json!(["work"]));
    assert_eq!(steps[0]["properties"]["message_id"], "order-1");
    assert_eq!(steps[0]["payload"], "order-1");
    assert_eq!(steps[0]["enqueued_at"], support::T0_MS);
    assert_eq!(steps[3]["delivery"], 2);
    assert_eq!(steps[4]["reason"], "rejected");
    assert_eq!(steps[4]["queue"], "work");
    assert_eq!(steps[4]["copy"], copy);
    assert_eq!(steps[5]["message"], copy);
    assert_eq!(steps[5]["queues"], json!(["dlq"]));
    let lsns: Vec<u64> = steps.iter().map(|s| s["lsn"].as_u64().unwrap()).collect();
    assert!(
        lsns.windows(2).all(|w| w[0] <= w[1]),
        "in log order: {lsns:?}"
    );
    assert!(steps.iter().all(
        |s| std::path::Path::new(s["file"].as_str().unwrap()).extension() == Some("wal".as_ref())
    ));
    assert_eq!(
        t["still_queued"],
        json!([{ "message": copy, "queues": ["dlq"] }])
    );

    let moved = call(
        &admin,
        "POST",
        "/api/wharf/dead-letters/%2F/dlq/move-back",
        Some(json!({ "messages": [copy] })),
    )
    .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    let back = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.delivery.data, b"order-1");
    ready_via_amqp(&ch, "work").await;
    let t = get_json(&admin, &timeline_path(original)).await;
    let e = events(&t);
    assert_eq!(
        e[6..],
        ["moved back", "enqueued (moved back)", "acked"],
        "{t:#}"
    );
    assert_eq!(t["steps"][6]["queue"], "dlq");
    assert_eq!(t["steps"][6]["targets"], json!(["work"]));
    assert_eq!(t["still_queued"], json!([]));
    // The copy's own timeline starts with the step that made it, naming the original.
    let c = get_json(&admin, &timeline_path(copy)).await;
    assert_eq!(
        events(&c)[..2],
        ["dead-lettered", "enqueued (dead-lettered copy)"]
    );
    assert_eq!(c["steps"][0]["message"], original);
}

/// S-UI-8: any reader of the vhost may read a timeline; a bad id is 400, an unknown vhost or
/// a message the log never held (an unknown id, a transient message) 404.
#[tokio::test]
async fn s_ui_8_timeline_access_and_bad_input() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        let mut users = Users::default();
        users.0.push(user("watch", &["monitoring"]));
        users.0.push(user("dev", &["management"]));
        c.users = users;
    })
    .await;
    let admin = guest(&server);
    let (_conn, ch) = server.channel().await;
    topology(&ch, &["work"]).await;
    send(&ch, "work", "m").await;
    ch.basic_publish(
        "".into(),
        "work".into(),
        BasicPublishOptions::default(),
        b"transient",
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let ids = ids_in(&admin, "work").await;
    let watch = Client::new(&base(&server), "watch", "pw");
    let t = get_json(&watch, &timeline_path(ids[0])).await;
    assert_eq!(events(&t), ["published"]);
    let dev = call(
        &Client::new(&base(&server), "dev", "pw"),
        "GET",
        &timeline_path(ids[0]),
        None,
    )
    .await;
    assert_eq!(dev.status, 401, "{}", dev.body);
    assert_eq!(
        dev.json()["reason"],
        "User not authorised to access virtual host"
    );
    for bad in ["x", "-1", "1.5"] {
        let a = call(
            &admin,
            "GET",
            &format!("/api/wharf/messages/%2F/{bad}/timeline"),
            None,
        )
        .await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(a.json()["error"], "bad_request");
    }
    for path in [
        timeline_path(ids[1]),
        timeline_path(999_999),
        format!("/api/wharf/messages/novhost/{}/timeline", ids[0]),
    ] {
        let a = call(&admin, "GET", &path, None).await;
        assert_eq!(a.status, 404, "{path}: {}", a.body);
        assert_eq!(a.json()["error"], "Object Not Found");
    }
}

fn user(name: &str, tags: &[&str]) -> User {
    User {
        name: name.to_owned(),
        password: "pw".to_owned(),
        loopback_only: false,
        vhosts: vec!["other".to_owned()],
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        initial_only: false,
    }
}

/// S-UI-9: a dead-letter queue grouped by the reason and source queue of each message's
/// newest death, with the original route; messages that never died listed apart.
#[tokio::test]
async fn s_ui_9_dead_letters_are_grouped_by_reason_and_source_queue() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    topology(&ch, &["work", "other"]).await;
    for (q, mid) in [("work", "w1"), ("work", "w2"), ("other", "o1")] {
        send(&ch, q, mid).await;
        take_and_reject(&ch, q, false).await;
    }
    send(&ch, "dlq", "straight").await;
    let ids = ids_in(&admin, "dlq").await;
    let d = get_json(&admin, "/api/wharf/dead-letters/%2F/dlq").await;
    assert_eq!(d["messages_ready"], 4);
    assert_eq!(d["examined"], 4);
    assert_eq!(
        d["groups"],
        json!([
            { "reason": "rejected", "queue": "other", "exchange": "", "routing_keys": ["other"],
              "count": 1, "messages": [ids[2]] },
            { "reason": "rejected", "queue": "work", "exchange": "", "routing_keys": ["work"],
              "count": 2, "messages": [ids[0], ids[1]] },
        ])
    );
    assert_eq!(d["not_dead_lettered"], json!([ids[3]]));
    let missing = call(&admin, "GET", "/api/wharf/dead-letters/%2F/nope", None).await;
    assert_eq!(missing.status, 404);
    // Reading changed nothing.
    assert_eq!(ready_via_amqp(&ch, "dlq").await, 4);
}

/// S-UI-10: moving back needs an administrator (a `monitoring` user may look, not change);
/// bad bodies are 400; moved messages are in their source queue with their `x-death`, and
/// stay there after a restart (one record moved each); what cannot move stays.
#[tokio::test]
async fn s_ui_10_move_back_returns_messages_to_their_source_queue() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        let mut users = Users::default();
        users.0.push(user("watch", &["monitoring"]));
        c.users = users;
    })
    .await;
    let admin = guest(&server);
    let (conn, ch) = server.channel().await;
    topology(&ch, &["work", "other"]).await;
    for (q, mid) in [("work", "w1"), ("other", "o1")] {
        send(&ch, q, mid).await;
        take_and_reject(&ch, q, false).await;
    }
    send(&ch, "dlq", "straight").await;
    let path = "/api/wharf/dead-letters/%2F/dlq/move-back";
    let watch = Client::new(&base(&server), "watch", "pw");
    let w = call(&watch, "POST", path, Some(json!({ "all": true }))).await;
    assert_eq!(w.status, 401, "{}", w.body);
    assert_eq!(w.json()["reason"], "Not administrator user");
    for bad in [
        json!({}),
        json!({ "messages": [] }),
        json!({ "messages": ["a"] }),
        json!({ "all": true, "messages": [1] }),
        json!([1]),
        // Over limits::MOVE_BACK_MESSAGES_MAX.
        json!({ "messages": (1..=10_001).collect::<Vec<u64>>() }),
    ] {
        let a = call(&admin, "POST", path, Some(bad.clone())).await;
        assert_eq!(
            a.status,
            400,
            "{}: {}",
            &bad.to_string()[..40.min(bad.to_string().len())],
            a.body
        );
        assert_eq!(a.json()["error"], "bad_request");
    }
    let a = call(
        &admin,
        "POST",
        "/api/wharf/dead-letters/%2F/nope/move-back",
        Some(json!({ "all": true })),
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.body);
    assert_eq!(ready_via_amqp(&ch, "dlq").await, 3, "nothing moved yet");

    let ids = ids_in(&admin, "dlq").await;
    let r = call(&admin, "POST", path, Some(json!({ "all": true }))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = r.json();
    assert_eq!(r["moved"], json!([ids[0], ids[1]]));
    assert_eq!(r["skipped"][0]["message"], ids[2]);
    assert!(
        r["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("never dead-lettered"),
        "{r}"
    );
    drop((ch, conn));
    let server = restart(server).await;
    let (_conn, ch) = server.channel().await;
    assert_eq!(ready_via_amqp(&ch, "dlq").await, 1);
    assert_eq!(ready_via_amqp(&ch, "other").await, 1);
    let back = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.delivery.data, b"w1");
    let headers = back.delivery.properties.headers().clone().unwrap();
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death: {headers:?}");
    };
    let Some(AMQPValue::FieldTable(first)) = deaths.as_slice().first() else {
        panic!("empty x-death");
    };
    assert_eq!(
        first.inner().get("queue"),
        Some(&AMQPValue::LongString("work".into()))
    );
    assert_eq!(
        first.inner().get("reason"),
        Some(&AMQPValue::LongString("rejected".into()))
    );
}
