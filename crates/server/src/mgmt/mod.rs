//! The management HTTP API: RabbitMQ's management paths and JSON shapes over axum, HTTP basic
//! auth, and Prometheus metrics at `/metrics` (written by `crate::metrics`). A sibling of the AMQP side of the server (it
//! uses the broker task's admin path, `crate::admin`, and the broker's types).
//!
//! It holds no business rules: every change is a broker command sent through the broker
//! task (answered once durable), every listing a read-only query of the broker's own query
//! functions. This layer only maps HTTP to those and their answers to RabbitMQ's JSON.
//!
//! # Files
//!
//! - `api.rs`: [`MgmtConfig`], the handlers' shared state and its two ways into the broker
//!   task (`Api::command`, `Api::query`), authentication and the `Admin` extractors (the one
//!   access check), and the error answers.
//! - `serve.rs`: the listeners and the router (every route).
//! - `reply.rs`: answers and request-body helpers the handlers share.
//! - `page.rs`: RabbitMQ's list parameters (`page`, `name`, `sort`, `columns`, …) applied
//!   to a listing (S-MGMT-2).
//! - `rates.rs`: sampled `message_stats` rates (S-MGMT-6).
//! - `health.rs`: `/api/whoami`, the health checks, the aliveness test and `/api/nodes`.
//! - `cluster.rs`: what the API shows of the node's cluster (every node, a quorum queue's
//!   leader, members and replication).
//! - One file of handlers per resource: `overview.rs`, `clock.rs` (`--test-clock` only),
//!   `vhosts.rs`, `queues.rs`, `exchanges.rs`, `bindings.rs`, `policies.rs` (user and
//!   operator policies, one generic family), `connections.rs` (and channels, consumers),
//!   `users.rs` (and permissions, topic permissions).
//! - `browse.rs`: `/api/queues/{vhost}/{name}/browse`, a page of a queue read without
//!   consuming it (S-UI).
//! - `time.rs`: `/api/wharf/queues/{vhost}/{name}/expiry-horizon`, `.../scheduled` and
//!   `.../search`, and `/api/wharf/exchanges/{vhost}/{name}/scheduled`: the dashboard's time
//!   views and browse search (S-UI).
//! - `timeline.rs`: `/api/wharf/messages/{vhost}/{id}/timeline`, a message's life read from
//!   the log on a blocking thread (S-UI).
//! - `dead_letters.rs`: `/api/wharf/dead-letters/{vhost}/{queue}`, a dead-letter queue grouped
//!   by death, and its `move-back` (S-UI).
//! - `ui.rs`: the dashboard's static files at `/` (S-UI).
//! - `definitions.rs`: `/api/definitions` export and import.
//! - `json.rs`: broker values and listings as RabbitMQ's JSON, and JSON to field tables.
//! - `node.rs`: `/api/environment`, the settings the server runs with.
//! - `limits.rs`: `/api/wharf/resource-limits`, the alarms' limits changed at runtime.
//! - `metrics.rs`: `/metrics`, served by `crate::metrics`.
//! - `https.rs`: the TLS listener (`MgmtConfig::tls`), serving the same router.

mod api;
mod bindings;
mod browse;
mod clock;
mod cluster;
mod connections;
mod dead_letters;
mod definitions;
mod exchanges;
mod health;
mod https;
mod json;
mod limits;
mod metrics;
mod node;
mod overview;
mod page;
mod policies;
mod queues;
mod rates;
mod reply;
mod serve;
mod time;
mod timeline;
mod ui;
mod users;
mod vhosts;

pub(crate) use api::MgmtConfig;
pub(crate) use json::NODE;
pub(crate) use node::environment;
pub(crate) use serve::serve;
