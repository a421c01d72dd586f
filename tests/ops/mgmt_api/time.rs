//! The dashboard's time views and browse search (S-UI-20 to S-UI-23): upcoming expiries from
//! the broker's own deadlines on the manual clock, scheduled messages with their due times,
//! search by message id, correlation id or header, who may read them and their bad input.

use super::browse::user;
use super::*;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, ShortString};
use std::time::Duration;

/// Publishes confirmed persistent messages to `exchange` with `routing_key`, one per
/// `props`, bodies `b0`, `b1`, ...
async fn publish_all(ch: &Channel, exchange: &str, routing_key: &str, props: Vec<BasicProperties>) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for (i, p) in props.into_iter().enumerate() {
        ch.basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            format!("b{i}").as_bytes(),
            p.with_delivery_mode(2),
        )
        .await
        .unwrap();
    }
    within(10, ch.wait_for_confirms()).await.unwrap();
}

fn ttl(ms: u64) -> BasicProperties {
    BasicProperties::default().with_expiration(ShortString::from(ms.to_string()))
}

/// `(minute, hour, day)` counts and the other figures of an expiry horizon.
async fn horizon(client: &Client, queue: &str) -> (Value, [u64; 3]) {
    let h = get_json(
        client,
        &format!("/api/wharf/queues/%2F/{queue}/expiry-horizon"),
    )
    .await;
    let counts: Vec<u64> = h["expiring"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["count"].as_u64().unwrap())
        .collect();
    let labels: Vec<&str> = h["expiring"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["within"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["minute", "hour", "day"]);
    (h.clone(), [counts[0], counts[1], counts[2]])
}

/// S-UI-20 (with S-TTL-3, S-TTL-9, S-TTL-11): the counts follow the broker's deadlines as the
/// manual clock moves, overdue messages count until the timer step expires them, and a
/// policy's message TTL changes them at once.
#[tokio::test]
async fn s_ui_20_expiry_horizon_counts_the_brokers_deadlines() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "t1").await;
    let hour = 3_600_000;
    publish_all(
        &ch,
        "",
        "t1",
        vec![
            ttl(30_000),
            BasicProperties::default(),
            ttl(30_000),
            ttl(hour / 2),
            ttl(12 * hour),
            ttl(72 * hour),
            BasicProperties::default(),
        ],
    )
    .await;
    let (h, counts) = horizon(&admin, "t1").await;
    assert_eq!(counts, [2, 3, 4]);
    assert_eq!(h["now"], support::T0_MS);
    assert_eq!(h["messages_ready"], 7);
    assert_eq!(h["with_deadline"], 5);
    assert_eq!(h["overdue"], 0);
    assert_eq!(h["next_deadline"], support::T0_MS + 30_000);

    // 20 s later nothing has expired; the 12 h message is still within the day.
    server.advance(20_000).await;
    assert_eq!(horizon(&admin, "t1").await.1, [2, 3, 4]);
    // 31 s: the two 30 s messages expired (the timer step ran).
    server.advance(11_000).await;
    let (h, counts) = horizon(&admin, "t1").await;
    assert_eq!(counts, [0, 1, 2]);
    assert_eq!(
        (&h["messages_ready"], &h["with_deadline"]),
        (&json!(5), &json!(3))
    );

    // A 10 min message TTL by policy gives every message a deadline at T0 + 10 min, its own
    // being longer (S-TTL-11).
    let policy =
        json!({"pattern": "^t1$", "definition": {"message-ttl": 600_000}, "apply-to": "queues"});
    let a = call(&admin, "PUT", "/api/policies/%2F/short", Some(policy)).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let (h, counts) = horizon(&admin, "t1").await;
    assert_eq!(counts, [0, 5, 5]);
    assert_eq!(h["next_deadline"], support::T0_MS + 600_000);

    // The clock passes the deadline but the timer step has not run (the broker's own timer
    // sleeps for the 9.5 min it computed): overdue, still ready.
    server.clock.advance(Duration::from_secs(570));
    let (h, _) = horizon(&admin, "t1").await;
    assert_eq!(
        (&h["overdue"], &h["messages_ready"]),
        (&json!(5), &json!(5))
    );
    server.handle.tick().await;
    let (h, counts) = horizon(&admin, "t1").await;
    assert_eq!(counts, [0, 0, 0]);
    assert_eq!(
        (&h["messages_ready"], &h["next_deadline"]),
        (&json!(0), &Value::Null)
    );
    assert_eq!(ready_via_amqp(&ch, "t1").await, 0);
}

