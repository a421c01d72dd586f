//! The fixture binary (`wharf --test-mode --test-clock`) as a test in another language sees
//! it: one JSON line on stdout once ready, clock commands on stdin answered by JSON lines,
//! expiry that reacts before the answer, a temporary data directory removed at a graceful
//! exit (SIGTERM, sent to the pid we spawned). Uses lapin as the "other language".
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use lapin::options::QueueDeclareOptions;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::Value;

struct Fixture {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    ready: Value,
}

impl Fixture {
    fn spawn(args: &[&str]) -> Fixture {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(args)
            .env("WHARF_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let ready = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Fixture {
            child,
            stdin,
            stdout,
            ready,
        }
    }

    fn command(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    }

    /// SIGTERM to the pid we spawned, then wait for a graceful exit.
    fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "graceful exit: {status:?}");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Only when a test failed before terminate(): never leave the child running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn test_mode_announces_itself_and_the_clock_drives_expiry() {
    let mut fx = Fixture::spawn(&["--test-mode", "--test-clock"]);
    let url = fx.ready["amqp_url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("amqp://guest:guest@127.0.0.1:"), "{url}");
    assert_eq!(fx.ready["pid"].as_u64(), Some(u64::from(fx.child.id())));
    assert_eq!(fx.ready["clock_control"], Value::Bool(true));
    let data_dir = PathBuf::from(fx.ready["data_dir"].as_str().unwrap());
    assert!(data_dir.is_dir(), "a temporary data directory");
    let start = fx.ready["now_ms"].as_u64().unwrap();
    assert_eq!(fx.command("now")["now_ms"].as_u64(), Some(start));

    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(1_800_000));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from("dead")),
    );
    ch.queue_declare(
        "dead".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare("orders".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    ch.basic_publish(
        "".into(),
        "orders".into(),
        BasicPublishOptions::default(),
        b"order",
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let get = || ch.basic_get("dead".into(), BasicGetOptions { no_ack: true });

    let answer = fx.command("advance 29m");
    assert_eq!(answer["now_ms"].as_u64(), Some(start + 29 * 60_000));
    assert!(get().await.unwrap().is_none());
    let answer = fx.command(&format!("set {}", start + 30 * 60_000));
    assert_eq!(answer["now_ms"].as_u64(), Some(start + 30 * 60_000));
    let dead = get()
        .await
        .unwrap()
        .expect("dead-lettered before the answer came");
    assert_eq!(dead.delivery.data, b"order");

    assert!(
        fx.command("set 5")["error"]
            .as_str()
            .unwrap()
            .contains("back")
    );
    assert!(fx.command("advance soon")["error"].is_string());
    assert!(fx.command("jump")["error"].is_string());
    conn.close(200, "done".into()).await.unwrap();
    fx.terminate();
    assert!(
        !data_dir.exists(),
        "the temporary data directory is removed at exit"
    );
}

#[test]
fn test_mode_without_test_clock_refuses_clock_commands_and_keeps_a_given_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut fx = Fixture::spawn(&["--test-mode", "--data-dir", dir.path().to_str().unwrap()]);
    assert_eq!(fx.ready["clock_control"], Value::Bool(false));
    assert_eq!(fx.ready["now_ms"], Value::Null);
    let answer = fx.command("advance 1s");
    assert!(
        answer["error"].as_str().unwrap().contains("--test-clock"),
        "{answer}"
    );
    fx.terminate();
    assert!(dir.path().is_dir(), "a given data directory is kept");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().count() > 0,
        "holding the log"
    );
}
