//! wharf: a durable AMQP 0-9-1 message broker.
//!
//! Every confirmed message is fsync'd before its confirm; expiry is exact wherever a message
//! sits in a queue and survives requeues and restarts; dead-lettering is atomic.
//!
//! # Layout
//!
//! Arrows point only downward (`tests/layering.rs` enforces them):
//!
//! ```text
//!   server    tokio glue: listeners, connections, group commit, timers, config, admin
//!     |   \
//!  protocol  store       protocol: AMQP 0-9-1 bytes <-> typed frames, no state
//!             |   \      store: broker events <-> log records; checkpoints; replay
//!           broker  wal  broker: the model; pure, takes `now` as an argument
//!                        wal: segment files, record framing, checksums, fsync
//! ```
//!
//! - [`limits`]: every hard limit, with compile-time checks between them. A leaf.
//! - [`clock`]: the only code that reads the system clock; [`clock::ManualClock`] for tests.
//! - [`wal`]: the write-ahead log of opaque records: segments, group commit, recovery, and
//!   [`wal::SimStorage`], the simulated disk that can lose power.
//! - [`broker`]: the deterministic model of exchanges, queues and messages.
//! - [`protocol`]: AMQP 0-9-1 framing.
//! - [`store`]: broker events <-> log records, replay.
//! - [`config`]: the broker's TOML configuration file, merged with its flags.
//! - [`mgmt`]: the management HTTP API and `/metrics` (a sibling of `server`, over its admin
//!   path); [`ctl`]: the logic of the `wharfctl` binary (an HTTP client of that API).
//! - [`server`]: tokio glue from sockets to the broker; for now the conversions between wire
//!   values and broker values.
//! - [`testing`]: wharf inside other services' tests: [`testing::TestBroker`] (a manual clock,
//!   crash and power-loss simulation, restart through the real recovery) and the protocol of
//!   the fixture binary (`wharf --test-mode`).

pub mod broker;
pub mod clock;
pub mod config;
pub mod ctl;
pub mod limits;
pub mod mgmt;
pub mod protocol;
pub mod server;
pub mod store;
pub mod testing;
pub mod wal;