async fn delayed_setup(ch: &Channel) {
    let mut args = LapinTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        "delayed".into(),
        lapin::ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
    for (queue, key) in [("s1", "k"), ("s2", "other")] {
        declare(ch, queue).await;
        ch.queue_bind(
            queue.into(),
            "delayed".into(),
            key.into(),
            QueueBindOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    }
}

fn delay(ms: i32) -> BasicProperties {
    let mut h = LapinTable::default();
    h.insert("x-delay".into(), AMQPValue::LongInt(ms));
    BasicProperties::default().with_headers(h)
}

fn dues(page: &Value) -> Vec<u64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["due"].as_u64().unwrap())
        .collect()
}

/// S-UI-21 (with S-SCHED-1, S-SCHED-2): scheduled messages by queue (where the bindings route
/// them now) and by exchange, earliest due first, paged, gone from the list once routed.
#[tokio::test]
async fn s_ui_21_scheduled_messages_with_their_due_times() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    delayed_setup(&ch).await;
    publish_all(&ch, "delayed", "k", vec![delay(5_000), delay(1_000)]).await;
    publish_all(&ch, "delayed", "other", vec![delay(3_000)]).await;
    let t0 = support::T0_MS;

    let s1 = get_json(&admin, "/api/wharf/queues/%2F/s1/scheduled").await;
    assert_eq!((&s1["total"], &s1["queue"]), (&json!(2), &json!("s1")));
    assert_eq!(dues(&s1), [t0 + 1_000, t0 + 5_000]);
    let first = &s1["messages"][0];
    assert_eq!(first["due_in_ms"], 1_000);
    assert_eq!(first["payload"], "b1");
    assert_eq!(first["routing_key"], "k");
    assert_eq!(first["durable"], true);
    let s2 = get_json(&admin, "/api/wharf/queues/%2F/s2/scheduled").await;
    assert_eq!(dues(&s2), [t0 + 3_000]);
    let x = get_json(&admin, "/api/wharf/exchanges/%2F/delayed/scheduled").await;
    assert_eq!(
        (&x["total"], &x["total_complete"]),
        (&json!(3), &json!(true))
    );
    assert_eq!(dues(&x), [t0 + 1_000, t0 + 3_000, t0 + 5_000]);
    let page = get_json(
        &admin,
        "/api/wharf/exchanges/%2F/delayed/scheduled?offset=1&count=1",
    )
    .await;
    assert_eq!((dues(&page), &page["total"]), (vec![t0 + 3_000], &json!(3)));
    // Nothing is in the queues yet.
    assert_eq!(ready_via_amqp(&ch, "s1").await, 0);

    // Due: the 1 s message is routed to s1 and leaves the lists.
    server.advance(1_500).await;
    assert_eq!(ready_via_amqp(&ch, "s1").await, 1);
    let s1 = get_json(&admin, "/api/wharf/queues/%2F/s1/scheduled").await;
    assert_eq!(dues(&s1), [t0 + 5_000]);
    assert_eq!(s1["messages"][0]["due_in_ms"], 3_500);
    // Unbinding s1 means the 5 s message is no longer bound for it.
    ch.queue_unbind(
        "s1".into(),
        "delayed".into(),
        "k".into(),
        LapinTable::default(),
    )
    .await
    .unwrap();
    let s1 = get_json(&admin, "/api/wharf/queues/%2F/s1/scheduled").await;
    assert_eq!(s1["total"], 0);
    // A plain queue with nothing scheduled for it: an empty list, not an error.
    declare(&ch, "plain").await;
    let plain = get_json(&admin, "/api/wharf/queues/%2F/plain/scheduled").await;
    assert_eq!(plain["messages"], json!([]));
}

