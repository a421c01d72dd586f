//! The expiry scenario: publish messages whose own TTL (`expiration`) is short or long, shuffled,
//! into a queue with a dead-letter exchange, then poll both queues' counts (queue.declare
//! passive) until the dead-letter queue holds every short one and the source queue only the long
//! ones, or a bounded wait runs out. RabbitMQ expires only at the head of a queue, so short
//! messages behind a long one stay; wharf promises removal wherever they sit (S-TTL-9, S-DLX).
//! Depends on `client`, `wire`, `clock`.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use anyhow::{Result, bail};
use bytes::Buf;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::args::TtlMixConfig;
use crate::client::{CHANNEL, Connection, check_close};
use crate::clock::{Stopwatch, wall_us};
use crate::rng::SplitMix64;
use crate::run::ConfirmTracker;
use crate::wire::{self, FRAME_HEARTBEAT, FRAME_METHOD, PublishTemplate};

/// What the TTL scenario observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TtlMixReport {
    /// Messages published (all confirmed).
    pub messages: u64,
    /// Of which short-lived.
    pub short: u64,
    /// Of which long-lived.
    pub long: u64,
    /// Seconds from the first publish to the last confirm.
    pub publish_s: f64,
    /// Dead-letter queue count at the last poll.
    pub dead_lettered: u64,
    /// Source queue count at the last poll.
    pub source_left: u64,
    /// Milliseconds after the last confirm at which both queues held exactly what they should;
    /// `None` if that did not happen within the wait.
    pub settled_after_ms: Option<f64>,
    /// The bounded wait, in seconds.
    pub wait_s: f64,
}

impl TtlMixReport {
    /// Human-readable text.
    pub fn to_text(&self) -> String {
        let settled = self.settled_after_ms.map_or_else(
            || format!("NOT settled within {:.1} s", self.wait_s),
            |ms| format!("settled {ms:.0} ms after the last publish"),
        );
        format!(
            "ttl-mix: {} messages ({} short, {} long) published in {:.2} s; \
             dead-lettered {} of {} short, source holds {} (expect {}); {settled}\n",
            self.messages,
            self.short,
            self.long,
            self.publish_s,
            self.dead_lettered,
            self.short,
            self.source_left,
            self.long
        )
    }
}

/// Exactly `messages / 2` `true`s (short-lived) and the rest `false`, in a seeded random order.
pub fn shuffled_kinds(messages: u64, seed: u64) -> Vec<bool> {
    let short = messages / 2;
    let mut kinds: Vec<bool> = (0..messages).map(|i| i < short).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..kinds.len()).rev() {
        let j = usize::try_from(rng.next() % (i as u64 + 1)).unwrap_or(0);
        kinds.swap(i, j);
    }
    kinds
}

async fn declare_topology(conn: &mut Connection, config: &TtlMixConfig) -> Result<()> {
    conn.exchange_declare(&config.dlx, "fanout", config.persistent)
        .await?;
    conn.queue_delete(&config.dlq).await?;
    conn.queue_declare(&config.dlq, config.persistent, false, FieldTable::default())
        .await?;
    conn.queue_bind(&config.dlq, &config.dlx).await?;
    conn.queue_delete(&config.queue).await?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from(config.dlx.as_bytes())),
    );
    conn.queue_declare(&config.queue, config.persistent, false, arguments)
        .await?;
    Ok(())
}

fn template(config: &TtlMixConfig, ttl_ms: u64, frame_max: u32) -> Result<PublishTemplate> {
    let mut properties = BasicProperties::default().with_expiration(ttl_ms.to_string().into());
    if config.persistent {
        properties = properties.with_delivery_mode(2);
    }
    PublishTemplate::new(
        CHANNEL,
        &config.queue,
        properties,
        config.size_bytes,
        frame_max,
    )
}

