//! Identifiers and names: connections, channels, messages, delivery tags, exchange types and
//! binding destinations. Plain values; no logic beyond small helpers.

/// A client connection, numbered by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A channel number inside one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

/// One channel of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChanRef {
    /// The connection.
    pub conn: ConnId,
    /// The channel inside it.
    pub channel: ChannelId,
}

impl ChanRef {
    /// The channel `channel` of connection `conn`.
    pub fn new(conn: u64, channel: u16) -> Self {
        Self {
            conn: ConnId(conn),
            channel: ChannelId(channel),
        }
    }
}

/// A message, numbered by the broker in publish order (monotonic, never reused, survives
/// recovery through the events). A dead-lettered copy gets a new id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub u64);

/// A delivery tag: per channel, 1, 2, 3, ... in delivery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryTag(pub u64);

/// Exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// `direct`.
    Direct,
    /// `fanout`.
    Fanout,
    /// `topic`.
    Topic,
    /// `headers`.
    Headers,
    /// `x-delayed-message` (S-SCHED-1); routes as its `x-delayed-type` once the delay passed.
    Delayed(DelayedType),
}

/// The routing type of an `x-delayed-message` exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelayedType {
    /// `direct`.
    Direct,
    /// `fanout`.
    Fanout,
    /// `topic`.
    Topic,
    /// `headers`.
    Headers,
}

impl ExchangeKind {
    /// The type name as AMQP spells it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::Delayed(_) => "x-delayed-message",
        }
    }
}

/// A binding's destination by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DestName {
    /// A queue.
    Queue(String),
    /// An exchange.
    Exchange(String),
}
