//! Queues: declare, get, list, delete, purge, and `get` with and without requeue, seen through AMQP.

use super::*;

#[tokio::test]
async fn queue_put_get_list_delete_and_the_answer_is_durable() {
    let (server, client) = start().await;
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 60000}})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    // Declaring it again is an update.
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 60000}})),
    )
    .await;
    assert_eq!(a.status, 204, "{}", a.body);
    // An inequivalent redeclare is the broker's 406, as a 400 with its text.
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 1}})),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.reason().contains("x-message-ttl"), "{}", a.reason());
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/bad",
        Some(json!({"arguments": {"x-expires": 0}})),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.reason().contains("x-expires"), "{}", a.reason());

    let q = get_json(&client, "/api/queues/%2F/orders").await;
    for key in [
        "name",
        "vhost",
        "durable",
        "auto_delete",
        "exclusive",
        "arguments",
        "node",
        "state",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "message_bytes",
        "consumers",
        "policy",
        "effective_policy_definition",
    ] {
        assert!(q.get(key).is_some(), "queue lacks {key}: {q}");
    }
    assert_eq!(q["name"], "orders");
    assert_eq!(q["vhost"], "/");
    assert_eq!(q["arguments"], json!({"x-message-ttl": 60000}));
    assert_eq!(q["effective_message_ttl"], 60000);
    let all = get_json(&client, "/api/queues").await;
    assert_eq!(all.as_array().unwrap().len(), 1);
    let in_vhost = get_json(&client, "/api/queues/%2F").await;
    assert_eq!(in_vhost, all);

    // The 201 promised durability: a restart keeps the queue.
    let server = restart(server).await;
    let client = guest(&server);
    let q = get_json(&client, "/api/queues/%2F/orders").await;
    assert_eq!(q["durable"], true);

    let a = call(&client, "DELETE", "/api/queues/%2F/orders", None).await;
    assert_eq!(a.status, 204);
    assert_eq!(
        call(&client, "GET", "/api/queues/%2F/orders", None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn purge_and_conditional_delete_are_seen_through_amqp() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "work").await;
    for i in 0..3u8 {
        publish(&ch, "work", &[i]).await;
    }
    assert_eq!(ready_via_amqp(&ch, "work").await, 3);
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-empty=true",
        None,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(ready_via_amqp(&ch, "work").await, 3);

    let a = call(&client, "DELETE", "/api/queues/%2F/work/contents", None).await;
    assert_eq!(a.status, 204, "{}", a.body);
    assert_eq!(ready_via_amqp(&ch, "work").await, 0);

    let _consumer = ch
        .basic_consume(
            "work".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-unused=true",
        None,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-empty=true",
        None,
    )
    .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let (_c2, ch2) = server.channel().await;
    let err = ch2
        .queue_declare(
            "work".into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            LapinTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(support::reply_code(&err), Some(404));
}

#[tokio::test]
async fn get_with_requeue_peeks_and_without_takes() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "peek").await;
    publish(&ch, "peek", b"hello").await;
    publish(&ch, "peek", &[0xff, 0x00, 0x01]).await;
    publish(&ch, "peek", b"third").await;

    let peek =
        json!({"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(peek)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let msgs = a.json();
    assert_eq!(msgs.as_array().unwrap().len(), 2);
    assert_eq!(msgs[0]["payload"], "hello");
    assert_eq!(msgs[0]["payload_encoding"], "string");
    assert_eq!(msgs[0]["payload_bytes"], 5);
    assert_eq!(msgs[0]["routing_key"], "peek");
    assert_eq!(msgs[0]["exchange"], "");
    assert_eq!(msgs[0]["properties"]["delivery_mode"], 2);
    assert_eq!(msgs[1]["payload"], "/wAB");
    assert_eq!(msgs[1]["payload_encoding"], "base64");
    assert_eq!(
        ready_via_amqp(&ch, "peek").await,
        3,
        "peek changed the queue"
    );

    let truncated =
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 2});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(truncated)).await;
    assert_eq!(a.json()[0]["payload"], "he");
    assert_eq!(a.json()[0]["payload_bytes"], 5);

    let take = json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(take)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()[0]["payload"], "aGVsbG8=");
    assert_eq!(a.json()[0]["message_count"], 2);
    assert_eq!(ready_via_amqp(&ch, "peek").await, 2);
    // The next message an AMQP client gets is the second one.
    let got = ch
        .basic_get("peek".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, vec![0xff, 0x00, 0x01]);

    let bad = json!({"count": 1, "ackmode": "sometimes"});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(bad)).await;
    assert_eq!(a.status, 400);
    let nope = json!({"count": 1, "ackmode": "ack_requeue_false"});
    let a = call(&client, "POST", "/api/queues/%2F/nope/get", Some(nope)).await;
    assert_eq!(a.status, 404);
}
