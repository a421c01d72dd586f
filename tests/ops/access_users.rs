//! Users and permissions as RabbitMQ has them, seen by a client (lapin) of an in-process
//! server: users are durable definitions (they survive a restart; the log holds a salted
//! hash, never the password), a hash exported by RabbitMQ logs in, a deleted user (even
//! `guest`) stays deleted, and the configure/write/read regexes refuse declares, publishes,
//! consumes and gets with 403 `ACCESS_REFUSED` and RabbitMQ's text, also when they change
//! under a live connection. Only 127.0.0.1 is used.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use support::{TestServer, reply_code, reply_text, within};
use wharf_broker::Command;
use wharf_server::hash_password;

/// `guest` / `guest` as RabbitMQ 3.13.2 exports it (`rabbit_password_hashing_sha256`).
const RABBITMQ_GUEST_HASH: &str = "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN";

async fn put_user(server: &TestServer, name: &str, password_hash: String) {
    server
        .handle
        .admin(Command::UserPut {
            name: name.into(),
            password_hash,
            tags: vec!["management".into()],
        })
        .await
        .unwrap();
}

async fn set_permissions(
    server: &TestServer,
    user: &str,
    configure: &str,
    write: &str,
    read: &str,
) {
    server
        .handle
        .admin(Command::PermissionSet {
            user: user.into(),
            vhost: "/".into(),
            configure: configure.into(),
            write: write.into(),
            read: read.into(),
        })
        .await
        .unwrap();
}

/// A user `name` / `pw` with the given permissions on `/`.
async fn user(server: &TestServer, name: &str, configure: &str, write: &str, read: &str) {
    put_user(server, name, hash_password("pw").unwrap()).await;
    set_permissions(server, name, configure, write, read).await;
}

async fn connect(server: &TestServer, credentials: &str) -> Result<Connection, lapin::Error> {
    let url = format!("amqp://{credentials}@{}/%2f", server.handle.local_addr());
    Connection::connect(&url, ConnectionProperties::default()).await
}

async fn declare(ch: &Channel, queue: &str, args: FieldTable) -> Result<(), lapin::Error> {
    ch.queue_declare(queue.into(), QueueDeclareOptions::default(), args)
        .await
        .map(|_| ())
}

fn assert_refused(err: &lapin::Error, text: &str) {
    assert_eq!(reply_code(err), Some(403), "{err:?}");
    assert_eq!(reply_text(err), format!("ACCESS_REFUSED - {text}"));
}

