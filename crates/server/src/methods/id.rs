//! [`MethodId`]: an AMQP method's (class id, method id) with a name, as a close frame carries
//! it (`class-id`, `method-id`: the method that caused the close) and as the broker task knows
//! which reply a command's method wants. Named constants instead of bare `(40, 10)` tuples.

use amq_protocol::protocol::AMQPClass;
use wharf_protocol as protocol;

/// An AMQP method's class and method ids (AMQP 0-9-1, section 1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct MethodId {
    /// The class id (`10` connection, `20` channel, `40` exchange, `50` queue, `60` basic,
    /// `85` confirm, `90` tx).
    pub(crate) class: u16,
    /// The method id within the class.
    pub(crate) method: u16,
}

impl MethodId {
    const fn new(class: u16, method: u16) -> Self {
        MethodId { class, method }
    }

    /// No method: a close not caused by one (a bad frame, a heartbeat timeout, a shutdown).
    pub(crate) const NONE: MethodId = MethodId::new(0, 0);
    /// `connection.start-ok`.
    pub(crate) const CONNECTION_START_OK: MethodId = MethodId::new(10, 11);
    /// `connection.open`.
    pub(crate) const CONNECTION_OPEN: MethodId = MethodId::new(10, 40);
    /// `channel.open`.
    pub(crate) const CHANNEL_OPEN: MethodId = MethodId::new(20, 10);
    /// `exchange.declare`.
    pub(crate) const EXCHANGE_DECLARE: MethodId = MethodId::new(40, 10);
    /// `exchange.delete`.
    pub(crate) const EXCHANGE_DELETE: MethodId = MethodId::new(40, 20);
    /// `exchange.bind`.
    pub(crate) const EXCHANGE_BIND: MethodId = MethodId::new(40, 30);
    /// `exchange.unbind`.
    pub(crate) const EXCHANGE_UNBIND: MethodId = MethodId::new(40, 40);
    /// `queue.declare`.
    pub(crate) const QUEUE_DECLARE: MethodId = MethodId::new(50, 10);
    /// `queue.bind`.
    pub(crate) const QUEUE_BIND: MethodId = MethodId::new(50, 20);
    /// `queue.purge`.
    pub(crate) const QUEUE_PURGE: MethodId = MethodId::new(50, 30);
    /// `queue.delete`.
    pub(crate) const QUEUE_DELETE: MethodId = MethodId::new(50, 40);
    /// `queue.unbind`.
    pub(crate) const QUEUE_UNBIND: MethodId = MethodId::new(50, 50);
    /// `basic.qos`.
    pub(crate) const BASIC_QOS: MethodId = MethodId::new(60, 10);
    /// `basic.consume`.
    pub(crate) const BASIC_CONSUME: MethodId = MethodId::new(60, 20);
    /// `basic.cancel`.
    pub(crate) const BASIC_CANCEL: MethodId = MethodId::new(60, 30);
    /// `basic.publish`.
    pub(crate) const BASIC_PUBLISH: MethodId = MethodId::new(60, 40);
    /// `basic.get`.
    pub(crate) const BASIC_GET: MethodId = MethodId::new(60, 70);
    /// `basic.recover`.
    pub(crate) const BASIC_RECOVER: MethodId = MethodId::new(60, 110);
    /// `confirm.select`.
    pub(crate) const CONFIRM_SELECT: MethodId = MethodId::new(85, 10);
    /// `tx.select`.
    pub(crate) const TX_SELECT: MethodId = MethodId::new(90, 10);
    /// `tx.commit`.
    pub(crate) const TX_COMMIT: MethodId = MethodId::new(90, 20);
    /// `tx.rollback`.
    pub(crate) const TX_ROLLBACK: MethodId = MethodId::new(90, 30);

    /// The id of a decoded method.
    pub(crate) fn of(m: &AMQPClass) -> Self {
        MethodId::new(m.get_amqp_class_id(), m.get_amqp_method_id())
    }

    /// The spec's name (`queue.declare`), or `unknown`.
    pub(crate) fn label(self) -> &'static str {
        protocol::method_name(self.class, self.method).unwrap_or("unknown")
    }
}
