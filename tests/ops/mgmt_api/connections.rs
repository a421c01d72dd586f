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
    let chans = get_json(&client, "/api/channels").await;
    assert_eq!(chans[0]["number"], 1);
    assert_eq!(chans[0]["confirm"], true);
    assert_eq!(chans[0]["consumer_count"], 1);
    assert_eq!(chans[0]["connection_details"]["name"], c["name"]);
    let consumers = get_json(&client, "/api/consumers").await;
    assert_eq!(consumers.as_array().unwrap().len(), 1);
    let k = &consumers[0];
    assert_eq!(k["consumer_tag"], "worker-1");
    assert_eq!(k["queue"], json!({"name": "jobs", "vhost": "/"}));
    assert_eq!(k["ack_required"], true);
    assert_eq!(k["prefetch_count"], 10);
    assert_eq!(k["channel_details"]["connection_name"], c["name"]);
}
