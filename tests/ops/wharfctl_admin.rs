//! `wharfctl`'s node administration commands against an in-process server: closing
//! connections (S-OPS-9) and changing the resource alarms' limits at runtime (S-OPS-8), with
//! rabbitmqctl's output lines and exit codes, and `status` listing every listener (S-OPS-6).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use futures_lite::StreamExt as _;
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value, json};

use crate::support::{self, TestServer, within};
use crate::wharfctl::{ctl, url};
use wharf_ctl::Client;

/// A probe with fixed figures: 1 GB free on disk, 98.7 MB of memory used.
#[derive(Debug)]
struct Fixed;

impl wharf_server::ResourceProbe for Fixed {
    fn disk_free_bytes(&self) -> std::io::Result<u64> {
        Ok(1_000_000_000)
    }
    fn memory_used_bytes(&self) -> std::io::Result<u64> {
        Ok(98_765_432)
    }
}

fn with_probe(c: &mut wharf_server::ServerConfig) {
    c.mgmt_bind = Some("127.0.0.1:0".to_owned());
    c.resource_probe = Some(Arc::new(Fixed));
    c.memory_high_watermark = wharf_server::MemoryLimit::Bytes(2_000_000_000);
    c.disk_free_limit_bytes = 10_000_000;
}

async fn api(server: &TestServer, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = Client::new(&url(server), "guest", "guest");
    let (method, path) = (method.to_owned(), path.to_owned());
    let a = tokio::task::spawn_blocking(move || client.request(&method, &path, body.as_ref()))
        .await
        .unwrap()
        .unwrap();
    (a.status, a.json())
}

async fn node(server: &TestServer) -> Value {
    let (status, n) = api(server, "GET", "/api/nodes/wharf@localhost", None).await;
    assert_eq!(status, 200, "{n}");
    n
}

