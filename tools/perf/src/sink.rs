//! A null broker for measuring the generator's own ceiling: it speaks just enough AMQP 0-9-1
//! (handshake, channel.open, declare/purge/delete/qos/confirm.select replies) to accept
//! publishes, confirm them with one `multiple` ack per read, and push synthetic deliveries to
//! consumers as fast as their prefetch and TCP allow. It stores and routes nothing, so whatever
//! rate wharf-perf reaches against it is the generator's limit (on a machine it shares with the
//! sink). Also the peer of the end-to-end tests of the client code. Depends on `wire` and tokio.

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::{
    AMQPClass, BasicProperties, basic, channel, confirm, connection, queue,
};
use amq_protocol::types::FieldTable;
use anyhow::{Context, Result, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::clock::wall_us;
use crate::wire::{self, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD};

/// The frame-max the sink offers.
const FRAME_MAX: u32 = 128 * 1024;
/// Largest burst of deliveries written at once.
const OUT_BYTES_MAX: usize = 256 * 1024;
const CONSUMER_TAG: &str = "sink";

/// Serves connections on `listener` until the task is dropped. `size_bytes` is the body size
/// of the synthetic deliveries.
pub async fn serve(listener: TcpListener, size_bytes: usize) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            if let Err(e) = SinkConnection::new(stream, size_bytes).run().await {
                eprintln!("sink connection: {e:#}");
            }
        });
    }
}

/// The consumer side of a sink connection.
struct Consumer {
    no_ack: bool,
    next_tag: u64,
    acked_upto: u64,
    /// Deliver method frame (with tag 0) and content header, encoded once.
    prefix: Vec<u8>,
    /// Where the 8-byte delivery tag sits in `prefix`.
    tag_at: usize,
    body: Vec<u8>,
}

struct SinkConnection {
    stream: TcpStream,
    rbuf: BytesMut,
    out: Vec<u8>,
    size_bytes: usize,
    confirm: bool,
    /// Publishes fully received (the confirm sequence number).
    published: u64,
    confirmed: u64,
    /// Body bytes still expected for the publish being received, once its header arrived.
    publish_remaining: Option<u64>,
    prefetch: u16,
    consumer: Option<Consumer>,
    closing: bool,
}

fn method(channel: u16, class: AMQPClass, out: &mut Vec<u8>) -> Result<()> {
    wire::encode(&AMQPFrame::Method(channel, class), out)
}

impl SinkConnection {
    fn new(stream: TcpStream, size_bytes: usize) -> Self {
        Self {
            stream,
            rbuf: BytesMut::with_capacity(256 * 1024),
            out: Vec::with_capacity(OUT_BYTES_MAX * 2),
            size_bytes,
            confirm: false,
            published: 0,
            confirmed: 0,
            publish_remaining: None,
            prefetch: 0,
            consumer: None,
            closing: false,
        }
    }

