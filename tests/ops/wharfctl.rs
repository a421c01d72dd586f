//! The real `wharfctl` binary against an in-process server (AMQP and mgmt on 127.0.0.1:0):
//! every command, every policy-validation error with its exit code, output formats, and the
//! `rabbitmqctl` policy examples of the RabbitMQ docs run verbatim with the name changed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;
use crate::support::publish_persistent as publish;

use std::io::Write as _;
use std::process::{Command, Stdio};

use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable as LapinTable;
use lapin::{BasicProperties, Channel};
use serde_json::{Value, json};
use support::{TestServer, within};
use wharf_ctl::Client;

pub(crate) async fn start() -> TestServer {
    TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await
}

pub(crate) fn url(server: &TestServer) -> String {
    format!("http://{}", server.handle.mgmt_addr().unwrap())
}

pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) out: String,
    pub(crate) err: String,
}

/// Runs `wharfctl ARGS --url URL` (options after the positionals, as scripts often write
/// them), with `input` on stdin.
async fn ctl_in(server: &TestServer, args: &[&str], input: &str) -> Run {
    let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    all.push("--url".to_owned());
    all.push(url(server));
    run(all, None, input.to_owned()).await
}

pub(crate) async fn ctl(server: &TestServer, args: &[&str]) -> Run {
    ctl_in(server, args, "").await
}

pub(crate) async fn run(args: Vec<String>, env_url: Option<String>, input: String) -> Run {
    within(
        20,
        tokio::task::spawn_blocking(move || {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_wharfctl"));
            cmd.args(&args)
                .env_remove("WHARF_URL")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(u) = env_url {
                cmd.env("WHARF_URL", u);
            }
            let mut child = cmd.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            Run {
                code: out.status.code().unwrap_or(-1),
                out: String::from_utf8_lossy(&out.stdout).into_owned(),
                err: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }),
    )
    .await
    .unwrap()
}

async fn api_get(server: &TestServer, path: &str) -> Value {
    let client = Client::new(&url(server), "guest", "guest");
    let path = path.to_owned();
    let a = tokio::task::spawn_blocking(move || client.get(&path).unwrap())
        .await
        .unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        LapinTable::default(),
    )
    .await
    .unwrap();
}

/// Splits a POSIX shell command line into words (single quotes literal, double quotes with
/// backslash escapes), as the shell would hand them to the program.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The `rabbitmqctl set_policy` lines of RabbitMQ's documentation pages on TTL, queue expiry
/// and dead-letter exchanges (the sources of docs/SEMANTICS.md), copied verbatim. The Windows
/// variants of the same pages (`"{""message-ttl"":60000}"`) are `cmd.exe` quoting and mean
/// the same words, so the POSIX lines cover them.
fn seed_examples() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            r#"rabbitmqctl set_policy TTL ".*" '{"message-ttl":60000}' --apply-to queues"#,
            "TTL",
            json!({"message-ttl": 60000}),
        ),
        (
            r#"rabbitmqctl set_policy expiry ".*" '{"expires":1800000}' --apply-to queues"#,
            "expiry",
            json!({"expires": 1_800_000}),
        ),
        (
            r#"rabbitmqctl set_policy DLX ".*" '{"dead-letter-exchange":"my-dlx"}' --apply-to queues"#,
            "DLX",
            json!({"dead-letter-exchange": "my-dlx"}),
        ),
    ]
}

#[tokio::test]
async fn the_seed_documents_policy_examples_work_verbatim() {
    let server = start().await;
    for (line, name, definition) in seed_examples() {
        let mut words = shell_words(line);
        assert_eq!(words.remove(0), "rabbitmqctl");
        // Through WHARF_URL, so the words stay exactly the documented ones.
        let r = run(words, Some(url(&server)), String::new()).await;
        assert_eq!(r.code, 0, "{line}: {}{}", r.out, r.err);
        let p = api_get(&server, &format!("/api/policies/%2F/{name}")).await;
        assert_eq!(p["pattern"], ".*", "{line}");
        assert_eq!(p["apply-to"], "queues", "{line}");
        assert_eq!(p["definition"], definition, "{line}");
    }
    // And they apply: a queue gets the highest-priority match's settings (all priority 0:
    // the policies table picks one; each key is checked through its own policy above).
    let (_conn, ch) = server.channel().await;
    declare(&ch, "any").await;
    let q = api_get(&server, "/api/queues/%2F/any").await;
    assert!(q["policy"].is_string(), "{q}");
}

