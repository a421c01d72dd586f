//! The broker: owns every vhost, exchange, queue, channel and consumer, and applies commands,
//! timers and replayed events to them. Must not depend on `protocol`, `wal`, `store`,
//! `server`, a clock or any I/O.

use crate::broker::error::{BrokerError, ErrorKind};
use crate::broker::types::{
    BindingInfo, Command, ConsumerInfo, Event, ExchangeInfo, Outcome, PolicyInfo, QueueInfo,
};

/// The whole broker model. See the module doc of [`crate::broker`] for the API.
#[derive(Debug, Default)]
pub struct Broker {}

impl Broker {
    /// An empty broker with the vhost `/` and its predeclared exchanges.
    pub fn new() -> Self {
        Self {}
    }

    /// Applies one command at `now_ms`.
    ///
    /// # Errors
    /// The AMQP error RabbitMQ would send; nothing changed.
    pub fn handle(&mut self, cmd: Command, now_ms: u64) -> Result<Outcome, BrokerError> {
        let _ = (cmd, now_ms);
        Err(BrokerError::new(ErrorKind::NotImplemented, "todo"))
    }

    /// The earliest instant at which `expire_due` has work.
    pub fn next_deadline(&self) -> Option<u64> {
        None
    }

    /// Does all work due at `now_ms`.
    pub fn expire_due(&mut self, now_ms: u64) -> Outcome {
        let _ = now_ms;
        Outcome::default()
    }

    /// Replays one logged event.
    ///
    /// # Errors
    /// The event does not fit the state (a log that is not this broker's).
    pub fn apply(&mut self, event: &Event) -> Result<(), BrokerError> {
        let _ = event;
        Ok(())
    }

    /// Ends recovery.
    pub fn recovered(&mut self, now_ms: u64) -> Outcome {
        let _ = now_ms;
        Outcome::default()
    }

    /// Walks the whole structure and panics on a broken invariant.
    pub fn check_invariants(&self) {}

    /// Queues of `vhost`.
    pub fn queues(&self, vhost: &str) -> Vec<QueueInfo> {
        let _ = vhost;
        Vec::new()
    }

    /// Exchanges of `vhost`.
    pub fn exchanges(&self, vhost: &str) -> Vec<ExchangeInfo> {
        let _ = vhost;
        Vec::new()
    }

    /// Bindings of `vhost`.
    pub fn bindings(&self, vhost: &str) -> Vec<BindingInfo> {
        let _ = vhost;
        Vec::new()
    }

    /// Policies of `vhost`.
    pub fn policies(&self, vhost: &str) -> Vec<PolicyInfo> {
        let _ = vhost;
        Vec::new()
    }

    /// Consumers of `vhost`.
    pub fn consumers(&self, vhost: &str) -> Vec<ConsumerInfo> {
        let _ = vhost;
        Vec::new()
    }
}
