//! The dashboard's API (S-UI): browsing a queue without consuming it, who may browse, its bad
//! input, the overview's extra rates, and the dashboard's files at `/`.

use super::*;
use lapin::types::{AMQPValue, ShortString};

/// Publishes `n` persistent messages numbered from 0 with a message id, a header, a priority
/// and (for odd ones) a per-message TTL, confirmed.
async fn fill(ch: &Channel, queue: &str, n: u32) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for i in 0..n {
        let mut headers = LapinTable::default();
        headers.insert("n".into(), AMQPValue::LongUInt(i));
        let mut props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type(ShortString::from("application/json"))
            .with_message_id(ShortString::from(format!("m{i}")))
            .with_priority(u8::try_from(i % 3).unwrap())
            .with_headers(headers);
        if i % 2 == 1 {
            props = props.with_expiration(ShortString::from("60000"));
        }
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            format!("{{\"n\":{i}}}").as_bytes(),
            props,
        )
        .await
        .unwrap();
    }
    within(10, ch.wait_for_confirms()).await.unwrap();
}

fn browse_path(queue: &str, query: &str) -> String {
    format!("/api/queues/%2F/{queue}/browse?{query}")
}

/// S-UI-1: a page of the queue in delivery order with what the queue knows of each message,
/// and the queue exactly as it was afterwards: same counts, the same next message, still not
/// redelivered; a message held by a consumer is not in the page.
#[tokio::test]
async fn s_ui_1_browse_shows_a_page_in_queue_order_and_changes_no_state() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "b1").await;
    fill(&ch, "b1", 6).await;
    // The head is held (unacked) by a get: browse shows only the 5 ready ones.
    let held = ch
        .basic_get("b1".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.delivery.data, b"{\"n\":0}");

    let page = get_json(&admin, &browse_path("b1", "offset=1&count=2")).await;
    assert_eq!(page["messages_ready"], 5);
    assert_eq!(page["offset"], 1);
    assert_eq!(page["count"], 2);
    let msgs = page["messages"].as_array().unwrap();
    let ids: Vec<&str> = msgs
        .iter()
        .map(|m| m["properties"]["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m2", "m3"]);
    let m2 = &msgs[0];
    assert_eq!(m2["position"], 1);
    assert_eq!(m2["payload"], "{\"n\":2}");
    assert_eq!(m2["payload_encoding"], "string");
    assert_eq!(m2["payload_bytes"], 7);
    assert_eq!(m2["priority"], 2);
    assert_eq!(m2["properties"]["headers"]["n"], 2);
    assert_eq!(m2["routing_key"], "b1");
    assert_eq!(m2["enqueued_at"], support::T0_MS);
    assert_eq!(m2["deadline"], Value::Null);
    assert_eq!(m2["delivery_count"], 0);
    assert_eq!(m2["redelivered"], false);
    assert_eq!(m2["paged_out"], false);
    // m3 carries a 60 s TTL: its deadline is its enqueue time plus that.
    assert_eq!(msgs[1]["deadline"], support::T0_MS + 60_000);

    // A page past the end is empty, not an error.
    let past = get_json(&admin, &browse_path("b1", "offset=5")).await;
    assert_eq!(past["messages"], json!([]));

    // Nothing changed: counts, and the next message is m1, not redelivered.
    let q = get_json(&admin, "/api/queues/%2F/b1").await;
    assert_eq!(
        (&q["messages_ready"], &q["messages_unacknowledged"]),
        (&json!(5), &json!(1))
    );
    let next = ch
        .basic_get("b1".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.delivery.data, b"{\"n\":1}");
    assert!(!next.delivery.redelivered);
    assert_eq!(ready_via_amqp(&ch, "b1").await, 4);

    // The held head, requeued, is back at position 0, redelivered, with its delivery count.
    ch.basic_nack(
        held.delivery.delivery_tag,
        lapin::options::BasicNackOptions {
            requeue: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let page = get_json(&admin, &browse_path("b1", "count=1")).await;
    let requeued = &page["messages"][0];
    assert_eq!(requeued["properties"]["message_id"], "m0");
    assert_eq!(requeued["redelivered"], true);
    assert_eq!(requeued["delivery_count"], 1);
}

/// S-UI-2: messages whose content is on disk are read back for the page (shown as paged
/// out) and stay on disk: the broker's loaded bytes stay 0.
#[tokio::test]
async fn s_ui_2_browse_reads_paged_out_messages_without_loading_them_back() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.message_memory_bytes = 0;
    })
    .await;
    let admin = guest(&server);
    let (_conn, ch) = server.channel().await;
    declare(&ch, "b2").await;
    fill(&ch, "b2", 4).await;
    server.handle.tick().await;
    let page = get_json(&admin, &browse_path("b2", "count=10&encoding=base64")).await;
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m["paged_out"], true, "{m}");
        assert_eq!(m["payload_encoding"], "base64");
        assert_eq!(m["properties"]["message_id"], format!("m{i}"));
    }
    let first = get_json(&admin, &browse_path("b2", "count=1&truncate=3")).await;
    assert_eq!(first["messages"][0]["payload"], "{\"n");
    assert_eq!(first["messages"][0]["payload_truncated"], true);
    assert_eq!(first["messages"][0]["payload_bytes"], 7);
    let loaded = {
        let (tx, rx) = tokio::sync::oneshot::channel();
        server
            .handle
            .admin_request(wharf_server::AdminRequest::Query(Box::new(move |view| {
                let _ = tx.send(view.broker.loaded_bytes());
            })))
            .await;
        rx.await.unwrap()
    };
    assert_eq!(loaded, 0, "browsing loaded nothing back into the queue");
    // Delivery still reads them back whole, first one first.
    let m = ch
        .basic_get("b2".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"{\"n\":0}");
}

