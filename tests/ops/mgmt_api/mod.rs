//! The management HTTP API against an in-process server (AMQP and mgmt on 127.0.0.1:0):
//! RabbitMQ's paths and JSON shapes, the 401/403/404/400 answers, and the effects of purge,
//! delete and get seen through AMQP (lapin). The HTTP client is `wharf_ctl::client` (ureq),
//! the one `wharfctl` uses.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;
use crate::support::publish_persistent as publish;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable as LapinTable;
use lapin::{BasicProperties, Channel};
use serde_json::{Value, json};
use support::{TestServer, within};
use wharf_ctl::{Answer, Client};
use wharf_server::{Server, ServerConfig, User, Users};

async fn start() -> (TestServer, Client) {
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let client = guest(&server);
    (server, client)
}

/// A clean restart on the same directory and clock, management API included.
async fn restart(server: TestServer) -> TestServer {
    let TestServer { handle, clock, dir } = server;
    handle.shutdown().await.unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0", dir.path());
    config.clock = std::sync::Arc::new(clock.clone());
    config.mgmt_bind = Some("127.0.0.1:0".to_owned());
    let handle = Server::start(config).await.unwrap();
    TestServer { handle, clock, dir }
}

fn base(server: &TestServer) -> String {
    format!("http://{}", server.handle.mgmt_addr().unwrap())
}

fn guest(server: &TestServer) -> Client {
    Client::new(&base(server), "guest", "guest")
}

/// One request, off the async runtime (ureq blocks).
async fn call(client: &Client, method: &str, path: &str, body: Option<Value>) -> Answer {
    let (client, method, path) = (client.clone(), method.to_owned(), path.to_owned());
    within(
        10,
        tokio::task::spawn_blocking(move || client.request(&method, &path, body.as_ref())),
    )
    .await
    .unwrap()
    .unwrap()
}

async fn get_json(client: &Client, path: &str) -> Value {
    let a = call(client, "GET", path, None).await;
    assert_eq!(a.status, 200, "GET {path}: {}", a.body);
    a.json()
}

/// Creates the user `name` (password `pw`) with `tags`, and its configure, write and read
/// regexes `re` on `vhost`.
async fn put_user_with(client: &Client, name: &str, tags: &str, vhost: &str, re: [&str; 3]) {
    let a = call(
        client,
        "PUT",
        &format!("/api/users/{name}"),
        Some(json!({"password": "pw", "tags": tags})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = call(
        client,
        "PUT",
        &format!("/api/permissions/{vhost}/{name}"),
        Some(json!({"configure": re[0], "write": re[1], "read": re[2]})),
    )
    .await;
    assert!(a.status == 201 || a.status == 204, "{}", a.body);
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

async fn ready_via_amqp(ch: &Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        LapinTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

mod access;
mod browse;
mod connections;
mod definitions;
mod exchanges;
mod life;
mod metrics;
mod parity;
mod policies;
mod queues;
mod rabbitmq_import;
mod stats;
mod tags;
mod time;