fn ids(page: &Value) -> Vec<String> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["properties"]["message_id"].as_str().unwrap().to_owned())
        .collect()
}

/// S-UI-22: search by message id, correlation id or a header, in queue order, with the
/// message's position; a bounded scan that continues from `next_offset`; no state changes.
#[tokio::test]
async fn s_ui_22_search_finds_messages_by_id_correlation_or_header() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "f1").await;
    let props: Vec<BasicProperties> = (0..6u32)
        .map(|i| {
            let mut h = LapinTable::default();
            h.insert("n".into(), AMQPValue::LongUInt(i));
            h.insert(
                "tenant".into(),
                AMQPValue::LongString(if i % 2 == 0 { "even" } else { "odd" }.into()),
            );
            BasicProperties::default()
                .with_message_id(ShortString::from(format!("m{i}")))
                .with_correlation_id(ShortString::from(format!("c{}", i / 2)))
                .with_headers(h)
        })
        .collect();
    publish_all(&ch, "", "f1", props).await;
    let search = |q: &str| format!("/api/wharf/queues/%2F/f1/search?{q}");

    let by_id = get_json(&admin, &search("message_id=m3")).await;
    assert_eq!(ids(&by_id), ["m3"]);
    assert_eq!(by_id["messages"][0]["position"], 3);
    assert_eq!(by_id["messages"][0]["payload"], "b3");
    assert_eq!(by_id["messages_ready"], 6);
    let by_corr = get_json(&admin, &search("correlation_id=c1")).await;
    assert_eq!(ids(&by_corr), ["m2", "m3"]);
    assert_eq!(
        (&by_corr["done"], &by_corr["next_offset"]),
        (&json!(true), &json!(6))
    );
    assert_eq!(
        ids(&get_json(&admin, &search("header=n&value=4")).await),
        ["m4"]
    );
    let odd = get_json(&admin, &search("header=tenant&value=odd&count=2")).await;
    assert_eq!(ids(&odd), ["m1", "m3"]);
    // Two found: it stopped after m3 and continues from position 4.
    assert_eq!(
        (&odd["next_offset"], &odd["done"]),
        (&json!(4), &json!(false))
    );
    let rest = get_json(&admin, &search("header=tenant&value=odd&count=2&offset=4")).await;
    assert_eq!(ids(&rest), ["m5"]);
    assert_eq!(rest["messages"][0]["position"], 5);
    // A scan of 2 from the start does not reach m3: nothing yet, continue from 2.
    let short = get_json(&admin, &search("message_id=m3&scan=2")).await;
    assert_eq!((ids(&short).len(), &short["next_offset"]), (0, &json!(2)));
    assert_eq!(short["done"], false);
    let more = get_json(&admin, &search("message_id=m3&scan=2&offset=2")).await;
    assert_eq!(ids(&more), ["m3"]);
    assert!(ids(&get_json(&admin, &search("message_id=nope")).await).is_empty());

    // Nothing changed: all six ready, the head not redelivered.
    assert_eq!(ready_via_amqp(&ch, "f1").await, 6);
    let head = ch
        .basic_get("f1".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert!(!head.delivery.redelivered);
    assert_eq!(head.delivery.data, b"b0");
}

const READS: [&str; 4] = [
    "/api/wharf/queues/%2F/a1/expiry-horizon",
    "/api/wharf/queues/%2F/a1/scheduled",
    "/api/wharf/exchanges/%2F/amq.direct/scheduled",
    "/api/wharf/queues/%2F/a1/search?message_id=x",
];

