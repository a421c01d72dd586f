//! Connections, channels and consumers as listed by the API.

use super::*;

#[tokio::test]
async fn connections_channels_and_consumers_are_listed() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "jobs").await;
    ch.basic_qos(10, lapin::options::BasicQosOptions::default())
        .await
        .unwrap();
    let _consumer = ch
        .basic_consume(
            "jobs".into(),
            "worker-1".into(),
            BasicConsumeOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    let conns = get_json(&client, "/api/connections").await;
    assert_eq!(conns.as_array().unwrap().len(), 1);
    let c = &conns[0];
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["peer_host"], "127.0.0.1");
    assert_eq!(c["channels"], 1);
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    // S-MGMT-8 / S-OPS-10: the bytes read from and written to its socket so far.
    assert!(c["recv_oct"].as_u64().unwrap() > 8, "{c}");
    assert!(c["send_oct"].as_u64().unwrap() > 0, "{c}");
    let chans = get_json(&client, "/api/channels").await;
    assert_eq!(chans[0]["number"], 1);
    assert_eq!(chans[0]["confirm"], true);
    assert_eq!(chans[0]["consumer_count"], 1);
    assert_eq!(chans[0]["connection_details"]["name"], c["name"]);
    let consumers = get_json(&client, "/api/consumers/%2F").await;
    assert_eq!(consumers.as_array().unwrap().len(), 1);
    let k = &consumers[0];
    assert_eq!(k["consumer_tag"], "worker-1");
    assert_eq!(k["queue"], json!({"name": "jobs", "vhost": "/"}));
    assert_eq!(k["ack_required"], true);
    assert_eq!(k["prefetch_count"], 10);
    assert_eq!(k["channel_details"]["connection_name"], c["name"]);
}

/// A durable queue with `args` (lapin types).
async fn declare_with(ch: &Channel, queue: &str, args: &[(&str, lapin::types::AMQPValue)]) {
    let mut t = LapinTable::default();
    for (k, v) in args {
        t.insert((*k).into(), v.clone());
    }
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        t,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn s_cons_7_consumer_listing_shows_single_active_and_waiting() {
    use lapin::types::{AMQPValue, LongString};
    let (server, client) = start().await;
    let (conn, ch) = server.channel().await;
    declare_with(
        &ch,
        "sac",
        &[("x-single-active-consumer", AMQPValue::Boolean(true))],
    )
    .await;
    declare_with(
        &ch,
        "qq",
        &[(
            "x-queue-type",
            AMQPValue::LongString(LongString::from("quorum")),
        )],
    )
    .await;
    let mut prio = LapinTable::default();
    prio.insert("x-priority".into(), AMQPValue::LongInt(5));
    let ch2 = conn.create_channel().await.unwrap();
    // Kept alive: lapin cancels a consumer it drops.
    let mut kept = Vec::new();
    for (c, tag, args) in [
        (&ch, "first", LapinTable::default()),
        (&ch2, "second", prio),
    ] {
        let k = c
            .basic_consume(
                "sac".into(),
                tag.into(),
                BasicConsumeOptions::default(),
                args,
            )
            .await
            .unwrap();
        kept.push(k);
    }
    let consumers = get_json(&client, "/api/consumers/%2F").await;
    eprintln!("{consumers}");
    let by_tag = |tag: &str| {
        consumers
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["consumer_tag"] == tag)
            .unwrap()
            .clone()
    };
    let (first, second) = (by_tag("first"), by_tag("second"));
    assert_eq!(first["active"], true);
    assert_eq!(first["activity_status"], "single_active");
    assert_eq!(second["active"], false);
    assert_eq!(second["activity_status"], "waiting");
    assert_eq!(second["arguments"], json!({"x-priority": 5}));
    let q = get_json(&client, "/api/queues/%2F/qq").await;
    assert_eq!(q["type"], "quorum", "S-QQ-1");
}
