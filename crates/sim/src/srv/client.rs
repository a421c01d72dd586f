//! [`Client`]: a scripted AMQP 0-9-1 client speaking real frames (the protocol crate's codec)
//! over the server's socket-free door (`ServerHandle::connect_in_memory`, S-NET-2). It
//! pipelines its handshake, sends methods and publishes on channel 1, and reads whatever the
//! server has written without ever waiting: the run decides when time passes, the client
//! only turns the bytes that arrived into [`Incoming`] events.

use std::time::Duration;

use amq_protocol::protocol::{
    AMQPClass, BasicProperties, basic, channel, confirm, connection, exchange, queue,
};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use wharf_protocol::{self as protocol, Assembled, ChannelId, ContentAssembler, Frame};

/// The one channel a client uses.
const CH: ChannelId = ChannelId(1);
/// The frame size the client asks for in `tune-ok`.
const FRAME_MAX: u32 = 131_072;

/// What a client read from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A publisher confirm: `basic.ack` (or `basic.nack` when `ack` is false).
    Confirm {
        /// Delivery tag (publish sequence number).
        tag: u64,
        /// Covers every unconfirmed tag up to `tag`.
        multiple: bool,
        /// Ack or nack.
        ack: bool,
    },
    /// `basic.deliver` or `basic.get-ok`, with its body.
    Message {
        /// Delivery tag.
        tag: u64,
        /// The redelivered flag.
        redelivered: bool,
        /// The exchange it was published (or dead-lettered) to.
        exchange: String,
        /// The body.
        body: Vec<u8>,
    },
    /// `basic.get-empty`.
    GetEmpty,
    /// `connection.blocked` (`true`) or `connection.unblocked` (`false`): a resource alarm
    /// holds (or no longer holds) this connection's publishes (S-DISK-2).
    Blocked(bool),
    /// Any other reply (`qos-ok`, `declare-ok`, ...), by name.
    Reply(String),
    /// `channel.close` from the server.
    ChannelClosed(u16, String),
    /// `connection.close` from the server.
    ConnectionClosed(u16, String),
    /// The server hung up.
    HungUp,
}

/// One simulated client connection.
#[derive(Debug)]
pub struct Client {
    stream: DuplexStream,
    read: BytesMut,
    out: BytesMut,
    content: ContentAssembler,
    /// Whether the server hung up or closed the connection.
    pub gone: bool,
}

fn method_name(m: &AMQPClass) -> String {
    format!("{m:?}")
        .split(['(', ' ', '{'])
        .take(3)
        .collect::<Vec<_>>()
        .join(".")
}

