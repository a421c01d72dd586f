//! The broker model: virtual hosts, exchanges, queues, bindings, consumers, message TTL, queue
//! expiry, dead-lettering, length limits, policies, scheduled messages.
//!
//! Pure and deterministic: no tokio, no sockets, no files, no clock. Time comes in as `now`
//! (milliseconds since the Unix epoch). Commands go in; durable events (for `store`) and effects
//! (for `server`) come out. Must not depend on `protocol`, `wal`, `store` or `server`.
//!
//! # API
//!
//! - [`Broker::new`] makes an empty broker with the vhost `/` and its predeclared exchanges.
//! - [`Broker::handle`]`(cmd, now_ms) -> Result<Outcome, BrokerError>`: one [`Command`] in,
//!   one [`Outcome`] out: `events` (durable facts to log, in order), `effects` (deliveries,
//!   returns, server-sent cancels, deletions, deaths) and `reply` (the method reply's data; for
//!   a publish a [`PublishResult`]: routed, refused (nack under confirms, S-LEN-2), and
//!   `needs_durability` (confirm only after this outcome's events are durable, S-DUR-3)).
//!   An error changes nothing; its [`error::ErrorKind`] says whether it closes the channel or
//!   the connection. The server then sends `ChannelClose` / `ConnectionClose` itself.
//! - [`Broker::next_deadline`] is when to call [`Broker::expire_due`] next (earliest message
//!   deadline, queue lease or scheduled message); `expire_due(now)` does all due work.
//! - Recovery: a fresh broker, [`Broker::apply`] each logged [`Event`] in order, then
//!   [`Broker::recovered`]`(now)` (S-QEXP-4, S-DUR-5, S-DUR-6).
//! - [`Broker::check_invariants`] walks everything (tests call it after every step; `handle`
//!   calls it in debug builds).
//! - Queries for management: [`Broker::queues`], [`Broker::exchanges`], [`Broker::bindings`],
//!   [`Broker::policies`], [`Broker::consumers`].
//!
//! Messages are stored once (`Arc<Message>`) however many queues they enter; a queue entry is
//! a few machine words. Each queue keeps an index of ready messages ordered by deadline, so
//! expiry anywhere in a queue costs O(log n) per expired message (S-TTL-9).

pub mod args;
pub mod error;
mod flow;
pub mod model;
mod queue;
pub mod replay;
pub mod routing;
pub mod types;
pub mod value;

pub use error::{BrokerError, ErrorKind};
pub use model::Broker;
pub use replay::{DurableMessage, DurableState};
pub use types::*;
pub use value::{FieldTable, Value};
