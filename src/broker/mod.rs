//! The broker model: virtual hosts, exchanges, queues, bindings, consumers, message TTL, queue
//! expiry, dead-lettering, length limits, policies, scheduled messages.
//!
//! Pure and deterministic: no tokio, no sockets, no files, no clock. Time comes in as `now`
//! (milliseconds since the Unix epoch). Commands go in; durable events (for `store`) and effects
//! (for `server`) come out. Must not depend on `protocol`, `wal`, `store` or `server`.

pub mod error;
pub mod routing;
pub mod value;
