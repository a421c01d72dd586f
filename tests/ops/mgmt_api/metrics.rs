//! `/metrics` on the management port: no authentication, RabbitMQ's names for the message
//! counters, queue gauges, free disk and memory (S-OPS-1), wharf's own figures under `wharf_`
//! (S-OPS-2). The Prometheus port serves the same text (`tests/ops/prometheus.rs`).

use super::*;

#[tokio::test]
async fn s_ops_1_metrics_need_no_auth_and_follow_traffic() {
    let (server, _) = start().await;
    let (_conn, ch) = server.channel().await;
    // Confirms come after the fsync, so every record below is counted before the scrape.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "m").await;
    for _ in 0..3 {
        publish(&ch, "m", b"abcd").await;
    }
    let got = ch
        .basic_get("m".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    got.ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    let _held = ch
        .basic_get("m".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    let anon = Client::anonymous(&base(&server));
    let a = call(&anon, "GET", "/metrics", None).await;
    assert_eq!(a.status, 200);
    let text = a.body;
    // Three persistent messages into a durable queue: at least one fsync, each counted in
    // both histograms, and the +Inf bucket holds them all.
    // Counts are integers; sums are written as floats by the encoder (`12.0`).
    let value_of = |name: &str| -> &str {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let syncs: u64 = value_of("wharf_wal_fsync_seconds_count").parse().unwrap();
    assert!(syncs >= 1, "{text}");
    assert_eq!(
        value_of("wharf_wal_records_per_fsync_count"),
        syncs.to_string()
    );
    assert_eq!(
        value_of("wharf_wal_fsync_seconds_bucket{le=\"+Inf\"}"),
        syncs.to_string()
    );
    let records: f64 = value_of("wharf_wal_records_per_fsync_sum").parse().unwrap();
    assert!(records >= 3.0, "{text}");
    // The broker task's batches (issue 18): every batch before the scrape's own is counted
    // in both histograms, each with at least one message.
    let batches: u64 = value_of("wharf_core_batch_seconds_count").parse().unwrap();
    assert!(
        batches >= 4,
        "declare, three publishes, gets and acks: {text}"
    );
    assert_eq!(
        value_of("wharf_core_batch_messages_count"),
        batches.to_string()
    );
    let drained: f64 = value_of("wharf_core_batch_messages_sum").parse().unwrap();
    assert!(drained >= 4.0, "{text}");
    for line in [
        "rabbitmq_queue_messages_ready 1",
        "rabbitmq_queue_messages_unacked 1",
        "rabbitmq_queue_messages 2",
        "rabbitmq_queue_messages_ready_bytes 4",
        "rabbitmq_global_messages_received_total{protocol=\"amqp091\"} 3",
        "rabbitmq_global_messages_received_confirm_total{protocol=\"amqp091\"} 3",
        "rabbitmq_global_messages_confirmed_total{protocol=\"amqp091\"} 3",
        "rabbitmq_global_messages_routed_total{protocol=\"amqp091\"} 3",
        "rabbitmq_global_messages_delivered_total{protocol=\"amqp091\",queue_type=\"rabbit_classic_queue\"} 2",
        "rabbitmq_global_messages_delivered_get_manual_ack_total{protocol=\"amqp091\",queue_type=\"rabbit_classic_queue\"} 2",
        "rabbitmq_global_messages_acknowledged_total{protocol=\"amqp091\",queue_type=\"rabbit_classic_queue\"} 1",
        "rabbitmq_global_publishers{protocol=\"amqp091\"} 1",
        "rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"100.0\"} 3",
        "rabbitmq_message_size_bytes_sum{protocol=\"amqp091\"} 12.0",
        "wharf_messages_expired_total 0",
        "rabbitmq_connections 1",
        "rabbitmq_channels 1",
        "rabbitmq_queues 1",
        "# TYPE rabbitmq_global_messages_received_total counter",
        "# TYPE rabbitmq_identity_info untyped",
        "# TYPE wharf_recovery_seconds gauge",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn s_ops_2_metrics_count_expired_and_dead_lettered_messages() {
    let (server, _) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "dead").await;
    let mut dlx = LapinTable::default();
    dlx.insert(
        "x-message-ttl".into(),
        lapin::types::AMQPValue::LongInt(1000),
    );
    dlx.insert(
        "x-dead-letter-exchange".into(),
        lapin::types::AMQPValue::LongString("".into()),
    );
    dlx.insert(
        "x-dead-letter-routing-key".into(),
        lapin::types::AMQPValue::LongString("dead".into()),
    );
    let mut plain = LapinTable::default();
    plain.insert(
        "x-message-ttl".into(),
        lapin::types::AMQPValue::LongInt(1000),
    );
    for (name, args) in [("with-dlx", dlx), ("plain", plain)] {
        ch.queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .unwrap();
        publish(&ch, name, b"m").await;
    }
    // S-TTL: both expire at 1000 ms on the manual clock; one of them is dead-lettered.
    server.advance(1001).await;
    let anon = Client::anonymous(&base(&server));
    let text = call(&anon, "GET", "/metrics", None).await.body;
    for line in [
        "wharf_messages_expired_total 2",
        "wharf_messages_dead_lettered_total 1",
        "rabbitmq_queue_messages_ready 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

/// The value of an unlabelled metric line `name value`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[tokio::test]
async fn s_ops_1_metrics_count_acked_messages_not_ack_methods() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "acks").await;
    for _ in 0..4 {
        publish(&ch, "acks", b"x").await;
    }
    let mut last = None;
    for _ in 0..3 {
        last = ch
            .basic_get("acks".into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap();
    }
    // One basic.ack with multiple=true settles three messages.
    last.unwrap()
        .ack(lapin::options::BasicAckOptions { multiple: true })
        .await
        .unwrap();
    let fourth = ch
        .basic_get("acks".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    fourth
        .ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    // A synchronous method after the acks on the same channel: the broker task has handled
    // them before it answers this.
    let empty = ch
        .basic_get("acks".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap();
    assert!(empty.is_none());
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    let labels = "{protocol=\"amqp091\",queue_type=\"rabbit_classic_queue\"}";
    let acked = format!("rabbitmq_global_messages_acknowledged_total{labels}");
    assert_eq!(metric(&text, &acked), 4, "{text}");
    let delivered = format!("rabbitmq_global_messages_delivered_total{labels}");
    assert_eq!(metric(&text, &delivered), 4);
    let empty = format!("rabbitmq_global_messages_get_empty_total{labels}");
    assert_eq!(metric(&text, &empty), 1);
    assert_eq!(
        metric(&text, "rabbitmq_queue_messages_unacked"),
        0,
        "{text}"
    );
    // `/api/overview`'s ack count is the same counter.
    let overview = get_json(&client, "/api/overview").await;
    assert_eq!(overview["message_stats"]["ack"], 4, "{overview}");
    // No made-up `messages_unconfirmed` on channels (confirms are not counted per channel).
    let channels = get_json(&client, "/api/channels").await;
    let open = channels.as_array().unwrap();
    assert!(!open.is_empty());
    for c in open {
        assert!(c.get("messages_unconfirmed").is_none(), "{c}");
        assert_eq!(c["confirm"], true);
    }
}

/// A probe that reports fixed figures.
#[derive(Debug)]
struct FixedProbe;

impl wharf_server::ResourceProbe for FixedProbe {
    fn disk_free_bytes(&self) -> std::io::Result<u64> {
        Ok(123_456_789)
    }
    fn memory_used_bytes(&self) -> std::io::Result<u64> {
        Ok(4_567_000)
    }
}

#[tokio::test]
async fn s_ops_1_metrics_report_free_disk_and_memory_as_the_alarm_monitor_measured_them() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.resource_probe = Some(std::sync::Arc::new(FixedProbe));
        c.memory_high_watermark = wharf_server::MemoryLimit::Bytes(1 << 30);
    })
    .await;
    server.handle.check_resources().await;
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    assert_eq!(
        metric(&text, "rabbitmq_disk_space_available_bytes"),
        123_456_789,
        "{text}"
    );
    assert_eq!(
        metric(&text, "rabbitmq_process_resident_memory_bytes"),
        4_567_000
    );
    assert_eq!(
        metric(&text, "rabbitmq_resident_memory_limit_bytes"),
        1 << 30
    );
    assert_eq!(
        metric(&text, "rabbitmq_disk_space_available_limit_bytes"),
        50_000_000
    );
    assert_eq!(metric(&text, "rabbitmq_alarms_memory_used_watermark"), 0);
    assert_eq!(
        metric(&text, "rabbitmq_alarms_free_disk_space_watermark"),
        0
    );
    for line in [
        "# TYPE rabbitmq_disk_space_available_bytes gauge",
        "# TYPE rabbitmq_process_resident_memory_bytes gauge",
        "# TYPE wharf_recovery_seconds gauge",
        "# TYPE wharf_wal_fsync_seconds histogram",
        "# TYPE wharf_wal_records_per_fsync histogram",
        "# TYPE wharf_wal_segment_roll_seconds histogram",
        "# TYPE wharf_wal_preallocate_seconds histogram",
        "# TYPE wharf_core_batch_seconds histogram",
        "# TYPE wharf_core_batch_messages histogram",
        "# TYPE wharf_checkpoint_start_seconds histogram",
        "# TYPE wharf_page_out_seconds histogram",
        "# TYPE wharf_read_back_seconds histogram",
        "# TYPE wharf_messages_expired_total counter",
        "# TYPE rabbitmq_alarms_memory_used_watermark untyped",
        "# TYPE wharf_messages_dead_lettered_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

/// S-OPS-1: the counters RabbitMQ labels by queue type count each queue under its own type,
/// `rabbit_quorum_queue` or `rabbit_classic_queue`, both types served from the start.
#[tokio::test]
async fn s_ops_1_global_counters_are_labelled_with_each_queues_type() {
    let (server, _) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    let series = |name: &str, queue_type: &str| {
        format!(
            "rabbitmq_global_messages_{name}_total{{protocol=\"amqp091\",queue_type=\"rabbit_{queue_type}_queue\"}}"
        )
    };
    for queue_type in ["classic", "quorum"] {
        assert_eq!(metric(&text, &series("delivered", queue_type)), 0, "{text}");
    }
    let mut quorum = LapinTable::default();
    quorum.insert(
        "x-queue-type".into(),
        lapin::types::AMQPValue::LongString("quorum".into()),
    );
    ch.queue_declare(
        "qq".into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        quorum,
    )
    .await
    .unwrap();
    declare(&ch, "cq").await;
    for q in ["qq", "qq", "cq"] {
        publish(&ch, q, b"x").await;
    }
    let get = |queue: &'static str, no_ack: bool| {
        let ch = ch.clone();
        async move {
            ch.basic_get(queue.into(), BasicGetOptions { no_ack })
                .await
                .unwrap()
        }
    };
    get("qq", false)
        .await
        .unwrap()
        .ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    assert!(get("qq", true).await.is_some());
    assert!(get("qq", true).await.is_none());
    assert!(get("cq", true).await.is_some());
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    for (name, quorum, classic) in [
        ("delivered", 2, 1),
        ("delivered_get_manual_ack", 1, 0),
        ("delivered_get_auto_ack", 1, 1),
        ("get_empty", 1, 0),
        ("acknowledged", 1, 0),
        ("redelivered", 0, 0),
    ] {
        assert_eq!(
            metric(&text, &series(name, "quorum")),
            quorum,
            "{name}\n{text}"
        );
        assert_eq!(metric(&text, &series(name, "classic")), classic, "{name}");
    }
    // Counters RabbitMQ labels by protocol alone stay so.
    assert_eq!(
        metric(
            &text,
            "rabbitmq_global_messages_received_total{protocol=\"amqp091\"}"
        ),
        3
    );
}