/// The bytes of every segment file in the data directory.
fn log_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wal") {
            all.extend(std::fs::read(path).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn users_persist_across_a_restart_and_the_log_holds_only_a_salted_hash() {
    let server = TestServer::start().await;
    let hash = hash_password("Wonderland-42").unwrap();
    put_user(&server, "alice", hash.clone()).await;
    set_permissions(&server, "alice", ".*", ".*", ".*").await;
    connect(&server, "alice:Wonderland-42").await.unwrap();

    let server = server.restart().await;
    let conn = connect(&server, "alice:Wonderland-42").await.unwrap();
    declare(
        &conn.create_channel().await.unwrap(),
        "q",
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = connect(&server, "alice:wonderland-42").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");

    let log = log_bytes(server.dir.path());
    assert!(contains(&log, b"alice"), "the user is in the log");
    assert!(contains(&log, hash.as_bytes()), "its hash is in the log");
    assert!(!contains(&log, b"Wonderland-42"), "its password is not");
    assert!(!contains(&log, b"guest\0guest"));
}

#[tokio::test]
async fn a_rabbitmq_exported_sha256_hash_logs_in() {
    let server = TestServer::start().await;
    put_user(&server, "imported", RABBITMQ_GUEST_HASH.to_owned()).await;
    set_permissions(&server, "imported", ".*", ".*", ".*").await;
    connect(&server, "imported:guest").await.unwrap();
    let err = connect(&server, "imported:Guest").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
}

#[tokio::test]
async fn a_deleted_user_can_no_longer_log_in_and_guest_is_not_recreated() {
    let server = TestServer::start().await;
    user(&server, "bob", ".*", ".*", ".*").await;
    connect(&server, "bob:pw").await.unwrap();
    server
        .handle
        .admin(Command::UserDelete { name: "bob".into() })
        .await
        .unwrap();
    let err = connect(&server, "bob:pw").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
    assert!(
        reply_text(&err).starts_with("ACCESS_REFUSED - Login was refused"),
        "{err:?}"
    );

    // The default user exists on a fresh data dir; once deleted it stays deleted.
    connect(&server, "guest:guest").await.unwrap();
    server
        .handle
        .admin(Command::UserDelete {
            name: "guest".into(),
        })
        .await
        .unwrap();
    let server = server.restart().await;
    let err = connect(&server, "guest:guest").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
}

#[tokio::test]
async fn no_permission_on_the_vhost_is_530() {
    let server = TestServer::start().await;
    put_user(&server, "nobody", hash_password("pw").unwrap()).await;
    let err = connect(&server, "nobody:pw").await.unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - access to vhost '/' refused for user 'nobody'"
    );
}

#[tokio::test]
async fn without_configure_queue_declare_is_refused_403() {
    let server = TestServer::start().await;
    user(&server, "app", "^app\\.", ".*", ".*").await;
    let conn = connect(&server, "app:pw").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "app.jobs", FieldTable::default())
        .await
        .unwrap();
    let err = declare(&ch, "jobs", FieldTable::default())
        .await
        .unwrap_err();
    assert_refused(
        &err,
        "configure access to queue 'jobs' in vhost '/' refused for user 'app'",
    );
    // A passive declare needs no permission.
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "app.jobs".into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn without_write_on_an_exchange_publish_is_refused_and_the_connection_survives() {
    let server = TestServer::start().await;
    user(&server, "pub", ".*", "^amq\\.default$", ".*").await;
    let conn = connect(&server, "pub:pw").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "amq.topic".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await;
    let err = match confirm {
        Ok(pending) => pending.await.unwrap_err(),
        Err(e) => e,
    };
    assert_refused(
        &err,
        "write access to exchange 'amq.topic' in vhost '/' refused for user 'pub'",
    );
    // Only the channel closed: the default exchange (checked as amq.default) still works.
    let ch2 = conn.create_channel().await.unwrap();
    declare(&ch2, "inbox", FieldTable::default()).await.unwrap();
    ch2.basic_publish(
        "".into(),
        "inbox".into(),
        BasicPublishOptions::default(),
        b"hi",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let got = within(
        5,
        ch2.basic_get("inbox".into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .unwrap()
    .expect("the message");
    assert_eq!(got.delivery.data, b"hi");
}

#[tokio::test]
async fn without_read_consume_and_get_are_refused_403() {
    let server = TestServer::start().await;
    user(&server, "w", ".*", ".*", "^$").await;
    let conn = connect(&server, "w:pw").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "jobs", FieldTable::default()).await.unwrap();
    let err = ch
        .basic_consume(
            "jobs".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    let text = "read access to queue 'jobs' in vhost '/' refused for user 'w'";
    assert_refused(&err, text);
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .basic_get("jobs".into(), BasicGetOptions::default())
        .await
        .unwrap_err();
    assert_refused(&err, text);
}

#[tokio::test]
async fn a_dead_letter_exchange_needs_write_at_declare_time() {
    let server = TestServer::start().await;
    user(&server, "dl", ".*", "^(amq\\.default|ok-dlx)$", ".*").await;
    let conn = connect(&server, "dl:pw").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let dlx = |name: &str| {
        let mut args = FieldTable::default();
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(LongString::from(name)),
        );
        args
    };
    declare(&ch, "fine", dlx("ok-dlx")).await.unwrap();
    let err = declare(&ch, "denied", dlx("amq.fanout")).await.unwrap_err();
    assert_refused(
        &err,
        "write access to exchange 'amq.fanout' in vhost '/' refused for user 'dl'",
    );
}

#[tokio::test]
async fn a_permission_change_applies_to_a_live_connection() {
    let server = TestServer::start().await;
    user(&server, "live", ".*", ".*", ".*").await;
    let conn = connect(&server, "live:pw").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "a", FieldTable::default()).await.unwrap();
    set_permissions(&server, "live", "^a$", ".*", ".*").await;
    declare(&ch, "a", FieldTable::default()).await.unwrap();
    let err = declare(&ch, "b", FieldTable::default()).await.unwrap_err();
    assert_refused(
        &err,
        "configure access to queue 'b' in vhost '/' refused for user 'live'",
    );
    set_permissions(&server, "live", ".*", ".*", ".*").await;
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "b", FieldTable::default()).await.unwrap();
}

fn configured_user() -> wharf_server::User {
    wharf_server::User {
        name: "cfg".into(),
        password: "from-the-file".into(),
        loopback_only: false,
        vhosts: vec!["/".into()],
        tags: vec!["monitoring".into()],
        initial_only: false,
    }
}

/// `UserPut` records of `cfg` in the log: its name followed by a 48-byte hash length.
fn cfg_user_records(log: &[u8]) -> usize {
    let needle = b"\x03\x00cfg\x30\x00\x00\x00";
    log.windows(needle.len()).filter(|w| w == needle).count()
}

#[tokio::test]
async fn configured_users_are_hashed_into_the_log_once_across_restarts() {
    let server = TestServer::start_with(|c| c.users.0.push(configured_user())).await;
    connect(&server, "cfg:from-the-file").await.unwrap();
    let TestServer { handle, clock, dir } = server;
    handle.shutdown().await.unwrap();
    let log = log_bytes(dir.path());
    assert!(!contains(&log, b"from-the-file"));
    assert_eq!(cfg_user_records(&log), 1);

    // The same configuration again: the stored hash matches, so no new salt is logged.
    let mut config = wharf_server::ServerConfig::new("127.0.0.1:0", dir.path());
    config.clock = std::sync::Arc::new(clock.clone());
    config.users.0.push(configured_user());
    let handle = wharf_server::Server::start(config).await.unwrap();
    let server = TestServer { handle, clock, dir };
    connect(&server, "cfg:from-the-file").await.unwrap();
    assert_eq!(cfg_user_records(&log_bytes(server.dir.path())), 1);
}
