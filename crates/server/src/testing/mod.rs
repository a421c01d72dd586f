//! The embeddable test broker: [`TestBroker`] (a manual clock, crash and power-loss
//! simulation, restart through the real recovery) and the fixture binary's protocol
//! ([`ClockCommand`], [`TempDataDir`]). Services depend on it as `wharf::testing`, whose page
//! (the root crate's `src/testing.rs`) holds the guide and its examples; this module holds the
//! code. It is the server layer's public face for tests: it holds no rule, and no layer below
//! the server depends on it.
//!
//! - `broker.rs`: [`TestBroker`], [`TestBrokerBuilder`], [`TestClock`], [`TestBrokerError`].
//! - `crash.rs`: the fence that makes a crashed run's storage fail (crash simulation).
//! - `power_cut.rs`: what a power cut undoes on real files (power-loss simulation).
//! - `fixture.rs`: the fixture binary's protocol ([`ClockCommand`], [`TempDataDir`]).

mod broker;
mod crash;
mod fixture;
mod power_cut;

pub use broker::{TestBroker, TestBrokerBuilder, TestBrokerError, TestClock};
pub use fixture::{ClockCommand, TempDataDir};
pub use wharf_base::{DurationError, parse_duration};

#[cfg(test)]
mod tests;