    async fn run(mut self) -> Result<()> {
        let mut header = [0u8; 8];
        self.stream.read_exact(&mut header).await?;
        if &header != b"AMQP\x00\x00\x09\x01" {
            bail!("not an AMQP 0-9-1 client");
        }
        let mut server_properties = FieldTable::default();
        server_properties.insert(
            "product".into(),
            amq_protocol::types::AMQPValue::LongString("wharf-perf sink".into()),
        );
        method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
                version_major: 0,
                version_minor: 9,
                server_properties,
                mechanisms: "PLAIN".into(),
                locales: "en_US".into(),
            })),
            &mut self.out,
        )?;
        while !self.closing {
            self.handle_frames()?;
            if self.confirm && self.published > self.confirmed {
                wire::push_ack(&mut self.out, 1, self.published, true);
                self.confirmed = self.published;
            }
            let can_deliver = self.push_deliveries();
            if !self.out.is_empty() {
                self.stream.write_all(&self.out).await?;
                self.out.clear();
            }
            if self.closing {
                break;
            }
            if can_deliver {
                // More to deliver: take whatever has arrived without waiting for it.
                match self.stream.try_read_buf(&mut self.rbuf) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            } else {
                if self.rbuf.capacity() - self.rbuf.len() < 64 * 1024 {
                    self.rbuf.reserve(256 * 1024);
                }
                if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn handle_frames(&mut self) -> Result<()> {
        while let Some((frame, used)) = wire::split_frame(&self.rbuf, FRAME_MAX)? {
            match (frame.kind, self.publish_remaining) {
                (FRAME_METHOD, None) => {
                    if let Some(ack) = wire::fast_confirm(frame.payload) {
                        if let Some(consumer) = &mut self.consumer {
                            consumer.acked_upto = consumer.acked_upto.max(ack.tag);
                        }
                    } else {
                        let class = wire::decode_method(frame.payload)?;
                        self.on_method(frame.channel, class)?;
                    }
                }
                (FRAME_HEADER, None) => {
                    let size = wire::header_body_size(frame.payload).context("short header")?;
                    if size == 0 {
                        self.published += 1;
                    } else {
                        self.publish_remaining = Some(size);
                    }
                }
                (FRAME_BODY, Some(remaining)) => {
                    let left = remaining
                        .checked_sub(frame.payload.len() as u64)
                        .context("body longer than announced")?;
                    if left == 0 {
                        self.published += 1;
                        self.publish_remaining = None;
                    } else {
                        self.publish_remaining = Some(left);
                    }
                }
                (FRAME_HEARTBEAT, _) => {}
                (kind, _) => bail!("unexpected frame type {kind}"),
            }
            self.rbuf.advance(used);
        }
        Ok(())
    }

    fn on_method(&mut self, ch: u16, class: AMQPClass) -> Result<()> {
        use AMQPClass::{Basic, Channel, Confirm, Connection, Queue};
        let reply = match class {
            Connection(connection::AMQPMethod::StartOk(_)) => {
                Connection(connection::AMQPMethod::Tune(connection::Tune {
                    channel_max: 16,
                    frame_max: FRAME_MAX,
                    heartbeat: 0,
                }))
            }
            // Nothing to answer: tune-ok ends the negotiation; a publish's content follows.
            Connection(connection::AMQPMethod::TuneOk(_))
            | Basic(basic::AMQPMethod::Publish(_)) => {
                return Ok(());
            }
            Connection(connection::AMQPMethod::Open(_)) => {
                Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {}))
            }
            Connection(connection::AMQPMethod::Close(_)) => {
                self.closing = true;
                Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}))
            }
            Channel(channel::AMQPMethod::Open(_)) => {
                Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {}))
            }
            Confirm(confirm::AMQPMethod::Select(_)) => {
                self.confirm = true;
                Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {}))
            }
            Queue(queue::AMQPMethod::Declare(declare)) => {
                Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                    queue: declare.queue,
                    message_count: 0,
                    consumer_count: 0,
                }))
            }
            Queue(queue::AMQPMethod::Purge(_)) => {
                Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                    message_count: 0,
                }))
            }
            Queue(queue::AMQPMethod::Delete(_)) => {
                Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                    message_count: 0,
                }))
            }
            Basic(basic::AMQPMethod::Qos(qos)) => {
                self.prefetch = qos.prefetch_count;
                Basic(basic::AMQPMethod::QosOk(basic::QosOk {}))
            }
            Basic(basic::AMQPMethod::Consume(consume)) => {
                self.consumer = Some(self.new_consumer(ch, consume.no_ack)?);
                Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                    consumer_tag: CONSUMER_TAG.into(),
                }))
            }
            other => bail!("the sink does not handle {other:?}"),
        };
        let channel = if matches!(reply, Connection(_)) {
            0
        } else {
            ch
        };
        method(channel, reply, &mut self.out)
    }

    fn new_consumer(&self, ch: u16, no_ack: bool) -> Result<Consumer> {
        let mut prefix = Vec::new();
        method(
            ch,
            AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                consumer_tag: CONSUMER_TAG.into(),
                delivery_tag: 0,
                redelivered: false,
                exchange: "".into(),
                routing_key: "sink".into(),
            })),
            &mut prefix,
        )?;
        // Frame head (7), class and method ids (4), consumer tag as a short string.
        let tag_at = wire::FRAME_HEAD_BYTES + 4 + 1 + CONSUMER_TAG.len();
        wire::encode(
            &AMQPFrame::Header(
                ch,
                AMQPContentHeader {
                    class_id: 60,
                    body_size: self.size_bytes as u64,
                    properties: BasicProperties::default(),
                },
            ),
            &mut prefix,
        )?;
        let mut body_frame = Vec::new();
        wire::encode(
            &AMQPFrame::Body(ch, vec![0; self.size_bytes]),
            &mut body_frame,
        )?;
        Ok(Consumer {
            no_ack,
            next_tag: 1,
            acked_upto: 0,
            prefix,
            tag_at,
            body: body_frame,
        })
    }

    /// Appends deliveries while the consumer's prefetch allows; says whether it could go on.
    fn push_deliveries(&mut self) -> bool {
        let prefetch = u64::from(self.prefetch);
        let Some(consumer) = &mut self.consumer else {
            return false;
        };
        loop {
            let unacked = consumer.next_tag - 1 - consumer.acked_upto;
            let room = consumer.no_ack || prefetch == 0 || unacked < prefetch;
            if !room {
                return false;
            }
            if self.out.len() >= OUT_BYTES_MAX {
                return true;
            }
            let start = self.out.len();
            self.out.extend_from_slice(&consumer.prefix);
            let tag_at = start + consumer.tag_at;
            if let Some(slot) = self.out.get_mut(tag_at..tag_at + 8) {
                slot.copy_from_slice(&consumer.next_tag.to_be_bytes());
            }
            let body_at = self.out.len() + wire::FRAME_HEAD_BYTES;
            self.out.extend_from_slice(&consumer.body);
            if let Some(body) = self.out.get_mut(body_at..) {
                wire::stamp(body, wall_us());
            }
            consumer.next_tag += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{self, Command};
    use crate::run;

    async fn sink() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, 100));
        format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
    }

    fn config(flags: &str) -> args::RunConfig {
        let argv: Vec<String> = flags.split_whitespace().map(str::to_owned).collect();
        let Command::Run(config) = args::parse(&argv).unwrap() else {
            panic!("not a run");
        };
        config
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishers_get_every_message_confirmed_and_consumers_ack_all() {
        let uri = sink().await;
        let config = config(&format!(
            "--uri {uri} -x 2 -y 2 -s 3000 -f -c 64 -q 100 -A 10 -C 5000 -D 5000 --purge-after"
        ));
        let totals = run::run(config).await.unwrap();
        assert_eq!(totals.published, 10_000);
        assert_eq!(totals.nacked, 0);
        assert_eq!(totals.consumed, 10_000);
        assert_eq!(
            totals.consumed_bytes,
            10_000 * 100,
            "the sink's bodies are 100 bytes"
        );
        assert_eq!(totals.latency_us.count(), 10_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishing_without_confirms_and_auto_ack_consuming_finish() {
        let uri = sink().await;
        // 200,000-byte bodies span two body frames at frame-max 128 KiB.
        let config = config(&format!("--uri {uri} -x 1 -y 1 -s 200000 -a -C 50 -D 3000"));
        let totals = run::run(config).await.unwrap();
        assert_eq!(totals.published, 50);
        assert_eq!(totals.consumed, 3000);
    }
}