impl Client {
    /// A client on `stream`: the protocol header, `start-ok` (PLAIN guest), `tune-ok` (no
    /// heartbeats: simulated time never lets a heartbeat be missed), `open` of `/` and
    /// `channel.open` 1, all pipelined.
    #[must_use]
    pub fn new(stream: DuplexStream) -> Self {
        let mut c = Client {
            stream,
            read: BytesMut::with_capacity(64 * 1024),
            out: BytesMut::new(),
            content: ContentAssembler::new(CH, u32::MAX),
            gone: false,
        };
        protocol::encode_protocol_header(&mut c.out);
        let mut capabilities = FieldTable::default();
        capabilities.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
        capabilities.insert("connection.blocked".into(), AMQPValue::Boolean(true));
        let mut props = FieldTable::default();
        props.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
        props.insert(
            "product".into(),
            AMQPValue::LongString(LongString::from("wharf-sim")),
        );
        c.send0(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: "\0guest\0guest".into(),
            locale: "en_US".into(),
        }));
        c.send0(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 16,
            frame_max: FRAME_MAX,
            heartbeat: 0,
        }));
        c.send0(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        }));
        c.send(&AMQPClass::Channel(channel::AMQPMethod::Open(
            channel::Open {},
        )));
        c
    }

    fn send0(&mut self, m: connection::AMQPMethod) {
        protocol::encode_method(
            &mut self.out,
            ChannelId::CONNECTION,
            &AMQPClass::Connection(m),
        );
    }

    /// Queues a method on channel 1 (written by [`Client::flush`]).
    pub fn send(&mut self, m: &AMQPClass) {
        protocol::encode_method(&mut self.out, CH, m);
    }

    /// `confirm.select`.
    pub fn confirm_select(&mut self) {
        self.send(&AMQPClass::Confirm(confirm::AMQPMethod::Select(
            confirm::Select { nowait: false },
        )));
    }

    /// `basic.qos` (also the run's durability barrier: its `qos-ok`, like every frame, is
    /// released only once everything logged before it is durable).
    pub fn qos(&mut self, prefetch_count: u16) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count,
            global: false,
        })));
    }

    /// `basic.consume` on `queue`, with acks.
    pub fn consume(&mut self, queue: &str, tag: &str) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Consume(
            basic::Consume {
                queue: queue.into(),
                consumer_tag: tag.into(),
                no_local: false,
                no_ack: false,
                exclusive: false,
                nowait: false,
                arguments: FieldTable::default(),
            },
        )));
    }

    /// `basic.get` on `queue`, with acks.
    pub fn get(&mut self, queue: &str) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
            queue: queue.into(),
            no_ack: false,
        })));
    }

    /// `basic.ack` of one delivery.
    pub fn ack(&mut self, tag: u64) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: tag,
            multiple: false,
        })));
    }

    /// `basic.reject`.
    pub fn reject(&mut self, tag: u64, requeue: bool) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Reject(
            basic::Reject {
                delivery_tag: tag,
                requeue,
            },
        )));
    }

    /// `queue.declare` of a durable queue with `arguments`.
    pub fn declare(&mut self, name: &str, arguments: FieldTable) {
        self.send(&AMQPClass::Queue(queue::AMQPMethod::Declare(
            queue::Declare {
                queue: name.into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                nowait: false,
                arguments,
            },
        )));
    }

    /// `exchange.declare` of a durable exchange of `kind`.
    pub fn declare_exchange(&mut self, name: &str, kind: &str) {
        self.send(&AMQPClass::Exchange(exchange::AMQPMethod::Declare(
            exchange::Declare {
                exchange: name.into(),
                kind: kind.into(),
                passive: false,
                durable: true,
                auto_delete: false,
                internal: false,
                nowait: false,
                arguments: FieldTable::default(),
            },
        )));
    }

    /// `queue.bind` of `queue` to `exchange` with an empty routing key.
    pub fn bind(&mut self, queue: &str, exchange: &str) {
        self.send(&AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: "".into(),
            nowait: false,
            arguments: FieldTable::default(),
        })));
    }

    /// A persistent `basic.publish` of `body` to `queue` through the default exchange.
    pub fn publish(&mut self, queue: &str, body: &[u8], expiration_ms: Option<u64>) {
        self.send(&AMQPClass::Basic(basic::AMQPMethod::Publish(
            basic::Publish {
                exchange: "".into(),
                routing_key: queue.into(),
                mandatory: false,
                immediate: false,
            },
        )));
        let mut props = BasicProperties::default().with_delivery_mode(2);
        if let Some(ms) = expiration_ms {
            props = props.with_expiration(ms.to_string().into());
        }
        protocol::encode_content(&mut self.out, CH, &props, body, FRAME_MAX);
    }

    /// Writes what was queued. A server that hung up makes the client gone.
    pub async fn flush(&mut self) {
        if self.out.is_empty() || self.gone {
            self.out.clear();
            return;
        }
        let out = self.out.split();
        if self.stream.write_all(&out).await.is_err() {
            self.gone = true;
        }
    }

    /// Reads everything the server has written so far, without waiting, and decodes it.
    /// Returns the events, and whether any byte arrived.
    pub async fn poll(&mut self) -> (Vec<Incoming>, bool) {
        let mut arrived = false;
        let mut events = Vec::new();
        while !self.gone {
            if self.read.capacity() - self.read.len() < 4096 {
                self.read.reserve(64 * 1024);
            }
            // A zero timeout polls the read once: what is there, or nothing, never a wait.
            match tokio::time::timeout(Duration::ZERO, self.stream.read_buf(&mut self.read)).await {
                Ok(Ok(0) | Err(_)) => {
                    self.gone = true;
                    events.push(Incoming::HungUp);
                }
                Ok(Ok(_)) => arrived = true,
                Err(_) => break,
            }
        }
        loop {
            match protocol::decode(&mut self.read, FRAME_MAX) {
                Ok(Some(frame)) => self.on_frame(frame, &mut events),
                Ok(None) => break,
                Err(e) => {
                    events.push(Incoming::ConnectionClosed(0, format!("undecodable: {e}")));
                    self.gone = true;
                    break;
                }
            }
        }
        (events, arrived)
    }

    fn on_frame(&mut self, frame: Frame, events: &mut Vec<Incoming>) {
        match frame {
            Frame::Heartbeat => {}
            Frame::Method(ch, AMQPClass::Connection(m)) if ch == ChannelId::CONNECTION => {
                match m {
                    connection::AMQPMethod::Close(c) => {
                        self.gone = true;
                        events.push(Incoming::ConnectionClosed(
                            c.reply_code,
                            c.reply_text.to_string(),
                        ));
                    }
                    connection::AMQPMethod::Blocked(_) => events.push(Incoming::Blocked(true)),
                    connection::AMQPMethod::Unblocked(_) => {
                        events.push(Incoming::Blocked(false));
                    }
                    // start, tune, open-ok: the pipelined handshake needs no answer.
                    other => {
                        events.push(Incoming::Reply(method_name(&AMQPClass::Connection(other))));
                    }
                }
            }
            // Nothing else is sent on channel 0 or on channels the client never opened.
            frame if frame.channel() != CH => {
                events.push(Incoming::Reply(format!("unexpected frame {frame:?}")));
            }
            frame => match self.content.push(frame) {
                Ok(None) => {}
                Ok(Some(Assembled::Method(m))) => events.push(on_method(m)),
                Ok(Some(Assembled::Content(c))) => {
                    let body = c.body.to_vec();
                    let event = match c.method {
                        AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) => Incoming::Message {
                            tag: d.delivery_tag,
                            redelivered: d.redelivered,
                            exchange: d.exchange.to_string(),
                            body,
                        },
                        AMQPClass::Basic(basic::AMQPMethod::GetOk(g)) => Incoming::Message {
                            tag: g.delivery_tag,
                            redelivered: g.redelivered,
                            exchange: g.exchange.to_string(),
                            body,
                        },
                        other => Incoming::Reply(method_name(&other)),
                    };
                    events.push(event);
                }
                Err(e) => {
                    self.gone = true;
                    events.push(Incoming::ConnectionClosed(0, format!("bad content: {e}")));
                }
            },
        }
    }

    /// Hangs up (the client's end is dropped with it).
    pub async fn hang_up(mut self) {
        let _ = self.stream.shutdown().await;
    }
}

fn on_method(m: AMQPClass) -> Incoming {
    match m {
        AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => Incoming::Confirm {
            tag: a.delivery_tag,
            multiple: a.multiple,
            ack: true,
        },
        AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => Incoming::Confirm {
            tag: n.delivery_tag,
            multiple: n.multiple,
            ack: false,
        },
        AMQPClass::Basic(basic::AMQPMethod::GetEmpty(_)) => Incoming::GetEmpty,
        AMQPClass::Channel(channel::AMQPMethod::Close(c)) => {
            Incoming::ChannelClosed(c.reply_code, c.reply_text.to_string())
        }
        other => Incoming::Reply(method_name(&other)),
    }
}
