//! The server layer: tokio glue from sockets to the broker. It may use every other layer but
//! holds no business rules (a TTL or routing decision found here is a bug).
//!
//! # Layout
//!
//! - `start`: [`Server::start`] opens the store (`recovery`), binds the listeners
//!   (`listener`) and spawns the broker task and the accept loops; it returns a
//!   [`ServerHandle`] (`handle`), configured by a [`ServerConfig`] (`server_config`, with the
//!   configured [`Users`] of `users`); its errors are [`ServerError`] (`error`).
//! - `recovery`: the store opened and replayed, downtime expiries, configured vhosts and
//!   users, all before the listener opens (S-DUR-5).
//! - `listener`: binding the AMQP(S) listeners and their accept loops.
//! - `core`: the broker task, sole owner of the `Broker` and the `Store`; batches commands,
//!   one `store.log` per batch, the expiry timer. Every frame it emits is released to the
//!   socket only once what was logged before it is durable (S-DUR-3/4, S-DLX-7).
//! - `connection`: one task per client: handshake, frame decoding, channel states; each AMQP
//!   method's parsing, checks and conversion to a broker command are in `methods`.
//! - `outbox`: a connection's outgoing buffer, its release gate (frames sealed with a log
//!   ticket, written once it is durable) and the writer task (one write per batch).
//! - `alarm`: disk and memory alarms; a connection that publishes while one is on stops
//!   being read (RabbitMQ's resource alarms).
//! - `admin`: what the management API (`mgmt`) asks the broker task; the listener starts
//!   with the server when [`ServerConfig::mgmt_bind`] is set.
//! - `volume`: the log sized for the data directory's volume (S-DISK-5).
//! - `metrics`: Prometheus metrics as `rabbitmq_prometheus` serves them, on their own
//!   listener ([`ServerConfig::prometheus_bind`]) and on the management API's `/metrics`;
//!   `counters`: what the broker task counts for them.
//! - `clock_control`: moving a manual clock from outside (`--test-clock`).
//! - `convert`: wire values <-> broker values, broker errors -> AMQP closes (S-ERR-1).
//! - `auth`: password hashes (RabbitMQ's format), the shared [`UserRegistry`] that
//!   connections and the management API log in through, and the permissions each command
//!   needs (checked by the connection before a method becomes a broker command).
//! - `tls`: the AMQPS listener's `rustls::ServerConfig` (reusable by the management API).
//! - [`config`]: the configuration file's schema, its validation, and flags merged over it.
//! - [`testing`]: the embeddable test broker (`wharf::testing`).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), wharf_server::ServerError> {
//! let config = wharf_server::ServerConfig::new("127.0.0.1:0", "/tmp/wharf-data");
//! let server = wharf_server::Server::start(config).await?;
//! println!("connect to {}", server.amqp_url());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```

mod admin;
mod alarm;
mod auth;
mod clock_control;
mod connection;
mod convert;
mod core;
mod counters;
mod error;
mod handle;
mod listener;
mod methods;
mod metrics;
mod mgmt;
mod outbox;
mod recovery;
mod server_config;
mod start;
mod tls;
mod users;
mod volume;

pub mod config;
pub mod testing;

pub use admin::{
    AdminQuery, AdminRequest, AdminView, ChannelInfo, ChannelStats, ConnectionCounts,
    ConnectionInfo, ConnectionTraffic, Connections,
};
pub use alarm::{MemoryLimit, ResourceProbe, SystemProbe};
pub use auth::{Principal, UserRegistry, hash_password, verify_password};
pub use clock_control::ClockControlError;
pub use counters::{MESSAGE_SIZE_BOUNDS, MessageCounters, QueueTypeCounters};
pub use error::ServerError;
pub use handle::ServerHandle;
pub use metrics::MetricsSource;
pub use server_config::{IoLatency, ListeningHook, RelayHandle, ServerConfig};
pub use start::Server;
pub use tls::{TlsError, TlsListener};
pub use users::{User, Users};
