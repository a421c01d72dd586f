//! `basic.consume` arguments (S-CONS-1, S-CONS-8): `x-priority` and `x-consumer-timeout`,
//! validated with RabbitMQ's texts; stream consumer arguments are refused as RabbitMQ
//! refuses them on classic and quorum queues.

use super::queue_args::non_neg_int;
use super::queue_type::QueueKind;
use super::texts::{invalid_arg, rs_queue, type_name};
use crate::error::BrokerError;
use crate::value::FieldTable;

/// What a consumer's arguments ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerArgs {
    /// `x-priority` (S-CONS-1): higher first; 0 when absent.
    pub priority: i64,
    /// `x-consumer-timeout` (S-CONS-8): overrides the queue's and the server's.
    pub timeout_ms: Option<u64>,
}

/// Consumer arguments of RabbitMQ's stream queues.
const STREAM_CONSUMER_ARGS: [&str; 3] = [
    "x-stream-offset",
    "x-stream-filter",
    "x-stream-match-unfiltered",
];

/// Validates `basic.consume` arguments for a queue of type `kind`.
///
/// # Errors
/// 406 with RabbitMQ's texts: `invalid arg 'x-priority' for queue 'q' in vhost '/':
/// "expected integer, got longstr"`, `invalid arg 'x-stream-offset' for queue 'q' in vhost
/// '/' of queue type rabbit_classic_queue`.
pub fn parse_consumer_args(
    kind: QueueKind,
    vhost: &str,
    queue: &str,
    args: &FieldTable,
) -> Result<ConsumerArgs, BrokerError> {
    let what = rs_queue(vhost, queue);
    let mut c = ConsumerArgs::default();
    for (key, v) in args.iter() {
        match key {
            "x-priority" => {
                let Some(p) = v.as_integer() else {
                    return Err(invalid_arg(
                        key,
                        &what,
                        &format!("\"expected integer, got {}\"", type_name(v)),
                    ));
                };
                // Any AMQP integer fits an i64 but a u64 above it: clamp, the order holds.
                c.priority = i64::try_from(p).unwrap_or(i64::MAX);
            }
            "x-consumer-timeout" => c.timeout_ms = Some(non_neg_int(key, v, &what)?),
            k if STREAM_CONSUMER_ARGS.contains(&k) => {
                return Err(BrokerError::precondition(format!(
                    "invalid arg '{key}' for {what} of queue type {}",
                    kind.module()
                )));
            }
            _ => {}
        }
    }
    Ok(c)
}
