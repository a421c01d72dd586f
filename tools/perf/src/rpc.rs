//! The RPC scenario (S-DRT): `--callers` client connections each consume
//! `amq.rabbitmq.reply-to` with no-ack and send one request at a time to a queue, with
//! `reply_to` set to the pseudo-queue; one responder connection consumes that queue (no-ack) and
//! publishes each request's body back to its `reply_to`. Reports round trips per second and
//! round-trip latency percentiles. Works against RabbitMQ the same way. Depends on `client`,
//! `wire`, `clock`, `histogram`.

use std::time::Duration;

use amq_protocol::frame::{AMQPFrame, parse_frame};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use amq_protocol::types::FieldTable;
use anyhow::{Context, Result, anyhow, bail};
use bytes::Buf;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::client::{CHANNEL, Connection};
use crate::clock::{Stopwatch, wall_us};
use crate::histogram::Histogram;
use crate::wire::{self, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD};

/// The direct reply-to pseudo-queue.
const PSEUDO: &str = "amq.rabbitmq.reply-to";

/// What `wharf-perf rpc` was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcConfig {
    /// Broker URI.
    pub uri: String,
    /// Concurrent callers (one connection each), one request outstanding per caller.
    pub callers: usize,
    /// How long to run.
    pub duration: Duration,
    /// Request and reply body size.
    pub size_bytes: usize,
    /// Queue the responder consumes.
    pub queue: String,
    /// Print JSON.
    pub json: bool,
}

/// Parses the options after `rpc`.
pub fn parse(args: &[String]) -> Result<RpcConfig> {
    let mut config = RpcConfig {
        uri: crate::args::DEFAULT_URI.to_owned(),
        callers: 1,
        duration: Duration::from_secs(10),
        size_bytes: 16,
        queue: "wharf-perf-rpc".to_owned(),
        json: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value"))
                .cloned()
        };
        match flag.as_str() {
            "--uri" => config.uri = value()?,
            "--callers" => config.callers = value()?.parse().context("--callers")?,
            "--time" | "-z" => {
                config.duration = Duration::from_secs(value()?.parse().context("--time")?);
            }
            "--size" | "-s" => config.size_bytes = value()?.parse().context("--size")?,
            "--queue" => config.queue = value()?,
            "--json" => config.json = true,
            other => bail!("unknown rpc option {other:?} (try --help)"),
        }
    }
    if config.callers == 0 || config.callers > 1024 {
        bail!("--callers must be 1 to 1024");
    }
    Ok(config)
}

/// What the RPC scenario measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RpcReport {
    /// Concurrent callers.
    pub callers: usize,
    /// Round trips completed.
    pub round_trips: u64,
    /// Round trips per second over the run.
    pub per_second: f64,
    /// Round-trip latency percentiles, microseconds.
    pub p50_us: Option<u64>,
    /// 99th percentile.
    pub p99_us: Option<u64>,
}

impl RpcReport {
    /// Human-readable text.
    pub fn to_text(&self) -> String {
        format!(
            "rpc: {} callers, {} round trips, {:.0}/s, p50 {:?} us, p99 {:?} us\n",
            self.callers, self.round_trips, self.per_second, self.p50_us, self.p99_us
        )
    }
}

/// Runs the scenario.
///
/// # Errors
/// A connection or protocol failure of any caller or of the responder.
pub async fn rpc(config: RpcConfig) -> Result<RpcReport> {
    let mut responder = Connection::open(&config.uri).await?;
    responder
        .queue_declare(&config.queue, false, false, FieldTable::default())
        .await?;
    responder.basic_consume(&config.queue, true).await?;
    let serve = tokio::spawn(respond(responder));
    let clock = Stopwatch::start();
    let mut callers = Vec::new();
    for _ in 0..config.callers {
        callers.push(tokio::spawn(call(config.clone())));
    }
    let mut latencies = Histogram::default();
    for caller in callers {
        latencies.merge(&caller.await??);
    }
    let seconds = clock.elapsed().as_secs_f64();
    serve.abort();
    let round_trips = latencies.count();
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let per_second = round_trips as f64 / seconds.max(f64::EPSILON);
    Ok(RpcReport {
        callers: config.callers,
        round_trips,
        per_second,
        p50_us: latencies.percentile(50.0),
        p99_us: latencies.percentile(99.0),
    })
}

