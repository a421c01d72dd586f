//! The messages connections and the server handle send the broker task: [`CoreMsg`], and the
//! channel operations ([`Op`]) a connection's reader converted to broker terms.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::admin::AdminRequest;
use crate::convert::Close;
use crate::methods::MethodId;
use crate::outbox::Outbox;
use wharf_broker::{BrokerError, Command, Publish};

/// Messages from connections (and the handle) to the broker task.
#[derive(Debug)]
pub enum CoreMsg {
    /// A connection finished its handshake and asks to open `vhost`.
    Open(Box<OpenConn>),
    /// Channel operations of one connection, in the order the client sent them.
    Ops {
        /// The connection.
        conn: u64,
        /// Its operations.
        ops: Vec<ChanOp>,
    },
    /// The connection is gone (socket closed or close handshake done).
    Closed(u64),
    /// A throttled connection's outbox drained below the low mark.
    Drained(u64),
    /// Run the timer step now (tests on a manual clock); answered when done.
    Tick(oneshot::Sender<()>),
    /// Close every connection (320), make everything durable, stop.
    Shutdown,
    /// A request of the management API (`server::admin`).
    Admin(AdminRequest),
}

/// A connection asking to be opened.
#[derive(Debug)]
pub struct OpenConn {
    /// The connection id.
    pub conn: u64,
    /// The virtual host from `connection.open`.
    pub vhost: String,
    /// The user it logged in as (for the management API's listings).
    pub user: String,
    /// The client's address.
    pub peer: std::net::SocketAddr,
    /// Where its frames go.
    pub outbox: Arc<Outbox>,
    /// The negotiated `frame_max`.
    pub frame_max: u32,
    /// The client advertised `consumer_cancel_notify`.
    pub cancel_notify: bool,
    /// The client's `client-properties` (shown by the management API).
    pub client_properties: wharf_broker::FieldTable,
    /// The answer: `Ok` once open, or the refusal (530 for an unknown vhost).
    pub done: oneshot::Sender<Result<(), BrokerError>>,
}

/// One operation on one channel.
#[derive(Debug)]
pub struct ChanOp {
    /// The channel number.
    pub channel: u16,
    /// The operation.
    pub op: Op,
}

/// What a client asked of a channel, already converted to broker terms by the reader.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "acks are the hot command; boxing them would cost an allocation each"
)]
pub enum Op {
    /// `channel.open`.
    Open,
    /// `channel.close` from the client.
    Close,
    /// `channel.close-ok`: the client's answer to our `channel.close`.
    CloseOk,
    /// `channel.flow`.
    Flow(bool),
    /// A method that maps to one broker command; `method` is its (class, method) id.
    Cmd {
        /// The command.
        cmd: Command,
        /// The method's class and method ids (for the reply and for error closes).
        method: MethodId,
        /// No reply wanted.
        nowait: bool,
    },
    /// `basic.publish` with its content.
    Publish(Box<Publish>),
    /// `confirm.select`.
    ConfirmSelect {
        /// No reply wanted.
        nowait: bool,
    },
    /// `tx.select`.
    TxSelect,
    /// `tx.commit`.
    TxCommit,
    /// `tx.rollback`.
    TxRollback,
    /// The reader found a channel error (e.g. a message over the size limit, 406), or with a
    /// connection-level `Close`, a connection error.
    Fail(Close, MethodId),
    /// `connection.close` from the client (channel 0): answered with `close-ok` after every
    /// operation sent before it.
    ClientClose,
    /// S-CLU-71: the reader moves this channel to the quorum queues' leader (the method
    /// `method` needs quorum queue `queue`, led by member `leader`). Answered, once every
    /// operation sent before it is done, with the state the leader's channel goes on from
    /// (the channel then leaves this node's broker), or `None` when the channel cannot move
    /// (it is closed here with 406).
    Handoff {
        /// The answer.
        done: oneshot::Sender<Option<Handoff>>,
        /// The method that needs the leader.
        method: MethodId,
        /// The quorum queue it needs.
        queue: String,
        /// The member leading the group.
        leader: u64,
    },
    /// S-CLU-74: a channel that had moved to the leader comes back (its relay ended; the
    /// client announced `consumer_cancel_notify`): it is open again in this node's broker,
    /// silently, in confirm mode from `confirm_next` when given. Answered once done.
    TakeBack {
        /// The next publish sequence number, in confirm mode.
        confirm_next: Option<u64>,
        /// The answer.
        done: oneshot::Sender<()>,
    },
    /// S-CLU-72: which classic queue of this node `probe` (on channel 0: the connection's
    /// vhost) uses, if any; answered once every operation sent before it is done.
    LocalUse {
        /// What the method would use.
        probe: LocalUse,
        /// The answer.
        done: oneshot::Sender<Option<String>>,
    },
}

/// What a method on a forwarded channel would use here (S-CLU-72).
#[derive(Debug)]
pub enum LocalUse {
    /// A queue, by name.
    Queue(String),
    /// A publish to `exchange` with `key`.
    Publish {
        /// The exchange.
        exchange: String,
        /// The routing key.
        key: String,
    },
}

/// What a channel moving to the leader goes on from (S-CLU-71).
#[derive(Debug)]
pub struct Handoff {
    /// In confirm mode: the next publish sequence number.
    pub confirm_next: Option<u64>,
}
