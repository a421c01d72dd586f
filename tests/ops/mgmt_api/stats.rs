//! Per-object `message_stats` (S-MGMT-8): queues, exchanges and channels count their
//! messages in and out, and the API turns the counts into rates over the broker's (manual)
//! clock.

use super::*;

async fn publish_to(ch: &Channel, exchange: &str, key: &str) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        b"m",
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

#[tokio::test]
async fn s_mgmt_8_queues_and_exchanges_have_message_stats_with_rates() {
    use lapin::options::{BasicAckOptions, BasicGetOptions, BasicRejectOptions};
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "s1").await;
    for (name, kind) in [("fan", "fanout"), ("lonely", "direct")] {
        let path = format!("/api/exchanges/%2F/{name}");
        call(&client, "PUT", &path, Some(json!({"type": kind}))).await;
    }
    call(
        &client,
        "POST",
        "/api/bindings/%2F/e/fan/q/s1",
        Some(json!({})),
    )
    .await;
    // The first listing is the first sample: rates are 0.
    let q = get_json(&client, "/api/queues/%2F/s1").await;
    assert_eq!(q["message_stats"]["publish"], 0);
    assert_eq!(q["message_stats"]["publish_details"]["rate"], 0.0);
    get_json(&client, "/api/exchanges/%2F").await;
    get_json(&client, "/api/channels").await;
    for _ in 0..10 {
        publish_to(&ch, "", "s1").await;
    }
    for _ in 0..5 {
        publish_to(&ch, "fan", "").await;
    }
    for _ in 0..3 {
        publish_to(&ch, "lonely", "nowhere").await;
    }
    // Four gets: one rejected back to the queue and got again (redelivered), three acked.
    let get = || ch.basic_get("s1".into(), BasicGetOptions::default());
    let first = get().await.unwrap().unwrap();
    first
        .delivery
        .acker
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    for _ in 0..3 {
        let m = get().await.unwrap().unwrap();
        m.delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .unwrap();
    }
    // A round trip on the channel: the acks before it were handled.
    ch.basic_qos(0, lapin::options::BasicQosOptions::default())
        .await
        .unwrap();
    server.advance(5_000).await;
    let s = &get_json(&client, "/api/queues/%2F/s1").await["message_stats"];
    assert_eq!(s["publish"], 15, "{s}");
    assert_eq!(s["deliver_get"], 4, "{s}");
    assert_eq!(s["redeliver"], 1, "{s}");
    assert_eq!(s["ack"], 3, "{s}");
    assert_eq!(s["publish_details"]["rate"], 3.0, "{s}");
    assert_eq!(s["ack_details"]["rate"], 0.6, "{s}");
    let all = get_json(&client, "/api/exchanges/%2F").await;
    let stats = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap()["message_stats"]
            .clone()
    };
    assert_eq!(stats("fan")["publish_in"], 5);
    assert_eq!(stats("fan")["publish_out"], 5);
    assert_eq!(stats("fan")["publish_in_details"]["rate"], 1.0);
    assert_eq!(stats("lonely")["publish_in"], 3);
    assert_eq!(stats("lonely")["publish_out"], 0);
    assert_eq!(stats("")["publish_in"], 10);
    assert_eq!(stats("")["publish_out"], 10);
    let one = get_json(&client, "/api/exchanges/%2F/lonely").await;
    assert_eq!(one["message_stats"]["publish_in"], 3);
    // The channel: what it published, was handed and acknowledged.
    let s = &get_json(&client, "/api/channels").await[0]["message_stats"];
    assert_eq!(s["publish"], 18, "{s}");
    assert_eq!(s["deliver_get"], 4, "{s}");
    assert_eq!(s["redeliver"], 1, "{s}");
    assert_eq!(s["ack"], 3, "{s}");
    assert_eq!(s["publish_details"]["rate"], 3.6, "{s}");
    // Nothing happens for 5 s more: the rates fall to 0, the counts stay.
    server.advance(5_000).await;
    let s = &get_json(&client, "/api/queues/%2F/s1").await["message_stats"];
    assert_eq!(s["publish"], 15);
    assert_eq!(s["publish_details"]["rate"], 0.0);
}
