//! rabbitmqadmin v2 (the Rust `rabbitmqadmin` crate, a real client of RabbitMQ's HTTP API)
//! against an in-process wharf whose management listener is on 127.0.0.1:0: `declare queue`,
//! `list queues`, `publish message`, `get messages`, `definitions export`, `show overview`,
//! `declare binding` and `delete binding` work unchanged (S-MGMT-4). The binary is found through `$RABBITMQADMIN`, then
//! `$CARGO_HOME/bin` (or `~/.cargo/bin`), then `PATH`, and must say version 2 (Debian's
//! `rabbitmq-server` ships the old Python v1 as `/usr/bin/rabbitmqadmin`); without it the
//! test says SKIPPED and passes. `.ci/run` installs it (`cargo install rabbitmqadmin --locked`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::PathBuf;
use std::process::Command;

use crate::support::{TestServer, within};
use serde_json::Value;

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("RABBITMQADMIN") {
        out.push(PathBuf::from(p));
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = cargo_home {
        out.push(home.join("bin").join("rabbitmqadmin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join("rabbitmqadmin")));
    }
    out
}

/// The first rabbitmqadmin that says it is version 2.
fn rabbitmqadmin_v2() -> Option<PathBuf> {
    candidates().into_iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).starts_with("rabbitmqadmin 2."))
    })
}

/// Runs one rabbitmqadmin command against `port` off the async runtime; its stdout, after
/// checking that it succeeded.
async fn run(bin: &PathBuf, port: u16, args: &[&str]) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(["--non-interactive", "-H", "127.0.0.1", "-P"])
        .arg(port.to_string())
        .args(["-u", "guest", "-p", "guest"])
        .args(args);
    let shown = format!("rabbitmqadmin {}", args.join(" "));
    let out = within(60, tokio::task::spawn_blocking(move || cmd.output()))
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{shown}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn s_mgmt_4_rabbitmqadmin_v2_works_against_wharf() {
    let Some(bin) = rabbitmqadmin_v2() else {
        eprintln!(
            "SKIPPED s_mgmt_4_rabbitmqadmin_v2_works_against_wharf: no rabbitmqadmin 2.x found \
             ($RABBITMQADMIN, ~/.cargo/bin, PATH); install it with `cargo install rabbitmqadmin --locked`"
        );
        return;
    };
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let port = server.handle.mgmt_addr().unwrap().port();
    run(
        &bin,
        port,
        &["declare", "queue", "--name", "jobs", "--durable", "true"],
    )
    .await;
    let listed = run(&bin, port, &["list", "queues"]).await;
    assert!(listed.contains("jobs"), "{listed}");
    let published = run(
        &bin,
        port,
        &[
            "publish",
            "message",
            "--routing-key",
            "jobs",
            "--payload",
            "hello wharf",
        ],
    )
    .await;
    assert!(published.contains("routed"), "{published}");
    let got = run(
        &bin,
        port,
        &["get", "messages", "--queue", "jobs", "--count", "1"],
    )
    .await;
    assert!(got.contains("hello wharf"), "{got}");
    let (_conn, ch) = server.channel().await;
    let left = crate::support::ready_count(&ch, "jobs").await;
    assert_eq!(
        left, 0,
        "get messages takes the message (ack_requeue_false)"
    );
    let exported = run(&bin, port, &["definitions", "export", "--stdout"]).await;
    let defs: Value = serde_json::from_str(exported.trim()).unwrap();
    assert!(
        defs["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["name"] == "jobs"),
        "{exported}"
    );
    // `delete binding` finds the binding through `/api/queues/{vhost}/{name}/bindings`.
    run(
        &bin,
        port,
        &["declare", "exchange", "--name", "events", "--type", "topic"],
    )
    .await;
    let binding = [
        "--source",
        "events",
        "--destination-type",
        "queue",
        "--destination",
        "jobs",
        "--routing-key",
        "a.b",
    ];
    run(
        &bin,
        port,
        &[&["declare", "binding"][..], &binding].concat(),
    )
    .await;
    assert!(run(&bin, port, &["list", "bindings"]).await.contains("a.b"));
    run(&bin, port, &[&["delete", "binding"][..], &binding].concat()).await;
    assert!(!run(&bin, port, &["list", "bindings"]).await.contains("a.b"));
    let overview = run(&bin, port, &["show", "overview"]).await;
    assert!(overview.contains("wharf"), "{overview}");
}
