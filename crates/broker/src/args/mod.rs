//! Arguments and definitions, validated with RabbitMQ's error texts: queue arguments and the
//! effective settings they resolve to with policies, per-message expiration, policy
//! definitions, redeclare equivalence. Pure functions.
//!
//! - `queue_args.rs`: `queue.declare` arguments; [`QueueSettings`] and their resolution.
//! - `classic.rs`: `x-max-priority`, `x-queue-mode`, `x-queue-version` (S-PRIO).
//! - `expiration.rs`: the `expiration` property (S-TTL-2).
//! - `policy.rs`: policy definitions and their selection (S-POL).
//! - `equivalence.rs`: redeclare equivalence checks.
//! - `texts.rs`: RabbitMQ's wording of types, values and resources.

mod classic;
mod equivalence;
mod expiration;
mod policy;
mod queue_args;
mod texts;

pub(crate) use classic::{LATE_CHECKED_ARGS, NO_OP_ARGS, priority_lanes};
pub(crate) use equivalence::{assert_args_equivalence, assert_field_equivalence};
pub(crate) use expiration::parse_expiration;
pub use policy::parse_policy;
pub(crate) use policy::{Policy, select_policy};
pub(crate) use queue_args::QUEUE_ARGS;
pub use queue_args::{Overflow, QueueSettings, parse_queue_args};
pub(crate) use texts::{rs_exchange, rs_queue, type_name};