#[tokio::test]
async fn set_list_and_clear_policies_with_options_anywhere() {
    let server = start().await;
    ctl(&server, &["add_vhost", "prod"]).await;
    let r = ctl(
        &server,
        &[
            "-p",
            "prod",
            "set_policy",
            "--priority",
            "5",
            "lim",
            "^orders",
            r#"{"max-length":10}"#,
            "--apply-to=queues",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("Setting policy \"lim\""), "{}", r.out);
    let r = ctl(&server, &["list_policies", "-p", "prod", "-q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        r.out,
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n\
         prod\tlim\t^orders\tqueues\t{\"max-length\":10}\t5\n"
    );
    let r = ctl(
        &server,
        &["list_policies", "-p", "prod", "--formatter", "json"],
    )
    .await;
    let rows: Value = serde_json::from_str(r.out.lines().last().unwrap()).unwrap();
    assert_eq!(rows[0]["definition"], json!({"max-length": 10}));
    // The default vhost has none.
    let r = ctl(&server, &["list_policies", "-q"]).await;
    assert_eq!(
        r.out,
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
    );
    let r = ctl(&server, &["clear_policy", "lim", "-p", "prod"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(api_get(&server, "/api/policies").await, json!([]));
    let r = ctl(&server, &["clear_policy", "lim", "-p", "prod"]).await;
    // S-OPS-6: rabbitmqctl's code for a missing policy, and the policy named.
    assert_eq!(r.code, 69, "clearing an unknown policy: {}", r.err);
    assert!(
        r.err
            .contains("Policy 'lim' in vhost 'prod' does not exist"),
        "{}",
        r.err
    );
}

#[tokio::test]
async fn every_policy_validation_error_is_refused_with_its_reason_and_exit_65() {
    let server = start().await;
    let cases: &[(&[&str], &str)] = &[
        (
            &["set_policy", "p", ".*", r#"{"message-tll":1}"#],
            "message-tll",
        ),
        (
            &["set_policy", "p", ".*", r#"{"message-ttl":"60s"}"#],
            "'message-ttl' must be a non-negative integer",
        ),
        (
            &["set_policy", "p", ".*", r#"{"max-length":-1}"#],
            "'max-length' must be a non-negative integer",
        ),
        (
            &["set_policy", "p", ".*", r#"{"expires":0}"#],
            "'expires' must be between 1",
        ),
        (
            &["set_policy", "p", "(", r#"{"message-ttl":1}"#],
            "invalid regular expression '('",
        ),
        (
            &[
                "set_policy",
                "p",
                ".*",
                r#"{"message-ttl":1}"#,
                "--apply-to",
                "topics",
            ],
            "'apply-to' must be one of queues, exchanges, all, got 'topics'",
        ),
        (&["set_policy", "p", ".*", "{message-ttl:1}"], "not JSON"),
        (&["set_policy", "p", ".*", "{}"], "the definition is empty"),
        (
            &[
                "set_operator_policy",
                "p",
                ".*",
                r#"{"dead-letter-exchange":"x"}"#,
            ],
            "not allowed in an operator policy",
        ),
        (
            &["set_policy", "p", ".*", r#"{"overflow":"explode"}"#],
            "'overflow' has an unknown value 'explode'",
        ),
    ];
    for (args, needle) in cases {
        let r = ctl(&server, args).await;
        assert_eq!(r.code, 65, "{args:?}: {}{}", r.out, r.err);
        assert!(r.err.starts_with("Error:\n"), "{args:?}: {}", r.err);
        assert!(
            r.err.contains(needle),
            "{args:?} should name {needle:?}: {}",
            r.err
        );
    }
    let r = ctl(
        &server,
        &[
            "set_policy",
            "p",
            ".*",
            r#"{"message-ttl":1}"#,
            "--priority",
            "x",
        ],
    )
    .await;
    assert_eq!(r.code, 65, "{}", r.err);
    assert_eq!(api_get(&server, "/api/policies").await, json!([]));
    assert_eq!(api_get(&server, "/api/operator-policies").await, json!([]));
}

#[tokio::test]
async fn operator_policies_have_their_own_commands() {
    let server = start().await;
    let r = ctl(
        &server,
        &[
            "set_operator_policy",
            "cap",
            ".*",
            r#"{"max-length":100}"#,
            "--apply-to",
            "queues",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    let r = ctl(&server, &["list_operator_policies", "-q"]).await;
    assert_eq!(
        r.out,
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n\
         /\tcap\t.*\tqueues\t{\"max-length\":100}\t0\n"
    );
    assert_eq!(
        ctl(&server, &["list_policies", "-q", "--no-table-headers"])
            .await
            .out,
        ""
    );
    let r = ctl(&server, &["clear_operator_policy", "cap"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(api_get(&server, "/api/operator-policies").await, json!([]));
}

#[tokio::test]
async fn list_queues_with_columns_and_formats() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "a").await;
    declare(&ch, "b").await;
    publish(&ch, "a", b"1").await;
    publish(&ch, "a", b"2").await;
    ctl(
        &server,
        &["set_policy", "ttl", "^a$", r#"{"message-ttl":5000}"#],
    )
    .await;
    let r = ctl(&server, &["list_queues", "-q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.out, "name\tmessages\na\t2\nb\t0\n");
    let r = ctl(
        &server,
        &[
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "durable",
            "policy",
            "effective_message_ttl",
            "arguments",
            "--quiet",
        ],
    )
    .await;
    assert_eq!(
        r.out,
        "name\tmessages_ready\tmessages_unacknowledged\tconsumers\tdurable\tpolicy\teffective_message_ttl\targuments\n\
         a\t2\t0\t0\ttrue\tttl\t5000\t{}\n\
         b\t0\t0\t0\ttrue\t\t\t{}\n"
    );
    let r = ctl(
        &server,
        &[
            "list_queues",
            "name",
            "messages",
            "--formatter",
            "json",
            "-q",
        ],
    )
    .await;
    let rows: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(
        rows,
        json!([{"name": "a", "messages": 2}, {"name": "b", "messages": 0}])
    );
    // Without -q the informational line comes first, as with rabbitmqctl.
    let r = ctl(&server, &["list_queues"]).await;
    assert!(
        r.out.contains("Listing queues for vhost / ..."),
        "{}",
        r.out
    );
    let r = ctl(&server, &["list_queues", "name", "colour"]).await;
    assert_eq!(r.code, 64, "{}", r.err);
    assert!(r.err.contains("colour"), "{}", r.err);
}

#[tokio::test]
async fn list_exchanges_bindings_connections_channels_consumers() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "jobs").await;
    // Kept alive: dropping lapin's consumer cancels it.
    let _consumer = ch
        .basic_consume(
            "jobs".into(),
            "w1".into(),
            BasicConsumeOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    let r = ctl(&server, &["list_exchanges", "-q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.starts_with("name\ttype\n"), "{}", r.out);
    assert!(r.out.contains("amq.topic\ttopic\n"), "{}", r.out);
    assert!(
        r.out.contains("\tdirect\n"),
        "the default exchange: {}",
        r.out
    );

    let r = ctl(&server, &["list_bindings", "-q"]).await;
    assert_eq!(
        r.out,
        "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments\n\
         \texchange\tjobs\tqueue\tjobs\t{}\n"
    );
    let r = ctl(&server, &["list_connections", "-q"]).await;
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(lines[0], "user\tpeer_host\tpeer_port\tstate");
    assert!(lines[1].starts_with("guest\t127.0.0.1\t"), "{}", r.out);
    assert!(lines[1].ends_with("\trunning"), "{}", r.out);
    let r = ctl(&server, &["list_channels", "user", "consumer_count", "-q"]).await;
    assert_eq!(r.out, "user\tconsumer_count\nguest\t1\n");
    let r = ctl(
        &server,
        &[
            "list_consumers",
            "queue_name",
            "consumer_tag",
            "ack_required",
            "-q",
        ],
    )
    .await;
    assert_eq!(
        r.out,
        "queue_name\tconsumer_tag\tack_required\njobs\tw1\ttrue\n"
    );
}

#[tokio::test]
async fn purge_delete_and_vhost_commands() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "q").await;
    publish(&ch, "q", b"x").await;
    let r = ctl(&server, &["delete_queue", "q", "--if-empty"]).await;
    assert_eq!(r.code, 65, "{}", r.err);
    let r = ctl(&server, &["purge_queue", "q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(api_get(&server, "/api/queues/%2F/q").await["messages"], 0);
    let r = ctl(&server, &["delete_queue", "q", "--if-empty"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out
            .contains("Queue was successfully deleted with 0 messages"),
        "{}",
        r.out
    );
    let r = ctl(&server, &["delete_queue", "q"]).await;
    assert_eq!(r.code, 69, "{}", r.err);
    assert!(
        r.err.contains("Queue 'q' in vhost '/' not found"),
        "{}",
        r.err
    );
    let r = ctl(&server, &["purge_queue", "nope"]).await;
    assert_eq!(r.code, 69, "{}", r.err);
    assert!(
        r.err.contains("Queue 'nope' in vhost '/' not found"),
        "{}",
        r.err
    );

    assert_eq!(ctl(&server, &["add_vhost", "staging"]).await.code, 0);
    let r = ctl(&server, &["list_vhosts", "-q"]).await;
    assert_eq!(r.out, "name\n/\nstaging\n");
    assert_eq!(ctl(&server, &["delete_vhost", "staging"]).await.code, 0);
    let r = ctl(&server, &["delete_vhost", "staging"]).await;
    assert_eq!(r.code, 65);
    assert!(
        r.err.contains("Virtual host 'staging' does not exist"),
        "{}",
        r.err
    );
    assert_eq!(ctl(&server, &["list_vhosts", "-q"]).await.out, "name\n/\n");
}

#[tokio::test]
async fn status_and_definitions_export_import() {
    let server = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "keep").await;
    publish(&ch, "keep", b"x").await;
    ctl(
        &server,
        &["set_policy", "TTL", ".*", r#"{"message-ttl":60000}"#],
    )
    .await;
    let r = ctl(&server, &["status", "-q"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("Queue count: 1\n"), "{}", r.out);
    assert!(r.out.contains("Connection count: 1\n"), "{}", r.out);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("defs.json");
    let r = ctl(&server, &["export_definitions", file.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(exported["queues"][0]["name"], "keep");
    let r = ctl(&server, &["export_definitions", "-"]).await;
    let stdout: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(stdout["policies"], exported["policies"]);

    let other = start().await;
    let r = ctl(&other, &["import_definitions", file.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        !r.err.contains("Warning"),
        "users and permissions are applied: {}",
        r.err
    );
    assert_eq!(
        api_get(&other, "/api/queues/%2F/keep").await["durable"],
        true
    );
    assert_eq!(
        api_get(&other, "/api/policies/%2F/TTL").await["definition"],
        json!({"message-ttl": 60000})
    );

    let third = start().await;
    let text = std::fs::read_to_string(&file).unwrap();
    let r = ctl_in(&third, &["import_definitions", "-"], &text).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        api_get(&third, "/api/queues/%2F/keep").await["name"],
        "keep"
    );
    let r = ctl_in(&third, &["import_definitions", "-"], "{not json").await;
    assert_eq!(r.code, 65, "{}", r.err);
}

#[tokio::test]
async fn usage_unreachable_and_credential_errors_have_rabbitmqctl_exit_codes() {
    let server = start().await;
    for args in [
        &[][..],
        &["frobnicate"][..],
        &["set_policy", "only-a-name"][..],
        &["clear_policy", "a", "b"][..],
        &["list_queues", "--formatter", "yaml"][..],
        &["list_queues", "--bogus"][..],
    ] {
        let r = ctl(&server, args).await;
        assert_eq!(r.code, 64, "{args:?}: {}", r.err);
        assert!(r.err.contains("Usage: wharfctl"), "{args:?}: {}", r.err);
    }
    // A port nothing listens on: bind one, note it, close it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = run(
        vec![
            "list_queues".into(),
            "--url".into(),
            format!("http://{closed}"),
        ],
        None,
        String::new(),
    )
    .await;
    assert_eq!(r.code, 69, "{}", r.err);
    let r = ctl(
        &server,
        &["list_queues", "--username", "guest", "--password", "wrong"],
    )
    .await;
    assert_eq!(r.code, 77, "{}", r.err);
    // WHARF_URL is used when --url is absent.
    let r = run(
        vec!["list_vhosts".into(), "-q".into()],
        Some(url(&server)),
        String::new(),
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.out, "name\n/\n");
}

/// The `wharf` binary serves the API on `--mgmt-port`, on the `--bind` address; SIGTERM to the
/// pid we spawned stops it.
#[cfg(unix)]
#[tokio::test]
async fn the_binary_serves_the_api_on_its_mgmt_port() {
    let dir = tempfile::tempdir().unwrap();
    let free_port = || {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let (amqp, mgmt) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["--bind", "127.0.0.1", "--log", "warn"])
        .args([
            "--port",
            &amqp.to_string(),
            "--mgmt-port",
            &mgmt.to_string(),
            "--prometheus-port",
            "0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("WHARF_CONFIG")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{mgmt}");
    let mut ok = None;
    // Bounded retries of a real request while the process starts.
    for _ in 0..200 {
        let r = run(
            vec!["status".into(), "-q".into(), "--url".into(), url.clone()],
            None,
            String::new(),
        )
        .await;
        if r.code == 0 {
            ok = Some(r);
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("wharf exited early: {status}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = ok.expect("the management API never answered");
    assert!(r.out.contains("Product name: wharf"), "{}", r.out);
    let status = Command::new("kill")
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

/// Users and permissions through wharfctl, seen by AMQP logins: a user added with
/// `add_user` and `set_permissions` can connect; without configure it cannot declare (403);
/// `change_password` and `delete_user` take effect for the next login.
#[tokio::test]
async fn user_and_permission_commands_change_who_may_do_what() {
    let server = start().await;
    assert_eq!(ctl(&server, &["add_user", "app", "s3cret"]).await.code, 0);
    let r = ctl(&server, &["add_user", "app", "again"]).await;
    assert_eq!(
        r.code, 70,
        "rabbitmqctl's code for an existing user: {}",
        r.err
    );
    assert!(r.err.contains("User \"app\" already exists"), "{}", r.err);
    let r = ctl(&server, &["list_users", "-q"]).await;
    assert!(r.out.contains("app\t[]"), "{}", r.out);
    let r = ctl(
        &server,
        &["set_permissions", "app", "^app-.*", ".*", ".*", "-p", "/"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    let r = ctl(&server, &["list_permissions", "-q"]).await;
    assert!(r.out.contains("app\t^app-.*\t.*\t.*"), "{}", r.out);

    let addr = server.handle.local_addr();
    let url = |pw: &str| format!("amqp://app:{pw}@{addr}/%2f");
    let conn = lapin::Connection::connect(&url("s3cret"), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "app-q".into(),
        lapin::options::QueueDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    let err = ch
        .queue_declare(
            "other".into(),
            lapin::options::QueueDeclareOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(support::reply_code(&err), Some(403), "{err:?}");

    assert_eq!(
        ctl(&server, &["change_password", "app", "n3w"]).await.code,
        0
    );
    assert!(
        lapin::Connection::connect(&url("s3cret"), lapin::ConnectionProperties::default())
            .await
            .is_err()
    );
    lapin::Connection::connect(&url("n3w"), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    assert_eq!(ctl(&server, &["delete_user", "app"]).await.code, 0);
    let r = ctl(&server, &["delete_user", "app"]).await;
    assert_eq!(r.code, 67, "rabbitmqctl's EX_NOUSER: {}", r.err);
    assert!(r.err.contains("User \"app\" does not exist"), "{}", r.err);
    assert!(
        lapin::Connection::connect(&url("n3w"), lapin::ConnectionProperties::default())
            .await
            .is_err()
    );
}

/// `wharfctl clock` drives a broker started with clock control: a message with a 30-minute
/// TTL is gone once `clock advance 30m` answers (S-TTL-2), with no real waiting; a broker
/// without clock control refuses (exit 65).
#[tokio::test]
async fn clock_commands_move_a_test_clock_and_the_broker_acts_at_once() {
    let refused = start().await;
    let r = ctl(&refused, &["clock", "show"]).await;
    assert_eq!(r.code, 65, "{} {}", r.out, r.err);
    assert!(r.err.contains("--test-clock"), "{}", r.err);

    let clock = wharf_clock::ManualClock::new(support::T0_MS);
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.clock_control = Some(clock.clone());
    })
    .await;
    let r = ctl(&server, &["clock", "show"]).await;
    assert_eq!(r.out.trim(), support::T0_MS.to_string(), "{}", r.err);
    let (_conn, ch) = server.channel().await;
    declare(&ch, "q").await;
    ch.basic_publish(
        "".into(),
        "q".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default().with_expiration("1800000".into()),
    )
    .await
    .unwrap();
    let count = |ch: Channel| async move {
        ch.queue_declare(
            "q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            LapinTable::default(),
        )
        .await
        .unwrap()
        .message_count()
    };
    assert_eq!(count(ch.clone()).await, 1);
    let r = ctl(&server, &["clock", "advance", "29m"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(count(ch.clone()).await, 1, "not due before 30 minutes");
    let r = ctl(&server, &["clock", "advance", "1m"]).await;
    assert_eq!(r.out.trim(), (support::T0_MS + 1_800_000).to_string());
    assert_eq!(count(ch.clone()).await, 0, "expired when the clock said so");
    assert_eq!(ctl(&server, &["clock", "set", "5"]).await.code, 65);
}

/// S-TPERM-1: `set_topic_permissions`, `list_topic_permissions` and
/// `clear_topic_permissions` as rabbitmqctl spells them (its progress lines and columns).
#[tokio::test]
async fn s_tperm_1_topic_permission_commands() {
    let server = start().await;
    assert_eq!(ctl(&server, &["add_user", "app", "pw"]).await.code, 0);
    let r = ctl(
        &server,
        &["set_topic_permissions", "app", "events", "^orders\\.", ".*"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out.contains(
            "Setting topic permissions on \"events\" for user \"app\" in vhost \"/\" ..."
        ),
        "{}",
        r.out
    );
    let r = ctl(&server, &["list_topic_permissions", "-q"]).await;
    assert!(r.out.contains("app\tevents\t^orders\\.\t.*"), "{}", r.out);
    let r = ctl(&server, &["clear_topic_permissions", "app", "events"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    let r = ctl(&server, &["list_topic_permissions", "-q"]).await;
    assert!(!r.out.contains("events"), "{}", r.out);
    let r = ctl(&server, &["set_topic_permissions", "app", "events"]).await;
    assert_eq!(r.code, 64, "{}", r.err);
}
