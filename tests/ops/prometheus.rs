//! The Prometheus listener (S-OPS-1, S-OPS-3): `/metrics`, `/metrics/per-object` and
//! `/metrics/detailed` as `rabbitmq_prometheus` serves them, read over HTTP from an
//! in-process server; then a real Prometheus server (Debian's `prometheus`, started here on
//! loopback ports with a generated configuration) scrapes wharf, and queries through its HTTP
//! API (among them the RabbitMQ-Overview dashboard's join on `rabbitmq_identity_info`) return
//! the expected series with the right values. Without a `prometheus` binary that test says
//! so loudly and passes; `.ci/run` installs it, so in CI it always runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use serde_json::Value;
use wharf_ctl::{Client, segment};

use crate::support::{TestServer, within};

async fn start() -> TestServer {
    TestServer::start_with(|c| {
        c.prometheus_bind = Some("127.0.0.1:0".to_owned());
        c.vhosts = vec!["other".to_owned()];
    })
    .await
}

/// `GET path` on the Prometheus listener: (status, body).
async fn scrape(server: &TestServer, path: &str) -> (u16, String) {
    let base = format!("http://{}", server.handle.prometheus_addr().unwrap());
    let path = path.to_owned();
    let answer = within(
        10,
        tokio::task::spawn_blocking(move || Client::anonymous(&base).get(&path)),
    )
    .await
    .unwrap()
    .unwrap();
    (answer.status, answer.body)
}

async fn fill(ch: &Channel, queue: &str, messages: usize) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    for _ in 0..messages {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"hello",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
}

fn has(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in\n{text}"
    );
}

fn lacks(text: &str, needle: &str) {
    assert!(!text.contains(needle), "unexpected {needle:?} in\n{text}");
}

#[tokio::test]
async fn s_ops_1_the_prometheus_port_serves_rabbitmqs_three_endpoints() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    fill(&ch, "q1", 3).await;
    fill(&ch, "q2", 2).await;

    let (status, text) = scrape(&server, "/metrics").await;
    assert_eq!(status, 200);
    // Aggregated: per-queue families summed, without labels.
    has(&text, "rabbitmq_queue_messages_ready 5");
    has(&text, "rabbitmq_queues 2");
    has(&text, "rabbitmq_queues_created_total 2");
    has(&text, "rabbitmq_queues_declared_total 2");
    has(&text, "rabbitmq_connections_opened_total 1");
    has(&text, "rabbitmq_channels_closed_total 0");
    has(&text, "# TYPE rabbitmq_queue_messages_ready gauge");
    has(
        &text,
        "rabbitmq_identity_info{rabbitmq_node=\"wharf@localhost\",rabbitmq_cluster=\"wharf@localhost\",rabbitmq_endpoint=\"aggregated\"} 1",
    );
    lacks(&text, "queue=\"q1\"");

    let (_, text) = scrape(&server, "/metrics/per-object").await;
    has(
        &text,
        "rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"q1\"} 3",
    );
    has(
        &text,
        "rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"q2\"} 2",
    );
    has(
        &text,
        "rabbitmq_queue_messages_ready_bytes{vhost=\"/\",queue=\"q1\"} 15",
    );
    has(
        &text,
        "rabbitmq_queue_consumers{vhost=\"/\",queue=\"q2\"} 0",
    );

    // S-OPS-3: only the families asked for, in the vhosts asked for, prefixed.
    let (status, text) = scrape(
        &server,
        "/metrics/detailed?family=queue_coarse_metrics&family=channel_metrics&family=bogus&vhost=%2F",
    )
    .await;
    assert_eq!(status, 200);
    has(
        &text,
        "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q1\"} 3",
    );
    lacks(&text, "rabbitmq_detailed_queue_consumers");
    lacks(&text, "rabbitmq_global_");
    has(
        &text,
        "rabbitmq_identity_info{rabbitmq_node=\"wharf@localhost\",rabbitmq_cluster=\"wharf@localhost\",rabbitmq_endpoint=\"detailed\"} 1",
    );
    let (_, text) = scrape(
        &server,
        "/metrics/detailed?family=queue_coarse_metrics&vhost=other",
    )
    .await;
    lacks(&text, "queue=\"q1\"");

    let (status, _) = scrape(&server, "/metrics/nope").await;
    assert_eq!(status, 404);
}

