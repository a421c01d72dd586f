//! Queue types (`x-queue-type`, S-QQ) and which queue arguments each type takes: RabbitMQ
//! 4.0's per-type argument lists, so an argument of another type is refused with RabbitMQ's
//! text rather than ignored (S-QQ-5, the argument audit in `docs/SEMANTICS.md`).

use super::texts::{invalid_arg, rs_queue, type_name};
use crate::error::BrokerError;
use crate::value::{FieldTable, Value};

/// A queue's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueKind {
    /// RabbitMQ's classic queue (the default).
    #[default]
    Classic,
    /// RabbitMQ's quorum queue, on a single node (S-QQ-1).
    Quorum,
}

impl QueueKind {
    /// The name clients and listings use (`classic`, `quorum`).
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Classic => "classic",
            QueueKind::Quorum => "quorum",
        }
    }

    /// RabbitMQ's module name, as its error texts show it.
    pub(super) fn module(self) -> &'static str {
        match self {
            QueueKind::Classic => "rabbit_classic_queue",
            QueueKind::Quorum => "rabbit_quorum_queue",
        }
    }

    /// The queue arguments this type takes: RabbitMQ 4.0's list for the type, plus
    /// `x-consumer-timeout` (S-CONS-8) and, on classic queues, `x-delivery-limit` (an
    /// extension, S-DLX-1).
    fn arguments(self) -> &'static [&'static str] {
        match self {
            QueueKind::Classic => CLASSIC_ARGS,
            QueueKind::Quorum => QUORUM_ARGS,
        }
    }
}

const CLASSIC_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-consumer-timeout",
    "x-delivery-limit",
];

const QUORUM_ARGS: &[&str] = &[
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    "x-message-ttl",
    "x-queue-leader-locator",
    "x-consumer-timeout",
];

/// Queue arguments of RabbitMQ 4.0's stream queues that neither classic nor quorum queues
/// take: refused on both, as RabbitMQ does.
const STREAM_ONLY_ARGS: &[&str] = &[
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-stream-filter-size-bytes",
];

/// Arguments wharf accepts (validated) and does not act on, because on a single node they
/// change nothing, as in a one-node RabbitMQ (S-QQ-6), or because RabbitMQ 3.12+ itself
/// ignores them (`x-queue-mode`, `x-queue-version`: S-PRIO-8): the server logs a warning
/// for each.
pub const NO_OP_ARGS: [&str; 7] = [
    "x-queue-mode",
    "x-queue-version",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-quorum-initial-group-size",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
];

fn known(key: &str) -> bool {
    CLASSIC_ARGS.contains(&key) || QUORUM_ARGS.contains(&key) || STREAM_ONLY_ARGS.contains(&key)
}

/// The queue type `x-queue-type` names (classic when absent or empty, as RabbitMQ).
///
/// # Errors
/// 406 with RabbitMQ's texts for a non-string or unknown type; `stream` is a known type
/// wharf does not support yet (S-QQ-4).
pub fn queue_kind(vhost: &str, queue: &str, args: &FieldTable) -> Result<QueueKind, BrokerError> {
    const KEY: &str = "x-queue-type";
    let Some(v) = args.get(KEY) else {
        return Ok(QueueKind::Classic);
    };
    let what = rs_queue(vhost, queue);
    let Some(text) = v.as_str() else {
        return Err(invalid_arg(
            KEY,
            &what,
            &format!("{{unacceptable_type,{}}}", type_name(v)),
        ));
    };
    match text {
        "" | "classic" => Ok(QueueKind::Classic),
        "quorum" => Ok(QueueKind::Quorum),
        "stream" => Err(invalid_arg(
            KEY,
            &what,
            "queue type 'stream' is not supported by wharf yet",
        )),
        other => Err(invalid_arg(
            KEY,
            &what,
            &format!("\"unsupported queue type '{other}'\""),
        )),
    }
}

/// Refuses an argument RabbitMQ knows for some queue type but not for `kind` (S-QQ-5).
///
/// # Errors
/// 406 `invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type
/// rabbit_quorum_queue`.
pub fn check_arguments_for_kind(
    kind: QueueKind,
    vhost: &str,
    queue: &str,
    args: &FieldTable,
) -> Result<(), BrokerError> {
    for (key, _) in args.iter() {
        if known(key) && !kind.arguments().contains(&key) {
            return Err(BrokerError::precondition(format!(
                "invalid arg '{key}' for {} of queue type {}",
                rs_queue(vhost, queue),
                kind.module()
            )));
        }
    }
    Ok(())
}

/// A quorum queue is durable, not exclusive and not auto-delete (S-QQ-2); checked in
/// RabbitMQ's order.
///
/// # Errors
/// 406 `invalid property 'auto-delete' for queue 'q' in vhost '/'` (or `exclusive-owner`,
/// `non-durable`).
pub fn check_queue_properties(
    kind: QueueKind,
    what: &str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
) -> Result<(), BrokerError> {
    if kind != QueueKind::Quorum {
        return Ok(());
    }
    let bad = if auto_delete {
        "auto-delete"
    } else if exclusive {
        "exclusive-owner"
    } else if !durable {
        "non-durable"
    } else {
        return Ok(());
    };
    Err(BrokerError::precondition(format!(
        "invalid property '{bad}' for {what}"
    )))
}

/// The arguments of `args` wharf accepts without acting on them (S-QQ-6), for the server's
/// warning.
pub fn no_op_arguments(args: &FieldTable) -> Vec<&'static str> {
    NO_OP_ARGS
        .iter()
        .copied()
        .filter(|k| args.get(k).is_some())
        .collect()
}

/// A string argument that must be one of `allowed`; RabbitMQ's `unknown` reason otherwise.
fn check_one_of(
    key: &str,
    v: &Value,
    what: &str,
    allowed: &[&str],
    unknown: &str,
) -> Result<(), BrokerError> {
    match v.as_str() {
        Some(text) if allowed.contains(&text) => Ok(()),
        Some(_) => Err(invalid_arg(key, what, unknown)),
        None => Err(invalid_arg(
            key,
            what,
            &format!("{{unacceptable_type,{}}}", type_name(v)),
        )),
    }
}

/// `x-queue-leader-locator`: `client-local` or `balanced` (RabbitMQ 4.0).
pub(super) fn check_leader_locator(key: &str, v: &Value, what: &str) -> Result<(), BrokerError> {
    let allowed = ["client-local", "balanced"];
    check_one_of(key, v, what, &allowed, "invalid_queue_locator_arg")
}

/// `x-dead-letter-strategy`: `at-most-once` or `at-least-once` (S-QQ-7).
pub(super) fn check_dlx_strategy(key: &str, v: &Value, what: &str) -> Result<(), BrokerError> {
    let allowed = ["at-most-once", "at-least-once"];
    check_one_of(key, v, what, &allowed, "invalid_dlx_strategy")
}
