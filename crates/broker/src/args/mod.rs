//! Arguments and definitions, validated with RabbitMQ's error texts: queue arguments and the
//! effective settings they resolve to with policies, per-message expiration, policy
//! definitions, redeclare equivalence, queue types and consumer arguments. Pure functions.
//!
//! - `queue_args.rs`: `queue.declare` arguments; [`QueueSettings`] and their resolution.
//! - `queue_type.rs`: `x-queue-type` and the arguments each type takes (S-QQ).
//! - `consumer_args.rs`: `basic.consume` arguments (S-CONS).
//! - `classic.rs`: `x-max-priority`, `x-queue-mode`, `x-queue-version` (S-PRIO).
//! - `expiration.rs`: the `expiration` property (S-TTL-2).
//! - `policy.rs`: policy definitions and their selection (S-POL).
//! - `equivalence.rs`: redeclare equivalence checks.
//! - `texts.rs`: RabbitMQ's wording of types, values and resources.

mod classic;
mod consumer_args;
mod equivalence;
mod expiration;
mod policy;
mod queue_args;
mod queue_type;
mod texts;

pub(crate) use classic::priority_lanes;
pub(crate) use consumer_args::parse_consumer_args;
pub(crate) use equivalence::{assert_args_equivalence, assert_field_equivalence};
pub(crate) use expiration::parse_expiration;
pub(crate) use policy::{Policy, select_exchange_policy, select_policy};
pub use policy::{noop_policy_key, parse_policy};
pub use queue_args::{
    DeadLetterStrategy, Overflow, QUORUM_DELIVERY_LIMIT, QueueSettings, parse_queue_args,
};
pub(crate) use queue_args::{QUEUE_ARGS, QUEUE_ARGS_CONS, parse_logged_queue_args};
pub use queue_type::QueueKind;
pub(crate) use queue_type::{check_queue_properties, no_op_arguments};
pub(crate) use texts::{rs_exchange, rs_queue, type_name};