/// A Prometheus server on a free loopback port, scraping `target` every second; killed (by
/// the pid we spawned) when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

impl Prometheus {
    fn start(bin: &Path, target: std::net::SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: wharf\n    \
                 metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// The value of the single series `query` returns, once Prometheus has one (it has to
    /// start and scrape first: bounded polling of a real process, not a clock).
    async fn value(&self, query: &str) -> String {
        let client = Client::anonymous(&self.url);
        let path = format!("/api/v1/query?query={}", segment(query));
        for _ in 0..120 {
            let (client, path) = (client.clone(), path.clone());
            let answer = tokio::task::spawn_blocking(move || client.get(&path))
                .await
                .unwrap();
            if let Ok(a) = answer {
                let json: Value = a.json();
                if let Some([series]) = json["data"]["result"].as_array().map(Vec::as_slice) {
                    return series["value"][1].as_str().unwrap().to_owned();
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("Prometheus at {} never answered {query}", self.url);
    }
}

#[tokio::test]
async fn s_ops_1_a_real_prometheus_scrapes_wharf_and_the_dashboards_queries_answer() {
    let bin = Path::new("/usr/bin/prometheus");
    if !bin.exists() {
        eprintln!(
            "\n*** SKIPPED s_ops_1_a_real_prometheus_scrapes_wharf: no /usr/bin/prometheus \
             (apt-get install prometheus; .ci/run installs it) ***\n"
        );
        return;
    }
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    fill(&ch, "scraped", 3).await;
    let prometheus = Prometheus::start(bin, server.handle.prometheus_addr().unwrap());
    assert_eq!(prometheus.value("rabbitmq_queue_messages_ready").await, "3");
    // The RabbitMQ-Overview dashboard's "Ready messages" and "Incoming messages / s" panels
    // join every series on rabbitmq_identity_info's cluster label.
    let ready = "sum(rabbitmq_queue_messages_ready * on(instance, job) \
                 group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster=\"wharf@localhost\"})";
    assert_eq!(prometheus.value(ready).await, "3");
    let received = "rabbitmq_global_messages_received_total * on(instance, job) \
                    group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info";
    assert_eq!(prometheus.value(received).await, "3");
    assert_eq!(prometheus.value("rabbitmq_connections").await, "1");
    // "Message Size Distribution" matches RabbitMQ's spelling of the bucket bounds.
    let sizes = "rabbitmq_message_size_bytes_bucket{le=\"100.0\"}";
    assert_eq!(prometheus.value(sizes).await, "3");
    assert_eq!(
        prometheus
            .value("rabbitmq_global_messages_confirmed_total")
            .await,
        "3"
    );
}

/// The value of the one sample of `name` labelled `channel` (any value) in `text`.
fn per_object(text: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{channel=\"");
    let values: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(values.len(), 1, "one sample of {name} in\n{text}");
    values[0]
}

/// S-OPS-10: the per-connection and per-channel families count one channel's traffic, per
/// object on `/metrics/per-object` and `/metrics/detailed`, summed on `/metrics`.
#[tokio::test]
async fn s_ops_10_connections_and_channels_have_rabbitmqs_families() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    fill(&ch, "pq", 2).await;
    // Unroutable and not mandatory: dropped (and still confirmed, as RabbitMQ confirms it).
    ch.basic_publish(
        "".into(),
        "nowhere".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let get = |no_ack| {
        let ch = ch.clone();
        async move {
            ch.basic_get("pq".into(), lapin::options::BasicGetOptions { no_ack })
                .await
                .unwrap()
        }
    };
    get(false)
        .await
        .unwrap()
        .ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    assert!(get(true).await.is_some());
    assert!(get(true).await.is_none());

    let (status, text) = scrape(&server, "/metrics/per-object").await;
    assert_eq!(status, 200);
    for (name, value) in [
        ("rabbitmq_channel_messages_published_total", 3),
        ("rabbitmq_channel_messages_confirmed_total", 3),
        ("rabbitmq_channel_messages_unroutable_dropped_total", 1),
        ("rabbitmq_channel_messages_unroutable_returned_total", 0),
        ("rabbitmq_channel_get_ack_total", 1),
        ("rabbitmq_channel_get_total", 1),
        ("rabbitmq_channel_get_empty_total", 1),
        ("rabbitmq_channel_messages_acked_total", 1),
        ("rabbitmq_channel_messages_delivered_total", 0),
        ("rabbitmq_channel_messages_unacked", 0),
        ("rabbitmq_channel_consumers", 0),
        ("rabbitmq_connection_channels", 1),
    ] {
        assert_eq!(per_object(&text, name), value, "{name}\n{text}");
    }
    // Bytes both ways: at least the protocol header and the publishes in, the frames out.
    assert!(per_object(&text, "rabbitmq_connection_incoming_bytes_total") > 3 * 8);
    assert!(per_object(&text, "rabbitmq_connection_outgoing_bytes_total") > 0);
    has(
        &text,
        "# TYPE rabbitmq_connection_incoming_bytes_total counter",
    );
    has(&text, "# TYPE rabbitmq_channel_consumers gauge");

    let (_, aggregated) = scrape(&server, "/metrics").await;
    has(&aggregated, "rabbitmq_channel_messages_published_total 3");
    has(&aggregated, "rabbitmq_channel_get_empty_total 1");
    lacks(&aggregated, "channel=\"");

    let (_, detailed) = scrape(&server, "/metrics/detailed?family=channel_queue_metrics").await;
    assert_eq!(
        per_object(&detailed, "rabbitmq_detailed_channel_get_total"),
        1
    );
    lacks(
        &detailed,
        "rabbitmq_detailed_channel_messages_published_total",
    );
    lacks(
        &detailed,
        "rabbitmq_detailed_connection_incoming_bytes_total",
    );
}

/// The metrics read each connection's traffic and channel counts without copying the rest of
/// it (issue 18: `Connections::traffic`, not `list`, per scrape); what they read is what the
/// listing says, consumers and unacked messages included, on several connections.
#[tokio::test]
async fn s_ops_10_the_metrics_read_of_connections_what_the_listing_shows() {
    use lapin::options::{BasicConsumeOptions, BasicQosOptions};
    let server = start().await;
    let (_publisher, pch) = server.channel().await;
    fill(&pch, "held", 5).await;
    let (consumer, cch) = server.channel().await;
    cch.basic_qos(3, BasicQosOptions::default()).await.unwrap();
    let _consumer = cch
        .basic_consume(
            "held".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _second = consumer.create_channel().await.unwrap();
    let (_idle, _) = server.channel().await;
    let (done, answer) = tokio::sync::oneshot::channel();
    let query: wharf_server::AdminQuery = Box::new(move |view| {
        let _ = done.send((view.connections.list(), view.connections.traffic()));
    });
    // The consumer holds its 3 unacked messages once the broker task has delivered them.
    let (listed, traffic) = within(10, async {
        loop {
            let (done, answer) = tokio::sync::oneshot::channel();
            let probe: wharf_server::AdminQuery = Box::new(move |view| {
                let _ = done.send(view.broker.totals().unacked);
            });
            server
                .handle
                .admin_request(wharf_server::AdminRequest::Query(probe))
                .await;
            if answer.await.unwrap() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server
            .handle
            .admin_request(wharf_server::AdminRequest::Query(query))
            .await;
        answer.await.unwrap()
    })
    .await;
    assert_eq!(listed.len(), 3);
    let expected: Vec<_> = listed
        .iter()
        .map(|c| {
            let channels: Vec<_> = c.channels.iter().map(|ch| (ch.number, ch.stats)).collect();
            (c.peer, channels)
        })
        .collect();
    let read: Vec<_> = traffic
        .iter()
        .map(|c| (c.peer, c.channels.clone()))
        .collect();
    assert_eq!(read, expected);
    let held: Vec<_> = traffic
        .iter()
        .flat_map(|c| c.channels.iter())
        .map(|(_, s)| (s.consumers, s.unacked))
        .filter(|&(consumers, _)| consumers > 0)
        .collect();
    assert_eq!(held, vec![(1, 3)]);
    // Traffic counters only grow; the listing was taken first.
    for (l, t) in listed.iter().zip(&traffic) {
        assert!(t.traffic.0 >= l.traffic.0 && t.traffic.1 >= l.traffic.1);
        assert!(l.traffic.0 > 0);
    }
}
