//! `confirm.select` and `tx.select` / `tx.commit` / `tx.rollback`: channel modes, applied and
//! answered by the broker task (`core::ops`), which refuses conflicting modes with RabbitMQ's
//! 406 texts.

use amq_protocol::protocol::{confirm, tx};

use super::scope::Method;
use crate::core::Op;

/// A confirm-class method.
pub(super) fn confirm_from_wire(m: &confirm::AMQPMethod) -> Method {
    match m {
        confirm::AMQPMethod::Select(s) => Method::Op(Op::ConfirmSelect { nowait: s.nowait }),
        confirm::AMQPMethod::SelectOk(_) => Method::Unimplemented,
    }
}

/// A tx-class method.
pub(super) fn tx_from_wire(m: &tx::AMQPMethod) -> Method {
    Method::Op(match m {
        tx::AMQPMethod::Select(_) => Op::TxSelect,
        tx::AMQPMethod::Commit(_) => Op::TxCommit,
        tx::AMQPMethod::Rollback(_) => Op::TxRollback,
        _ => return Method::Unimplemented,
    })
}