#[tokio::test]
async fn s_ops_8_the_memory_watermark_changes_at_runtime_and_applies_at_once() {
    let server = TestServer::start_with(with_probe).await;
    server.handle.check_resources().await;
    assert_eq!(node(&server).await["mem_alarm"], false);
    let r = ctl(
        &server,
        &["set_vm_memory_high_watermark", "absolute", "50MB"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Setting memory threshold on wharf@localhost to 50MB bytes ...\n"
    );
    // No waiting for the monitor's next round: the alarm is on when the command returns.
    let n = node(&server).await;
    assert_eq!(n["mem_limit"], 50_000_000);
    assert_eq!(n["mem_alarm"], true);
    let r = ctl(&server, &["status"]).await;
    assert!(
        r.out.contains("Memory alarm on node wharf@localhost"),
        "{}",
        r.out
    );
    // A fraction of the memory available: 1.0 is all of it, 0.5 half (to a byte).
    let r = ctl(&server, &["set_vm_memory_high_watermark", "1.0"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Setting memory threshold on wharf@localhost to 1.0 ...\n"
    );
    let all = node(&server).await["mem_limit"].as_u64().unwrap();
    assert_eq!(node(&server).await["mem_alarm"], false);
    ctl(&server, &["set_vm_memory_high_watermark", "0.5", "-q"]).await;
    let half = node(&server).await["mem_limit"].as_u64().unwrap();
    assert!(half.abs_diff(all / 2) <= 1, "{half} vs {all}");
    let (_, limits) = api(&server, "GET", "/api/wharf/resource-limits", None).await;
    assert_eq!(limits["vm_memory_high_watermark"], json!({"relative": 0.5}));
    assert_eq!(limits["vm_memory_limit"], half);
}

#[tokio::test]
async fn s_ops_8_refused_thresholds_exit_as_rabbitmqctls() {
    let server = TestServer::start_with(with_probe).await;
    for (args, code, text) in [
        (
            &["set_vm_memory_high_watermark", "1.5"][..],
            65,
            "Bad argument: The threshold should be a fraction between 0.0 and 1.0",
        ),
        (
            &["set_vm_memory_high_watermark", "abc"],
            65,
            "Bad argument.",
        ),
        (
            &["set_vm_memory_high_watermark", "absolute", "1gb"],
            65,
            "Bad argument: Invalid units.",
        ),
        (
            &["set_disk_free_limit", "50mb"],
            65,
            "Bad argument: Invalid units.",
        ),
        (
            &["set_disk_free_limit", "mem_relative", "abc"],
            65,
            "Bad argument.",
        ),
        (&["set_vm_memory_high_watermark"], 64, "Usage:"),
        (&["set_disk_free_limit", "a", "b", "c"], 64, "Usage:"),
    ] {
        let r = ctl(&server, args).await;
        assert_eq!(r.code, code, "{args:?}: {}", r.err);
        assert!(r.err.contains(text), "{args:?}: {}", r.err);
    }
    // Nothing changed.
    let (_, limits) = api(&server, "GET", "/api/wharf/resource-limits", None).await;
    assert_eq!(limits["vm_memory_limit"], 2_000_000_000);
    assert_eq!(limits["disk_free_limit_bytes"], 10_000_000);
    // An unknown setting is refused, not ignored.
    let (status, body) = api(
        &server,
        "PUT",
        "/api/wharf/resource-limits",
        Some(json!({"vm_memory_high_watermark_paging_ratio": {"relative": 0.5}})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn s_ops_8_the_disk_limit_changes_at_runtime_and_not_across_a_restart() {
    let server = TestServer::start_with(with_probe).await;
    server.handle.check_resources().await;
    assert_eq!(node(&server).await["disk_free_alarm"], false);
    let r = ctl(&server, &["set_disk_free_limit", "2GB"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Setting disk free limit on wharf@localhost to 2GB bytes ...\n"
    );
    let n = node(&server).await;
    assert_eq!(n["disk_free_limit"], 2_000_000_000);
    assert_eq!(n["disk_free_alarm"], true);
    let r = ctl(&server, &["set_disk_free_limit", "1000000"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(node(&server).await["disk_free_alarm"], false);
    // A multiple of the memory available (what a watermark of 1.0 computes to).
    ctl(&server, &["set_vm_memory_high_watermark", "1.0", "-q"]).await;
    let memory = node(&server).await["mem_limit"].as_u64().unwrap();
    let r = ctl(&server, &["set_disk_free_limit", "mem_relative", "1.5"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Setting disk free limit on wharf@localhost to 1.5 times the total RAM ...\n"
    );
    let (_, limits) = api(&server, "GET", "/api/wharf/resource-limits", None).await;
    assert_eq!(limits["disk_free_limit"], json!({"mem_relative": 1.5}));
    let limit = limits["disk_free_limit_bytes"].as_u64().unwrap();
    assert!(
        limit.abs_diff(memory / 2 * 3) <= 2,
        "{limit} vs 1.5 x {memory}"
    );
    assert_eq!(node(&server).await["disk_free_limit"], limit);
    // Not kept: a restart applies the configured limit again.
    let TestServer { handle, clock, dir } = server;
    handle.shutdown().await.unwrap();
    let mut config = wharf_server::ServerConfig::new("127.0.0.1:0", dir.path());
    config.clock = Arc::new(clock.clone());
    with_probe(&mut config);
    let handle = wharf_server::Server::start(config).await.unwrap();
    let server = TestServer { handle, clock, dir };
    server.handle.check_resources().await;
    let n = node(&server).await;
    assert_eq!(n["disk_free_limit"], 10_000_000);
    assert_eq!(n["disk_free_alarm"], false);
}

#[tokio::test]
async fn s_ops_8_only_administrators_change_the_limits() {
    let server = TestServer::start_with(with_probe).await;
    let admin = Client::new(&url(&server), "guest", "guest");
    let watcher = Client::new(&url(&server), "watcher", "pw");
    let a = tokio::task::spawn_blocking(move || {
        admin
            .request(
                "PUT",
                "/api/users/watcher",
                Some(&json!({"password": "pw", "tags": "monitoring"})),
            )
            .unwrap();
        watcher
            .request(
                "PUT",
                "/api/wharf/resource-limits",
                Some(&json!({"disk_free_limit": {"absolute": 1}})),
            )
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(a.reason(), "Not administrator user");
}

/// The names `wharfctl list_connections name` prints (header line skipped).
async fn connection_names(server: &TestServer) -> Vec<String> {
    let r = ctl(server, &["list_connections", "name", "-q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    r.out.lines().skip(1).map(str::to_owned).collect()
}

/// Waits for the connection's close by the server: (reply code, text).
async fn closed_with(
    events: &mut (impl futures_lite::Stream<Item = lapin::Event> + Unpin),
) -> (Option<u16>, String) {
    loop {
        if let lapin::Event::Error(e) = within(10, events.next()).await.unwrap() {
            return (support::reply_code(&e), support::reply_text(&e));
        }
    }
}

#[tokio::test]
async fn s_ops_9_close_connection_tells_the_client_the_reason() {
    let server = crate::wharfctl::start().await;
    let conn = server.connect().await;
    let mut events = Box::pin(conn.events_listener());
    let names = connection_names(&server).await;
    assert_eq!(names.len(), 1, "{names:?}");
    let r = ctl(&server, &["close_connection", &names[0], "go away"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        format!("Closing connection {}, reason: go away...\n", names[0])
    );
    assert_eq!(
        closed_with(&mut events).await,
        (Some(320), "CONNECTION_FORCED - go away".to_owned())
    );
    let r = ctl(&server, &["close_connection", &names[0], "again"]).await;
    assert_eq!(r.code, 69, "{}", r.err);
    assert!(
        r.err
            .contains(&format!("Connection '{}' not found", names[0])),
        "{}",
        r.err
    );
    let r = ctl(&server, &["close_connection", "only-a-name"]).await;
    assert_eq!(r.code, 64, "{}", r.err);
}

async fn connect_to(server: &TestServer, vhost: &str) -> Connection {
    let url = format!("amqp://guest:guest@{}/{vhost}", server.handle.local_addr());
    Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn s_ops_9_close_all_connections_of_a_vhost_or_every_vhost() {
    let server = crate::wharfctl::start().await;
    assert_eq!(ctl(&server, &["add_vhost", "other"]).await.code, 0);
    let r = ctl(
        &server,
        &["set_permissions", "-p", "other", "guest", ".*", ".*", ".*"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    let in_root = [server.connect().await, server.connect().await];
    let other = [
        connect_to(&server, "other").await,
        connect_to(&server, "other").await,
    ];
    let mut root_events: Vec<_> = in_root
        .iter()
        .map(|c| Box::pin(c.events_listener()))
        .collect();
    let mut other_events: Vec<_> = other
        .iter()
        .map(|c| Box::pin(c.events_listener()))
        .collect();
    let r = ctl(&server, &["close_all_connections", "maintenance"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Closing all connections in vhost /, reason: maintenance...\nClosed 2 connections\n"
    );
    for events in &mut root_events {
        assert_eq!(
            closed_with(events).await,
            (Some(320), "CONNECTION_FORCED - maintenance".to_owned())
        );
    }
    assert_eq!(connection_names(&server).await.len(), 2);
    let r = ctl(
        &server,
        &["close_all_connections", "--global", "--limit", "1", "bye"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Closing all connections to node wharf@localhost (across all vhosts), reason: bye...\n\
         Closed 1 connections\n"
    );
    assert_eq!(connection_names(&server).await.len(), 1);
    let r = ctl(
        &server,
        &["close_all_connections", "-p", "other", "-q", "bye"],
    )
    .await;
    assert_eq!(r.out, "Closed 1 connections\n");
    for events in &mut other_events {
        assert_eq!(
            closed_with(events).await,
            (Some(320), "CONNECTION_FORCED - bye".to_owned())
        );
    }
    assert!(connection_names(&server).await.is_empty());
    let r = ctl(&server, &["close_all_connections"]).await;
    assert_eq!(r.code, 64, "{}", r.err);
    let r = ctl(&server, &["close_all_connections", "--limit", "x", "bye"]).await;
    assert_eq!(r.code, 64, "{}", r.err);
}

#[tokio::test]
async fn s_ops_6_status_lists_the_prometheus_and_http_listeners() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.prometheus_bind = Some("127.0.0.1:0".to_owned());
    })
    .await;
    let r = ctl(&server, &["status"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    let prometheus = server.handle.prometheus_addr().unwrap().port();
    let mgmt = server.handle.mgmt_addr().unwrap().port();
    for line in [
        format!(
            "Interface: 127.0.0.1, port: {prometheus}, protocol: http/prometheus, \
             purpose: Prometheus exporter API over HTTP"
        ),
        format!("Interface: 127.0.0.1, port: {mgmt}, protocol: http, purpose: HTTP API"),
    ] {
        assert!(r.out.lines().any(|l| l == line), "{line} in\n{}", r.out);
    }
    let (status, _) = api(
        &server,
        "GET",
        &format!("/api/health/checks/port-listener/{prometheus}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn s_ops_6_status_lists_the_amqps_and_https_listeners() {
    let certs = tempfile::tempdir().unwrap();
    let (_, listener) = crate::mgmt_tls::certificate(certs.path());
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.tls = Some(listener.clone());
        c.mgmt_tls = Some(listener);
    })
    .await;
    let amqps = server.handle.tls_local_addr().unwrap().port();
    let https = server.handle.mgmt_tls_addr().unwrap().port();
    let r = ctl(&server, &["status"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    for line in [
        format!(
            "Interface: 127.0.0.1, port: {amqps}, protocol: amqp/ssl, \
             purpose: AMQP 0-9-1 over TLS"
        ),
        format!(
            "Interface: 127.0.0.1, port: {https}, protocol: https, \
             purpose: HTTP API over TLS (HTTPS)"
        ),
    ] {
        assert!(r.out.lines().any(|l| l == line), "{line} in\n{}", r.out);
    }
    // `/api/overview` lists them as RabbitMQ does, and the port-listener check counts them.
    let (status, o) = api(&server, "GET", "/api/overview", None).await;
    assert_eq!(status, 200);
    let listed: Vec<(String, u64)> = o["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["protocol"].as_str().unwrap().to_owned(),
                l["port"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        listed.contains(&("amqp/ssl".to_owned(), u64::from(amqps))),
        "{o}"
    );
    assert!(
        listed.contains(&("https".to_owned(), u64::from(https))),
        "{o}"
    );
    for port in [amqps, https] {
        let path = format!("/api/health/checks/port-listener/{port}");
        assert_eq!(api(&server, "GET", &path, None).await.0, 200, "{path}");
    }
}