/// Publishes `kinds` with confirms, at most `window` outstanding, in lockstep (write a batch,
/// read confirms). Returns once every message is confirmed.
async fn publish_all(conn: &mut Connection, config: &TtlMixConfig, kinds: &[bool]) -> Result<()> {
    let short = template(config, config.short_ms, conn.frame_max)?;
    let long = template(config, config.long_ms, conn.frame_max)?;
    let mut body = vec![0u8; config.size_bytes];
    let window = u64::from(config.confirm_window);
    let total = kinds.len() as u64;
    let mut tracker = ConfirmTracker::default();
    let mut out = Vec::new();
    let mut next = 0usize;
    while tracker.settled() < total {
        let sent = next as u64;
        let room = window.saturating_sub(sent - tracker.settled());
        for &is_short in kinds.iter().skip(next).take(usize::try_from(room)?) {
            wire::stamp(&mut body, wall_us());
            if is_short { &short } else { &long }.push(&mut out, &body);
            next += 1;
        }
        if !out.is_empty() {
            conn.stream.write_all(&out).await?;
            out.clear();
        }
        conn.fill().await?;
        while let Some((frame, used)) = wire::split_frame(&conn.rbuf, conn.frame_max)? {
            match frame.kind {
                FRAME_METHOD => match wire::fast_confirm(frame.payload) {
                    Some(c) if c.nack => bail!("the broker nacked publish {}", c.tag),
                    Some(c) => {
                        tracker.settle(c.tag, c.multiple);
                    }
                    None => {
                        check_close(wire::decode_method(frame.payload)?)?;
                    }
                },
                FRAME_HEARTBEAT => {}
                other => bail!("unexpected frame type {other} on the publisher"),
            }
            conn.rbuf.advance(used);
        }
    }
    Ok(())
}

/// Runs the scenario.
pub async fn ttl_mix(config: TtlMixConfig) -> Result<TtlMixReport> {
    let mut admin = Connection::open(&config.uri).await?;
    declare_topology(&mut admin, &config).await?;
    let mut publisher = Connection::open(&config.uri).await?;
    publisher.confirm_select().await?;
    let kinds = shuffled_kinds(config.messages, config.seed);
    let short = kinds.iter().filter(|&&k| k).count() as u64;
    let long = config.messages - short;

    let clock = Stopwatch::start();
    publish_all(&mut publisher, &config, &kinds).await?;
    let published_at = clock.elapsed();
    publisher.close().await?;

    let mut report = TtlMixReport {
        messages: config.messages,
        short,
        long,
        publish_s: published_at.as_secs_f64(),
        dead_lettered: 0,
        source_left: 0,
        settled_after_ms: None,
        wait_s: config.wait.as_secs_f64(),
    };
    loop {
        let (source, _) = admin
            .queue_declare(&config.queue, false, true, FieldTable::default())
            .await?;
        let (dead, _) = admin
            .queue_declare(&config.dlq, false, true, FieldTable::default())
            .await?;
        let since_publish = clock.elapsed().saturating_sub(published_at);
        report.source_left = u64::from(source);
        report.dead_lettered = u64::from(dead);
        if report.source_left == long && report.dead_lettered == short {
            report.settled_after_ms = Some(since_publish.as_secs_f64() * 1000.0);
            break;
        }
        if since_publish >= config.wait {
            break;
        }
        let left = config.wait.saturating_sub(since_publish);
        tokio::time::sleep(config.poll.min(left)).await;
    }
    if !config.keep {
        admin.queue_delete(&config.queue).await?;
        admin.queue_delete(&config.dlq).await?;
        admin.exchange_delete(&config.dlx).await?;
    }
    admin.close().await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_has_exactly_half_short_and_depends_on_the_seed() {
        let a = shuffled_kinds(1001, 1);
        assert_eq!(a.len(), 1001);
        assert_eq!(a.iter().filter(|&&k| k).count(), 500);
        assert_eq!(a, shuffled_kinds(1001, 1), "same seed, same order");
        assert_ne!(a, shuffled_kinds(1001, 2));
        // Mixed, not sorted: both kinds appear in the first tenth.
        let head = &a[..100];
        assert!(head.iter().any(|&k| k) && head.iter().any(|&k| !k));
    }

    #[test]
    fn report_text_says_whether_it_settled() {
        let mut report = TtlMixReport {
            messages: 10,
            short: 5,
            long: 5,
            publish_s: 0.5,
            dead_lettered: 1,
            source_left: 9,
            settled_after_ms: None,
            wait_s: 5.0,
        };
        assert!(report.to_text().contains("NOT settled within 5.0 s"));
        report.settled_after_ms = Some(120.0);
        assert!(report.to_text().contains("settled 120 ms after"));
    }
}
