//! rabbitmqctl's habits in `wharfctl` (S-OPS-6): `help`, `help COMMAND` and `COMMAND --help`,
//! unknown commands, `ping` and `await_startup` against a broker and against nothing,
//! `status` with memory, disk, alarms and listeners, `report`, `list_parameters`, and the
//! missing user named with rabbitmqctl's exit code. The real binary against an in-process
//! server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::TestServer;
use crate::wharfctl::{ctl, run, start};

/// A URL where nothing listens (a port bound, then released).
fn nowhere() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", probe.local_addr().unwrap())
}

#[tokio::test]
async fn s_ops_6_help_lists_the_commands_and_each_commands_usage() {
    let server = start().await;
    let r = ctl(&server, &["help"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    for name in [
        "list_queues",
        "ping",
        "await_startup",
        "status",
        "report",
        "set_policy",
    ] {
        assert!(
            r.out.contains(&format!("   {name} ")),
            "{name} in\n{}",
            r.out
        );
    }
    for args in [
        &["help", "list_queues"][..],
        &["list_queues", "--help"],
        &["-h", "list_queues"],
    ] {
        let r = ctl(&server, args).await;
        assert_eq!(r.code, 0, "{args:?}: {}", r.err);
        assert!(
            r.out.contains("list_queues [-p VHOST] [COLUMN ...]"),
            "{}",
            r.out
        );
        assert!(
            r.out.contains("Lists queues and their properties."),
            "{}",
            r.out
        );
    }
    for args in [&["help", "nosuch"][..], &["nosuch"]] {
        let r = ctl(&server, args).await;
        assert_eq!(r.code, 64, "{args:?}");
        assert!(r.err.contains("Command 'nosuch' not found."), "{}", r.err);
    }
}

#[tokio::test]
async fn s_ops_6_ping_and_await_startup_answer_0_or_69() {
    let server = start().await;
    let r = ctl(&server, &["ping"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("Ping succeeded"), "{}", r.out);
    let r = ctl(&server, &["await_startup", "--timeout", "5"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    let down = nowhere();
    let r = run(
        vec!["ping".into(), "--url".into(), down.clone()],
        None,
        String::new(),
    )
    .await;
    assert_eq!(r.code, 69, "{}", r.err);
    let args = ["await_startup", "--timeout", "1", "--url", &down].map(str::to_owned);
    let r = run(args.to_vec(), None, String::new()).await;
    assert_eq!(r.code, 69, "{}", r.err);
    assert!(
        r.err.contains("did not start within 1 seconds"),
        "{}",
        r.err
    );
}

/// A probe with little free disk: the disk alarm goes on at the first check.
#[derive(Debug)]
struct LowDisk;

impl wharf_server::ResourceProbe for LowDisk {
    fn disk_free_bytes(&self) -> std::io::Result<u64> {
        Ok(12_345_678)
    }
    fn memory_used_bytes(&self) -> std::io::Result<u64> {
        Ok(98_765_432)
    }
}

#[tokio::test]
async fn s_ops_6_status_shows_memory_disk_alarms_and_listeners() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.resource_probe = Some(std::sync::Arc::new(LowDisk));
        c.memory_high_watermark = wharf_server::MemoryLimit::Bytes(2_000_000_000);
    })
    .await;
    server.handle.check_resources().await;
    let r = ctl(&server, &["status"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    let amqp_port = server.handle.local_addr().port();
    for line in [
        "Status of node wharf@localhost ...",
        "Node name: wharf@localhost",
        "Free disk space alarm on node wharf@localhost",
        "Total memory used: 0.0988 gb",
        "Memory high watermark setting: computed to: 2.0000 gb",
        "Low free disk space watermark: 0.0500 gb",
        "Free disk space: 0.0123 gb",
        "Queue count: 0",
        "Virtual host count: 1",
        &format!("Interface: 127.0.0.1, port: {amqp_port}, protocol: amqp, purpose: AMQP 0-9-1"),
    ] {
        assert!(
            r.out.lines().any(|l| l == line),
            "missing {line:?} in\n{}",
            r.out
        );
    }
    assert!(!r.out.contains("Memory alarm"), "{}", r.out);
}

#[tokio::test]
async fn s_ops_6_report_list_parameters_and_a_missing_user() {
    let server = start().await;
    let r = ctl(&server, &["report"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out.contains("Listing queues for vhost / ..."),
        "{}",
        r.out
    );
    assert!(r.out.contains("Listing connections ..."), "{}", r.out);
    let r = ctl(&server, &["list_parameters"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "Listing runtime parameters for vhost \"/\" ...\ncomponent\tname\tvalue\n"
    );
    let r = ctl(&server, &["set_user_tags", "ghost", "monitoring"]).await;
    assert_eq!(r.code, 67, "{}", r.err);
    assert!(r.err.contains("User \"ghost\" does not exist"), "{}", r.err);
}

#[tokio::test]
async fn s_ops_6_environment_shows_the_settings_without_users() {
    let server = start().await;
    let r = ctl(&server, &["environment"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out
            .starts_with("Application environment of node wharf@localhost ...\n"),
        "{}",
        r.out
    );
    let json = ctl(&server, &["environment", "--formatter", "json"]).await;
    let env: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(env["amqp_listener"], "127.0.0.1:0");
    assert_eq!(env["fsync"], "always");
    assert_eq!(env["disk_free_limit_bytes"], 50_000_000);
    assert!(!json.out.contains("password"), "{}", json.out);
}
