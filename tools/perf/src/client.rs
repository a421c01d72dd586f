//! A minimal AMQP 0-9-1 client connection: handshake (PLAIN), one channel, synchronous RPCs for
//! setup (declare, bind, purge, qos, confirm.select, consume), and the raw stream for the hot
//! loops in `run.rs`. Uses tokio and amq-protocol; knows nothing of the scenarios.

use amq_protocol::frame::{AMQPFrame, ProtocolVersion};
use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection, exchange, queue};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use amq_protocol::uri::AMQPUri;
use anyhow::{Context, Result, anyhow, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::args::ArgValue;
use crate::wire::{self, FRAME_HEARTBEAT, FRAME_METHOD, RawFrame};

/// The one channel each connection uses.
pub const CHANNEL: u16 = 1;
/// The frame-max we ask for (RabbitMQ's default); the broker may lower it.
const FRAME_MAX_WANTED: u32 = 128 * 1024;
/// Read buffer reserve: enough for many frames per read.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// An open connection with channel [`CHANNEL`] open.
#[derive(Debug)]
pub struct Connection {
    /// The socket.
    pub stream: TcpStream,
    /// Bytes read but not yet consumed as frames.
    pub rbuf: BytesMut,
    /// Negotiated frame-max.
    pub frame_max: u32,
}

/// Parses an `amqp://user:pass@host:port/vhost` URI (the vhost percent-decoded).
fn parse_uri(uri: &str) -> Result<AMQPUri> {
    uri.parse::<AMQPUri>()
        .map_err(|e| anyhow!("bad --uri {uri:?}: {e}"))
}

fn short(text: &str) -> Result<ShortString> {
    ShortString::try_new(text).map_err(|e| anyhow!("{text:?}: {e}"))
}

/// Converts `--queue-arg` values to AMQP field values.
pub fn field_table(args: &[(String, ArgValue)]) -> Result<FieldTable> {
    let mut table = FieldTable::default();
    for (key, value) in args {
        let value = match value {
            ArgValue::Int(int) => match i32::try_from(*int) {
                Ok(small) => AMQPValue::LongInt(small),
                Err(_) => AMQPValue::LongLongInt(*int),
            },
            ArgValue::Bool(boolean) => AMQPValue::Boolean(*boolean),
            ArgValue::Str(text) => AMQPValue::LongString(LongString::from(text.as_bytes())),
        };
        table.insert(short(key)?, value);
    }
    Ok(table)
}

impl Connection {
    /// Connects, authenticates with PLAIN, opens the vhost and channel 1. Heartbeats are
    /// disabled (0): the generator never idles long enough to need them.
    pub async fn open(uri: &str) -> Result<Self> {
        let uri = parse_uri(uri)?;
        let address = (uri.authority.host.as_str(), uri.authority.port);
        let stream = TcpStream::connect(address)
            .await
            .with_context(|| format!("connecting to {}:{}", address.0, address.1))?;
        stream.set_nodelay(true)?;
        let mut conn = Self {
            stream,
            rbuf: BytesMut::with_capacity(READ_BUFFER_BYTES),
            frame_max: FRAME_MAX_WANTED,
        };
        conn.send(&AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1()))
            .await?;
        conn.handshake(&uri).await?;
        conn.rpc(AMQPClass::Channel(channel::AMQPMethod::Open(
            channel::Open {},
        )))
        .await?;
        Ok(conn)
    }

    async fn handshake(&mut self, uri: &AMQPUri) -> Result<()> {
        let AMQPClass::Connection(connection::AMQPMethod::Start(start)) =
            self.next_method().await?
        else {
            bail!("expected connection.start");
        };
        if !start
            .mechanisms
            .to_string()
            .split(' ')
            .any(|m| m == "PLAIN")
        {
            bail!("the server does not offer PLAIN ({})", start.mechanisms);
        }
        let mut capabilities = FieldTable::default();
        capabilities.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
        capabilities.insert("consumer_cancel_notify".into(), AMQPValue::Boolean(true));
        let mut properties = FieldTable::default();
        properties.insert("product".into(), AMQPValue::LongString("wharf-perf".into()));
        properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
        let user = &uri.authority.userinfo;
        let response = format!("\0{}\0{}", user.username, user.password);
        self.send_method(AMQPClass::Connection(connection::AMQPMethod::StartOk(
            connection::StartOk {
                client_properties: properties,
                mechanism: "PLAIN".into(),
                response: response.as_str().into(),
                locale: "en_US".into(),
            },
        )))
        .await?;
        let AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) = self.next_method().await?
        else {
            bail!("expected connection.tune (wrong credentials?)");
        };
        self.frame_max = match tune.frame_max {
            0 => FRAME_MAX_WANTED,
            server => server.min(FRAME_MAX_WANTED),
        };
        self.send_method(AMQPClass::Connection(connection::AMQPMethod::TuneOk(
            connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: self.frame_max,
                heartbeat: 0,
            },
        )))
        .await?;
        let vhost = short(&uri.vhost)?;
        let reply = self
            .rpc_on(
                0,
                AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                    virtual_host: vhost,
                })),
            )
            .await?;
        match reply {
            AMQPClass::Connection(connection::AMQPMethod::OpenOk(_)) => Ok(()),
            other => bail!("expected connection.open-ok, got {other:?}"),
        }
    }

    /// Encodes and writes one frame.
    pub async fn send(&mut self, frame: &AMQPFrame) -> Result<()> {
        let mut out = Vec::new();
        wire::encode(frame, &mut out)?;
        self.stream.write_all(&out).await?;
        Ok(())
    }

    async fn send_method(&mut self, method: AMQPClass) -> Result<()> {
        let channel = match method {
            AMQPClass::Connection(_) => 0,
            _ => CHANNEL,
        };
        self.send(&AMQPFrame::Method(channel, method)).await
    }

    /// Reads more bytes into the buffer; an orderly close by the peer is an error here.
    pub async fn fill(&mut self) -> Result<()> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_BUFFER_BYTES / 4 {
            self.rbuf.reserve(READ_BUFFER_BYTES);
        }
        if self.stream.read_buf(&mut self.rbuf).await? == 0 {
            bail!("the broker closed the connection");
        }
        Ok(())
    }

    /// The next method frame (any channel), skipping heartbeats. Content frames are unexpected
    /// on this slow path and are an error. A close from the broker becomes an error naming its
    /// reply code and text.
    pub async fn next_method(&mut self) -> Result<AMQPClass> {
        loop {
            let Some((RawFrame { kind, payload, .. }, used)) =
                wire::split_frame(&self.rbuf, self.frame_max)?
            else {
                self.fill().await?;
                continue;
            };
            let decoded = match kind {
                FRAME_METHOD => Some(wire::decode_method(payload)?),
                FRAME_HEARTBEAT => None,
                other => bail!("unexpected frame type {other} during setup"),
            };
            self.rbuf.advance(used);
            if let Some(method) = decoded {
                return check_close(method);
            }
        }
    }

    async fn rpc_on(&mut self, channel: u16, method: AMQPClass) -> Result<AMQPClass> {
        self.send(&AMQPFrame::Method(channel, method)).await?;
        self.next_method().await
    }

    /// Sends a method on [`CHANNEL`] and returns the broker's reply.
    pub async fn rpc(&mut self, method: AMQPClass) -> Result<AMQPClass> {
        self.rpc_on(CHANNEL, method).await
    }

    /// queue.declare; returns (message count, consumer count).
    pub async fn queue_declare(
        &mut self,
        name: &str,
        durable: bool,
        passive: bool,
        arguments: FieldTable,
    ) -> Result<(u32, u32)> {
        let reply = self
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Declare(
                queue::Declare {
                    queue: short(name)?,
                    passive,
                    durable,
                    exclusive: false,
                    auto_delete: false,
                    nowait: false,
                    arguments,
                },
            )))
            .await
            .with_context(|| format!("declaring queue {name:?}"))?;
        match reply {
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => {
                Ok((ok.message_count, ok.consumer_count))
            }
            other => bail!("expected queue.declare-ok, got {other:?}"),
        }
    }

    /// queue.purge; returns the number of messages purged.
    pub async fn queue_purge(&mut self, name: &str) -> Result<u32> {
        let reply = self
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge {
                queue: short(name)?,
                nowait: false,
            })))
            .await?;
        match reply {
            AMQPClass::Queue(queue::AMQPMethod::PurgeOk(ok)) => Ok(ok.message_count),
            other => bail!("expected queue.purge-ok, got {other:?}"),
        }
    }

    /// queue.delete (unconditional).
    pub async fn queue_delete(&mut self, name: &str) -> Result<()> {
        self.rpc(AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
            queue: short(name)?,
            if_unused: false,
            if_empty: false,
            nowait: false,
        })))
        .await?;
        Ok(())
    }

    /// exchange.declare.
    pub async fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<()> {
        self.rpc(AMQPClass::Exchange(exchange::AMQPMethod::Declare(
            exchange::Declare {
                exchange: short(name)?,
                kind: short(kind)?,
                passive: false,
                durable,
                auto_delete: false,
                internal: false,
                nowait: false,
                arguments: FieldTable::default(),
            },
        )))
        .await?;
        Ok(())
    }

    /// exchange.delete.
    pub async fn exchange_delete(&mut self, name: &str) -> Result<()> {
        self.rpc(AMQPClass::Exchange(exchange::AMQPMethod::Delete(
            exchange::Delete {
                exchange: short(name)?,
                if_unused: false,
                nowait: false,
            },
        )))
        .await?;
        Ok(())
    }

    /// queue.bind.
    pub async fn queue_bind(&mut self, queue_name: &str, exchange_name: &str) -> Result<()> {
        self.rpc(AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
            queue: short(queue_name)?,
            exchange: short(exchange_name)?,
            routing_key: "".into(),
            nowait: false,
            arguments: FieldTable::default(),
        })))
        .await?;
        Ok(())
    }

    /// confirm.select.
    pub async fn confirm_select(&mut self) -> Result<()> {
        self.rpc(AMQPClass::Confirm(confirm::AMQPMethod::Select(
            confirm::Select { nowait: false },
        )))
        .await?;
        Ok(())
    }

    /// basic.qos (per consumer).
    pub async fn basic_qos(&mut self, prefetch_count: u16) -> Result<()> {
        self.rpc(AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count,
            global: false,
        })))
        .await?;
        Ok(())
    }

    /// basic.consume; returns once consume-ok arrived (deliveries may follow at once).
    pub async fn basic_consume(&mut self, queue_name: &str, no_ack: bool) -> Result<()> {
        let reply = self
            .rpc(AMQPClass::Basic(basic::AMQPMethod::Consume(
                basic::Consume {
                    queue: short(queue_name)?,
                    consumer_tag: "".into(),
                    no_local: false,
                    no_ack,
                    exclusive: false,
                    nowait: false,
                    arguments: FieldTable::default(),
                },
            )))
            .await?;
        match reply {
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_)) => Ok(()),
            other => bail!("expected basic.consume-ok, got {other:?}"),
        }
    }

    /// Sends connection.close and waits (briefly) for close-ok, discarding whatever arrives
    /// meanwhile. Waiting for close-ok means the broker has handled everything sent before.
    pub async fn close(mut self) -> Result<()> {
        self.send_method(AMQPClass::Connection(connection::AMQPMethod::Close(
            connection::Close {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        )))
        .await?;
        let wait = async {
            loop {
                while let Some((frame, used)) = wire::split_frame(&self.rbuf, self.frame_max)? {
                    let is_close_ok = frame.kind == FRAME_METHOD
                        && frame.channel == 0
                        && matches!(
                            wire::decode_method(frame.payload),
                            Ok(AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))
                        );
                    self.rbuf.advance(used);
                    if is_close_ok {
                        return Ok::<(), anyhow::Error>(());
                    }
                }
                self.fill().await?;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), wait)
            .await
            .map_err(|_| anyhow!("no connection.close-ok within 10 s"))?
    }
}

/// Turns a broker-initiated channel.close or connection.close into an error.
pub fn check_close(method: AMQPClass) -> Result<AMQPClass> {
    match method {
        AMQPClass::Channel(channel::AMQPMethod::Close(close)) => Err(anyhow!(
            "the broker closed the channel: {} {}",
            close.reply_code,
            close.reply_text
        )),
        AMQPClass::Connection(connection::AMQPMethod::Close(close)) => Err(anyhow!(
            "the broker closed the connection: {} {}",
            close.reply_code,
            close.reply_text
        )),
        other => Ok(other),
    }
}