/// S-UI-23 (with S-UI-3): any reader of the vhost may read them, `monitoring` included, but
/// `monitoring` may not change what the dashboard's pages change; a `management` user of
/// another vhost and a user without a management tag get 401.
#[tokio::test]
async fn s_ui_23_time_views_are_for_readers_and_monitoring_cannot_change() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        let mut users = Users::default();
        users.0.push(user("watch", &["monitoring"], &[]));
        users.0.push(user("dev", &["management"], &["other"]));
        users.0.push(user("app", &[], &["/"]));
        c.users = users;
    })
    .await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "a1").await;
    let watch = Client::new(&base(&server), "watch", "pw");
    for path in READS {
        let a = call(&watch, "GET", path, None).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
    }
    for (who, reason) in [
        ("dev", "User not authorised to access virtual host"),
        ("app", "Not management user"),
    ] {
        let client = Client::new(&base(&server), who, "pw");
        for path in READS {
            let a = call(&client, "GET", path, None).await;
            assert_eq!(a.status, 401, "{who} {path}: {}", a.body);
            assert_eq!(a.json()["reason"], reason, "{who} {path}");
        }
    }
    // What the exchanges and admin pages change stays refused to `monitoring`.
    for (method, path, body) in [
        ("PUT", "/api/exchanges/%2F/x1", json!({"type": "direct"})),
        ("DELETE", "/api/exchanges/%2F/amq.direct", json!(null)),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            json!({"routing_key": "a1", "properties": {}, "payload": "p", "payload_encoding": "string"}),
        ),
        (
            "PUT",
            "/api/policies/%2F/p",
            json!({"pattern": ".*", "definition": {"message-ttl": 1}}),
        ),
        (
            "PUT",
            "/api/operator-policies/%2F/p",
            json!({"pattern": ".*", "definition": {"message-ttl": 1}}),
        ),
        ("PUT", "/api/users/u2", json!({"password": "x", "tags": ""})),
        (
            "PUT",
            "/api/permissions/%2F/watch",
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        ),
        ("PUT", "/api/vhosts/v2", json!({})),
        ("POST", "/api/definitions", json!({})),
    ] {
        let body = if body.is_null() { None } else { Some(body) };
        let a = call(&watch, method, path, body).await;
        assert_eq!(a.status, 401, "{method} {path}: {}", a.body);
    }
    let admin = guest(&server);
    assert_eq!(
        call(&admin, "GET", "/api/exchanges/%2F/x1", None)
            .await
            .status,
        404
    );
    assert_eq!(ready_via_amqp(&ch, "a1").await, 0);
}

/// S-UI-23: bad parameters are 400 naming the problem; an unknown vhost, queue or exchange
/// is 404.
#[tokio::test]
async fn s_ui_23_time_views_refuse_bad_input() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "a1").await;
    for path in [
        "/api/wharf/queues/%2F/a1/expiry-horizon?within=5m",
        "/api/wharf/queues/%2F/a1/scheduled?count=0",
        "/api/wharf/queues/%2F/a1/scheduled?count=501",
        "/api/wharf/queues/%2F/a1/scheduled?offset=-1",
        "/api/wharf/queues/%2F/a1/scheduled?sort=due",
        "/api/wharf/exchanges/%2F/amq.direct/scheduled?count=x",
        "/api/wharf/queues/%2F/a1/search",
        "/api/wharf/queues/%2F/a1/search?message_id=a&correlation_id=b",
        "/api/wharf/queues/%2F/a1/search?header=n",
        "/api/wharf/queues/%2F/a1/search?header=&value=1",
        "/api/wharf/queues/%2F/a1/search?message_id=a&scan=0",
        "/api/wharf/queues/%2F/a1/search?message_id=a&scan=100001",
        "/api/wharf/queues/%2F/a1/search?message_id=a&count=0",
        "/api/wharf/queues/%2F/a1/search?message_id=a&regex=1",
    ] {
        let a = call(&admin, "GET", path, None).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert_eq!(a.json()["error"], "bad_request", "{path}");
    }
    for path in [
        "/api/wharf/queues/%2F/nope/expiry-horizon",
        "/api/wharf/queues/novhost/a1/expiry-horizon",
        "/api/wharf/queues/%2F/nope/scheduled",
        "/api/wharf/exchanges/%2F/nope/scheduled",
        "/api/wharf/exchanges/novhost/amq.direct/scheduled",
        "/api/wharf/queues/%2F/nope/search?message_id=x",
    ] {
        let a = call(&admin, "GET", path, None).await;
        assert_eq!(a.status, 404, "{path}: {}", a.body);
    }
}