/// One caller: requests one at a time until the run's time is up.
async fn call(config: RpcConfig) -> Result<Histogram> {
    let mut conn = Connection::open(&config.uri).await?;
    conn.basic_consume(PSEUDO, true).await?;
    let props = BasicProperties::default().with_reply_to(PSEUDO.into());
    let template = wire::PublishTemplate::new(
        CHANNEL,
        &config.queue,
        props,
        config.size_bytes,
        conn.frame_max,
    )?;
    let mut body = vec![0u8; config.size_bytes];
    let mut latencies = Histogram::default();
    let clock = Stopwatch::start();
    let mut out = Vec::new();
    while clock.elapsed() < config.duration {
        let sent = wall_us();
        out.clear();
        template.push(&mut out, &body);
        conn.stream.write_all(&out).await?;
        let (_, reply) = next_delivery(&mut conn).await?;
        latencies.record(wall_us().saturating_sub(sent));
        body = reply;
    }
    Ok(latencies)
}

/// The responder: each request's body goes back to its `reply_to`.
async fn respond(mut conn: Connection) -> Result<()> {
    let mut out = Vec::new();
    loop {
        let (props, body) = next_delivery(&mut conn).await?;
        let Some(reply_to) = props.reply_to() else {
            bail!("a request without reply_to");
        };
        let template = wire::PublishTemplate::new(
            CHANNEL,
            reply_to.as_str(),
            BasicProperties::default(),
            body.len(),
            conn.frame_max,
        )?;
        out.clear();
        template.push(&mut out, &body);
        conn.stream.write_all(&out).await?;
    }
}

/// The next delivery's properties and body (a `basic.deliver`, its header, its body frames).
async fn next_delivery(conn: &mut Connection) -> Result<(BasicProperties, Vec<u8>)> {
    let mut props = None;
    let mut body = Vec::new();
    let mut size = None;
    loop {
        let Some((frame, used)) = wire::split_frame(&conn.rbuf, conn.frame_max)? else {
            conn.fill().await?;
            continue;
        };
        match frame.kind {
            FRAME_METHOD => {
                let method = wire::decode_method(frame.payload)?;
                if !matches!(method, AMQPClass::Basic(basic::AMQPMethod::Deliver(_))) {
                    crate::client::check_close(method)?;
                }
            }
            FRAME_HEADER => {
                let raw = conn.rbuf.get(..used).unwrap_or_default();
                let Ok((_, AMQPFrame::Header(_, header))) = parse_frame(raw) else {
                    bail!("undecodable content header");
                };
                size = Some(usize::try_from(header.body_size)?);
                props = Some(header.properties);
            }
            FRAME_BODY => body.extend_from_slice(frame.payload),
            FRAME_HEARTBEAT => {}
            other => bail!("unexpected frame type {other}"),
        }
        conn.rbuf.advance(used);
        if let (Some(p), Some(size)) = (&props, size)
            && body.len() >= size
        {
            return Ok((p.clone(), body));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn rpc_options_parse_and_bad_ones_are_refused() {
        let c = parse(&argv("--callers 16 --time 30 --size 64 --json")).unwrap();
        assert_eq!(c.callers, 16);
        assert_eq!(c.duration, Duration::from_secs(30));
        assert_eq!(c.size_bytes, 64);
        assert!(c.json);
        assert_eq!(parse(&[]).unwrap().callers, 1);
        assert!(parse(&argv("--callers 0")).is_err());
        assert!(parse(&argv("--callers")).is_err());
        assert!(parse(&argv("--bogus 1")).is_err());
    }
}
