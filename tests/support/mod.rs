//! The one place of the helpers shared by the root tests (amqp, ops, process): an in-process
//! wharf on 127.0.0.1:0 with a temporary data directory and a manual clock, lapin connections,
//! and reply-code extraction from lapin's errors (here); raw AMQP frames (`raw`); the real
//! `wharf` binary as a child process, signalled by its pid (`binary`). Depends only on wharf's
//! public API and the test clients. Each crate's own tests keep theirs beside them
//! (`crates/*/tests/*_common`).
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};
use wharf_clock::ManualClock;
use wharf_server::{Server, ServerConfig, ServerHandle};

/// The manual clock's starting time (2026-01-01T00:00:00Z).
pub const T0_MS: u64 = 1_767_225_600_000;

/// A running in-process server.
pub struct TestServer {
    /// The server.
    pub handle: ServerHandle,
    /// Its clock.
    pub clock: ManualClock,
    /// Its data directory (deleted on drop).
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// A server with a manual clock and default settings.
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// A server with a manual clock, after `adjust` changed its config.
    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0_MS);
        let mut config = ServerConfig::new("127.0.0.1:0", dir.path());
        config.clock = Arc::new(clock.clone());
        adjust(&mut config);
        let handle = Server::start(config).await.unwrap();
        TestServer { handle, clock, dir }
    }

    /// Shuts the server down gracefully and starts a new one on the same data directory and
    /// clock (a clean restart: recovery replays the log).
    pub async fn restart(self) -> TestServer {
        let TestServer { handle, clock, dir } = self;
        handle.shutdown().await.unwrap();
        let mut config = ServerConfig::new("127.0.0.1:0", dir.path());
        config.clock = Arc::new(clock.clone());
        let handle = Server::start(config).await.unwrap();
        TestServer { handle, clock, dir }
    }

    /// The AMQP URL of the default user and vhost.
    pub fn url(&self) -> String {
        self.handle.amqp_url()
    }

    /// A new lapin connection.
    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.url(), ConnectionProperties::default())
            .await
            .unwrap()
    }

    /// A new lapin connection and one channel on it.
    pub async fn channel(&self) -> (Connection, Channel) {
        let conn = self.connect().await;
        let ch = conn.create_channel().await.unwrap();
        (conn, ch)
    }

    /// Advances the manual clock by `ms` and runs the timer step.
    pub async fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
        self.handle.tick().await;
    }
}

/// The AMQP reply code inside a lapin error, if it is a protocol error.
pub fn reply_code(err: &lapin::Error) -> Option<u16> {
    match err.kind() {
        lapin::ErrorKind::ProtocolError(e) => Some(e.get_id()),
        _ => None,
    }
}

/// The reply text inside a lapin error.
pub fn reply_text(err: &lapin::Error) -> String {
    match err.kind() {
        lapin::ErrorKind::ProtocolError(e) => e.get_message().to_string(),
        other => format!("{other:?}"),
    }
}

/// Waits for a network reply, failing the test after `secs` seconds instead of hanging.
pub async fn within<T>(secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("no answer from the server in time")
}
/// `method path` with `body` on the management API at `base` (`http://HOST:PORT`) as guest:
/// the status and the body as JSON (`null` when it is not JSON); `None` when nothing answered.
pub async fn mgmt_request(
    base: String,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Option<(u16, serde_json::Value)> {
    let (method, path) = (method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        let answer = wharf_ctl::Client::new(&base, "guest", "guest")
            .request(&method, &path, body.as_ref())
            .ok()?;
        let json = serde_json::from_str(&answer.body).unwrap_or(serde_json::Value::Null);
        Some((answer.status, json))
    })
    .await
    .unwrap()
}

pub mod binary;
pub mod cluster;
pub mod group_servers;
pub mod proxy;
pub mod raw;

/// A new lapin connection to `url` and one channel on it, in confirm mode.
pub async fn confirming_channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .unwrap();
    (conn, ch)
}

/// Publishes `body` persistently (delivery mode 2) to `queue` through the default exchange and
/// waits until the broker has taken it (its confirm, on a channel in confirm mode).
pub async fn publish_persistent(ch: &Channel, queue: &str, body: &[u8]) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        lapin::options::BasicPublishOptions::default(),
        body,
        lapin::BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// A dead-letter set-up on a channel it puts in confirm mode: the durable fanout exchange
/// `dlx` bound to the durable queue `dlq`, and the durable queues `sources`, each dead-lettering
/// to `dlx` (S-DLX).
pub async fn dead_letter_topology(ch: &Channel, dlx: &str, dlq: &str, sources: &[&str]) {
    use lapin::options::{
        ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let exchange = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(
        dlx.into(),
        lapin::ExchangeKind::Fanout,
        exchange,
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(dlq.into(), durable, FieldTable::default())
        .await
        .unwrap();
    let bind = QueueBindOptions::default();
    ch.queue_bind(
        dlq.into(),
        dlx.into(),
        "".into(),
        bind,
        FieldTable::default(),
    )
    .await
    .unwrap();
    for q in sources {
        let mut args = FieldTable::default();
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(dlx.into()),
        );
        ch.queue_declare((*q).into(), durable, args).await.unwrap();
    }
}

/// The ready messages of `queue`, as a passive `queue.declare` reports them.
pub async fn ready_count(ch: &Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

/// A loopback port for a child process to listen on, from below the kernel's ephemeral range
/// (Linux's default starts at 32768): a port taken with `bind(…:0)` and released could be
/// handed to any other process binding port 0, or to an outgoing connection, before the child
/// binds it, and the child would fail to start (seen in CI with the cluster tests running
/// side by side). Here only another test picking the same way could take it: the port is
/// drawn at random from 20000..32000 and checked free by binding it.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(DRAWS.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        let port = 20_000 + u16::try_from(h.finish() % 12_000).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
