//! `/metrics`: no authentication, message counters, free disk and memory.

use super::*;

#[tokio::test]
async fn metrics_need_no_auth_and_follow_traffic() {
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
    let count_of = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let syncs = count_of("wharf_wal_fsync_seconds_count");
    assert!(syncs >= 1, "{text}");
    assert_eq!(count_of("wharf_wal_records_per_fsync_count"), syncs);
    assert_eq!(
        count_of("wharf_wal_fsync_seconds_bucket{le=\"+Inf\"}"),
        syncs
    );
    assert!(count_of("wharf_wal_records_per_fsync_sum") >= 3, "{text}");
    for line in [
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"m\"} 1",
        "wharf_queue_messages_unacked{vhost=\"/\",queue=\"m\"} 1",
        "wharf_queue_messages_ready_bytes{vhost=\"/\",queue=\"m\"} 4",
        "wharf_messages_published_total 3",
        "wharf_messages_delivered_total 2",
        "wharf_messages_acked_total 1",
        "wharf_messages_expired_total 0",
        "wharf_connections 1",
        "# TYPE wharf_messages_published_total counter",
        "# TYPE wharf_recovery_seconds gauge",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn metrics_count_expired_and_dead_lettered_messages() {
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
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"dead\"} 1",
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"plain\"} 0",
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
async fn metrics_count_acked_messages_not_ack_methods() {
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
    assert_eq!(metric(&text, "wharf_messages_acked_total"), 4, "{text}");
    assert_eq!(metric(&text, "wharf_messages_delivered_total"), 4);
    assert!(
        text.lines()
            .any(|l| l == "wharf_queue_messages_unacked{vhost=\"/\",queue=\"acks\"} 0"),
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
async fn metrics_report_free_disk_and_memory_as_the_alarm_monitor_measured_them() {
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
        metric(&text, "wharf_disk_free_bytes"),
        123_456_789,
        "{text}"
    );
    assert_eq!(metric(&text, "wharf_memory_used_bytes"), 4_567_000);
    assert_eq!(metric(&text, "wharf_memory_limit_bytes"), 1 << 30);
    for line in [
        "# TYPE wharf_disk_free_bytes gauge",
        "# TYPE wharf_memory_used_bytes gauge",
        "# TYPE wharf_recovery_seconds gauge",
        "# TYPE wharf_wal_fsync_seconds histogram",
        "# TYPE wharf_wal_records_per_fsync histogram",
        "# TYPE wharf_messages_expired_total counter",
        "# TYPE wharf_messages_dead_lettered_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
