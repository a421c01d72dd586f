//! Users, vhost permissions and vhosts from the configuration file, as a client sees them:
//! a configured user logs in to its vhost, is refused 530 on another, a wrong password gets
//! 403; configured vhosts exist at start and survive a restart; and the real binary started
//! with `--config` serves the configured user. Only 127.0.0.1 is used (the non-loopback side
//! of `loopback_users` is unit-tested in `crates/server/src/config/tests.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use support::{TestServer, reply_code, reply_text};
use wharf_server::config::{FileConfig, Overrides, merge};

const FILE: &str = r#"
[[users]]
name = "app"
password = "s3cret"
vhosts = ["prod"]

[[users]]
name = "ops"
password = "pw"
vhosts = ["*"]

[[vhosts]]
name = "prod"

[[vhosts]]
name = "staging"
"#;

async fn configured() -> TestServer {
    let config = merge(FileConfig::parse(FILE).unwrap(), Overrides::default()).unwrap();
    let server = config.server_config().unwrap();
    TestServer::start_with(|c| {
        c.users.clone_from(&server.users);
        c.vhosts.clone_from(&server.vhosts);
    })
    .await
}

async fn connect(server: &TestServer, user: &str, vhost: &str) -> Result<Connection, lapin::Error> {
    let url = format!("amqp://{user}@{}/{vhost}", server.handle.local_addr());
    Connection::connect(&url, ConnectionProperties::default()).await
}

#[tokio::test]
async fn configured_user_opens_its_vhost_and_is_refused_530_on_another() {
    let server = configured().await;
    let conn = connect(&server, "app:s3cret", "prod").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "q".into(),
        lapin::options::QueueDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    let err = connect(&server, "app:s3cret", "staging").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - access to vhost 'staging' refused for user 'app'"
    );
    let err = connect(&server, "app:s3cret", "%2f").await.unwrap_err();
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - access to vhost '/' refused for user 'app'"
    );
}

#[tokio::test]
async fn star_opens_every_existing_vhost_and_unknown_ones_stay_530() {
    let server = configured().await;
    for vhost in ["prod", "staging", "%2f"] {
        connect(&server, "ops:pw", vhost).await.unwrap();
    }
    let err = connect(&server, "ops:pw", "nope").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert_eq!(reply_text(&err), "NOT_ALLOWED - vhost nope not found");
}

#[tokio::test]
async fn guest_keeps_its_default_vhost_beside_configured_users() {
    let server = configured().await;
    connect(&server, "guest:guest", "%2f").await.unwrap();
    let err = connect(&server, "guest:guest", "prod").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
}

#[tokio::test]
async fn wrong_password_of_a_configured_user_is_403() {
    let server = configured().await;
    let err = connect(&server, "app:wrong", "prod").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details \
         see the broker logfile."
    );
}

#[tokio::test]
async fn configured_vhosts_survive_a_restart_without_the_config() {
    let server = configured().await;
    // `restart` starts with the default config: the vhost comes back from the log.
    let server = server.restart().await;
    let err = connect(&server, "guest:guest", "prod").await.unwrap_err();
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - access to vhost 'prod' refused for user 'guest'",
        "guest may not open it, but it must not be 'not found'"
    );
}

/// The binary, started with `--config`, serves the configured user; SIGTERM to the pid we
/// spawned stops it cleanly (exit status 0).
#[cfg(unix)]
#[tokio::test]
async fn the_binary_reads_its_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let file = dir.path().join("wharf.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &file,
        format!(
            "port = 1\ndata_dir = {data:?}\nlog = \"warn\"\n\
             [[users]]\nname = \"app\"\npassword = \"s3cret\"\nvhosts = [\"prod\"]\n\
             [[vhosts]]\nname = \"prod\"\n"
        ),
    )
    .unwrap();
    // `--port` beats the file's port 1.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wharf"))
        .arg("--config")
        .arg(&file)
        .arg("--port")
        .arg(port.to_string())
        // The management API would take 15672 by default; any free port will do here.
        .arg("--mgmt-port")
        .arg("0")
        .args(["--prometheus-port", "0"])
        .env_remove("WHARF_MGMT_PORT")
        .env_remove("WHARF_BIND")
        .env_remove("WHARF_PORT")
        .env_remove("WHARF_DATA_DIR")
        .env_remove("WHARF_LOG")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("amqp://app:s3cret@127.0.0.1:{port}/prod");
    let mut conn = None;
    // Wait for the listener: bounded retries of a real connect (the process has to start).
    for _ in 0..200 {
        if let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await {
            conn = Some(c);
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("wharf exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let conn = conn.expect("wharf never accepted the configured user");
    assert!(conn.status().connected());
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit}");
}

/// A bad file stops the binary before it listens, naming the key.
#[test]
fn the_binary_refuses_an_unknown_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wharf.toml");
    std::fs::write(&file, "prot = 5672\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wharf"))
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prot"), "{err}");
}

/// Checkpoint files (`{lsn}.checkpoint`) anywhere under `dir`.
fn checkpoints(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "checkpoint") {
                found.push(path);
            }
        }
    }
    found
}

/// `checkpoint_log_bytes_min` reaches the running server: with the floor at 1 MiB, 2 MiB of
/// confirmed persistent messages make the server take a checkpoint while it runs (with the
/// default 64 MiB floor it would not before that much log).
#[tokio::test]
async fn checkpoint_log_bytes_min_from_the_file_sets_when_the_server_checkpoints() {
    let config = merge(
        FileConfig::parse("checkpoint_log_bytes_min = \"1MiB\"\n").unwrap(),
        Overrides::default(),
    )
    .unwrap();
    let floor = config.server_config().unwrap().checkpoint_log_bytes_min;
    assert_eq!(floor, 1 << 20);
    let server = TestServer::start_with(|c| c.checkpoint_log_bytes_min = floor).await;
    let before = checkpoints(server.dir.path());
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.queue_declare(
        "big".into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    let body = vec![7u8; 64 * 1024];
    for _ in 0..32 {
        ch.basic_publish(
            "".into(),
            "big".into(),
            lapin::options::BasicPublishOptions::default(),
            &body,
            lapin::BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    // The checkpoint is written on a thread of its own: wait for its file (bounded).
    support::within(20, async {
        while checkpoints(server.dir.path()).len() <= before.len() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