pub(super) fn user(name: &str, tags: &[&str], vhosts: &[&str]) -> User {
    User {
        name: name.to_owned(),
        password: "pw".to_owned(),
        loopback_only: false,
        vhosts: vhosts.iter().map(|v| (*v).to_owned()).collect(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        initial_only: false,
    }
}

/// S-UI-3: `monitoring` may browse any vhost; a `management` user only its own vhosts (401
/// "User not authorised to access virtual host" otherwise, as for a queue's page); no
/// management tag or no credentials: 401.
#[tokio::test]
async fn s_ui_3_browse_is_for_readers_of_the_vhost() {
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
    declare(&ch, "b3").await;
    fill(&ch, "b3", 1).await;
    let path = browse_path("b3", "");
    let watch = Client::new(&base(&server), "watch", "pw");
    let page = get_json(&watch, &path).await;
    assert_eq!(page["messages"][0]["properties"]["message_id"], "m0");
    for (who, reason) in [
        ("dev", "User not authorised to access virtual host"),
        ("app", "Not management user"),
    ] {
        let a = call(&Client::new(&base(&server), who, "pw"), "GET", &path, None).await;
        assert_eq!(a.status, 401, "{who}: {}", a.body);
        assert_eq!(a.json()["reason"], reason, "{who}");
    }
    let wrong = call(
        &Client::new(&base(&server), "watch", "nope"),
        "GET",
        &path,
        None,
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(ready_via_amqp(&ch, "b3").await, 1);
}

/// S-UI-4: bad parameters get 400 naming the parameter; an unknown queue or vhost 404.
#[tokio::test]
async fn s_ui_4_browse_refuses_bad_input() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "b4").await;
    for query in [
        "offset=-1",
        "offset=x",
        "count=0",
        "count=501",
        "count=1e3",
        "truncate=-5",
        "encoding=hex",
    ] {
        let a = call(&admin, "GET", &browse_path("b4", query), None).await;
        assert_eq!(a.status, 400, "{query}: {}", a.body);
        assert_eq!(a.json()["error"], "bad_request", "{query}");
    }
    for path in [
        "/api/queues/%2F/nope/browse",
        "/api/queues/novhost/b4/browse",
    ] {
        let a = call(&admin, "GET", path, None).await;
        assert_eq!(a.status, 404, "{path}: {}", a.body);
    }
}

/// S-UI-5: the overview's `message_stats` carry the dashboard's series.
#[tokio::test]
async fn s_ui_5_overview_carries_confirm_redeliver_expired_and_dead_lettered() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "b5").await;
    fill(&ch, "b5", 2).await;
    let stats = get_json(&admin, "/api/overview").await["message_stats"].clone();
    assert_eq!(stats["confirm"], 2);
    for key in ["confirm", "redeliver", "expired", "dead_lettered"] {
        assert!(
            stats[format!("{key}_details")]["rate"].is_number(),
            "{key}: {stats}"
        );
    }
}

/// S-UI-6: the dashboard is served at `/` without credentials, from files in the binary, with
/// its script and style sheet; everything else stays the API's JSON 404.
#[tokio::test]
async fn s_ui_6_the_dashboard_is_served_at_the_root() {
    let (server, _) = start().await;
    let anonymous = Client::new(&base(&server), "", "");
    let page = call(&anonymous, "GET", "/", None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<script src=\"/ui/app.js\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"login-form\""));
    for asset in ["/ui/app.js", "/ui/app.css", "/index.html"] {
        let a = call(&anonymous, "GET", asset, None).await;
        assert_eq!(a.status, 200, "{asset}");
        assert!(!a.body.is_empty());
    }
    let missing = call(&anonymous, "GET", "/ui/nothing.js", None).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"], "Object Not Found");
}

/// S-UI-1 with S-PRIO: a priority queue browses in its delivery order, highest priority first.
#[tokio::test]
async fn s_ui_1_a_priority_queue_browses_in_delivery_order() {
    let (server, admin) = start().await;
    let (_conn, ch) = server.channel().await;
    let mut args = LapinTable::default();
    args.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(5));
    ch.queue_declare(
        "b7".into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        args,
    )
    .await
    .unwrap();
    fill(&ch, "b7", 6).await;
    let page = get_json(&admin, &browse_path("b7", "")).await;
    let ids: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["properties"]["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m2", "m5", "m1", "m4", "m0", "m3"]);
    let first = ch
        .basic_get("b7".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.delivery.data, b"{\"n\":2}");
}
