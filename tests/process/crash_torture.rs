//! Crash torture of the real `wharf` binary (S-DUR-3/4/5/6, S-DLX-7): rounds of load, each
//! ended by a SIGKILL (by the pid we spawned) at a random moment, then a restart on the same
//! data directory and an exact check of what came back.
//!
//! Load per round: two publishers with confirms (persistent messages, durable queues, a
//! unique `message_id` each) into `src` (consumed) and `ttl` (no consumer, per-message TTLs
//! of 20-400 ms, dead-lettered on expiry); a consumer of `src` that acks most messages and
//! rejects one in five with requeue=false (dead-lettered); a consumer of `dlq` that acks
//! everything. After the restart the checker drains `ttl`, `src` and `dlq` and checks:
//!
//! - every confirmed message is in exactly one queue, or in none only if a consumer acked it
//!   (never lost, never duplicated: a dead-lettered message is never both in its source
//!   and in the DLQ, S-DLX-7);
//! - a message a consumer has seen comes back only with `redelivered=true` (S-DUR-6; an
//!   acked message may come back, S-DUR-4, but never as new);
//! - a message a consumer saw in the DLQ is never back in its source queue (S-DLX-7: the
//!   delivery from the DLQ was released only once the dead-lettering was durable);
//! - a message is in the DLQ only for a reason it can have (rejected by us, or expired);
//! - recovery always succeeds (the broker prints its start line).
//!
//! Bounded by time and rounds: `WHARF_TORTURE_SECS` (default 45) and at most 1000 rounds.
//! The seed is printed (`WHARF_TORTURE_SEED` replays the kill moments). `WHARF_TORTURE_BIN`
//! runs another build of the binary (e.g. an older one, to see what the checks catch).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::binary;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use binary::Broker;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const ROUNDS_MAX: u32 = 1_000;
const SECS_DEFAULT: u64 = 45;
const PUBLISHERS: u32 = 2;
/// Publisher confirms outstanding per publisher.
const CONFIRM_WINDOW: usize = 64;

#[expect(
    clippy::disallowed_methods,
    reason = "the torture bounds its real running time"
)]
fn now() -> Instant {
    Instant::now()
}

/// xorshift64*: enough randomness for kill moments and choices, replayable from a seed.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Into `src`: consumed, acked or rejected.
    Src,
    /// Into `ttl`: expires into `dlq`.
    Ttl,
}

/// What the clients did in one round, for the checker.
#[derive(Debug, Default)]
struct Model {
    published: HashMap<String, Kind>,
    confirmed: HashSet<String>,
    /// Seen by the `src` consumer / the `dlq` consumer.
    seen_src: HashSet<String>,
    seen_dlq: HashSet<String>,
    /// Acks we sent (or were about to send), from either consumer.
    acked: HashSet<String>,
    /// Rejects (requeue=false) we sent or were about to send.
    rejected: HashSet<String>,
    violations: Vec<String>,
}

type Shared = Arc<Mutex<Model>>;

fn dlx_args() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from("dlq")),
    );
    args
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

async fn connect(url: &str) -> Option<(Connection, Channel)> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .ok()?;
    let ch = conn.create_channel().await.ok()?;
    Some((conn, ch))
}

fn message_id(d: &lapin::message::Delivery) -> String {
    d.properties
        .message_id()
        .as_ref()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default()
}

fn death_reason(d: &lapin::message::Delivery) -> String {
    let headers = d.properties.headers().as_ref();
    match headers.and_then(|h| h.inner().get("x-first-death-reason")) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Some(AMQPValue::ShortString(s)) => s.as_str().to_owned(),
        other => format!("{other:?}"),
    }
}

/// Publishes until the connection dies, recording every publish and confirm.
async fn publisher(url: String, round: u32, p: u32, seed: u64, model: Shared) {
    let Some((_conn, ch)) = connect(&url).await else {
        return;
    };
    if ch
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .is_err()
    {
        return;
    }
    let mut rng = Rng(seed | 1);
    let mut window = VecDeque::new();
    for i in 0u64.. {
        let id = format!("r{round}-p{p}-{i}");
        let kind = if rng.below(5) == 0 {
            Kind::Ttl
        } else {
            Kind::Src
        };
        let mut props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(id.clone().into());
        let queue = match kind {
            Kind::Src => "src",
            Kind::Ttl => {
                let ttl_ms = 20 + rng.below(380);
                props = props.with_expiration(ttl_ms.to_string().into());
                "ttl"
            }
        };
        model.lock().unwrap().published.insert(id.clone(), kind);
        let Ok(confirm) = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                id.as_bytes(),
                props,
            )
            .await
        else {
            return;
        };
        window.push_back((id, confirm));
        if window.len() >= CONFIRM_WINDOW {
            let (id, confirm) = window.pop_front().unwrap();
            match confirm.await {
                Ok(c) if c.is_ack() => {
                    model.lock().unwrap().confirmed.insert(id);
                }
                Ok(_) => model
                    .lock()
                    .unwrap()
                    .violations
                    .push(format!("{id}: nacked by the broker")),
                Err(_) => return,
            }
        }
    }
}

/// Consumes `src`: acks four in five, rejects the rest (dead-lettered).
async fn src_consumer(url: String, seed: u64, model: Shared) {
    let Some((_conn, ch)) = connect(&url).await else {
        return;
    };
    if ch.basic_qos(32, BasicQosOptions::default()).await.is_err() {
        return;
    }
    let Ok(mut deliveries) = ch
        .basic_consume(
            "src".into(),
            "torture-src".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    let mut rng = Rng(seed | 1);
    while let Some(Ok(d)) = deliveries.next().await {
        let id = message_id(&d);
        let reject = rng.below(5) == 0;
        {
            let mut m = model.lock().unwrap();
            if !m.seen_src.insert(id.clone()) && !d.redelivered {
                m.violations.push(format!(
                    "{id}: delivered again from src with redelivered=false"
                ));
            }
            if reject {
                m.rejected.insert(id);
            } else {
                m.acked.insert(id);
            }
        }
        let sent = if reject {
            d.reject(BasicRejectOptions { requeue: false }).await
        } else {
            d.ack(BasicAckOptions::default()).await
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Consumes `dlq` and acks everything.
async fn dlq_consumer(url: String, model: Shared) {
    let Some((_conn, ch)) = connect(&url).await else {
        return;
    };
    let Ok(mut deliveries) = ch
        .basic_consume(
            "dlq".into(),
            "torture-dlq".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    while let Some(Ok(d)) = deliveries.next().await {
        let id = message_id(&d);
        {
            let mut m = model.lock().unwrap();
            if !m.seen_dlq.insert(id.clone()) && !d.redelivered {
                m.violations.push(format!(
                    "{id}: delivered again from dlq with redelivered=false"
                ));
            }
            m.acked.insert(id);
        }
        if d.ack(BasicAckOptions::default()).await.is_err() {
            return;
        }
    }
}

/// Takes every message of `queue` (a no-ack consumer, until a passive declare says the queue
/// is empty: every delivery before that reply has reached us, since a connection's frames
/// keep their order).
async fn drain(ch: &Channel, queue: &str) -> Vec<lapin::message::Delivery> {
    let no_ack = BasicConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            format!("drain-{queue}").as_str().into(),
            no_ack,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let deadline = now() + Duration::from_secs(30);
    loop {
        let ready = ch
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
            .unwrap()
            .message_count();
        while let Ok(Some(d)) =
            tokio::time::timeout(Duration::from_millis(50), consumer.next()).await
        {
            out.push(d.unwrap());
        }
        if ready == 0 {
            break;
        }
        assert!(now() < deadline, "{queue} does not drain");
    }
    ch.basic_cancel(
        format!("drain-{queue}").as_str().into(),
        BasicCancelOptions::default(),
    )
    .await
    .unwrap();
    out
}

/// After a restart: drains the queues and checks the round's model; returns the messages
/// checked.
async fn check(broker: &Broker, round: u32, model: &Model, violations: &mut Vec<String>) -> usize {
    let (_conn, ch) = broker.channel().await;
    let mut found: HashMap<String, Vec<&'static str>> = HashMap::new();
    let mut checked = 0;
    for queue in ["ttl", "src", "dlq"] {
        for d in drain(&ch, queue).await {
            checked += 1;
            let id = message_id(&d);
            let mut bad = |what: String| violations.push(format!("round {round}: {id}: {what}"));
            let Some(&kind) = model.published.get(&id) else {
                bad(format!("in {queue} but not published in this round"));
                continue;
            };
            found.entry(id.clone()).or_default().push(queue);
            let seen = match queue {
                "src" => model.seen_src.contains(&id),
                "dlq" => model.seen_dlq.contains(&id),
                _ => false,
            };
            if seen && !d.redelivered {
                bad(format!(
                    "seen by a consumer, back in {queue} with redelivered=false"
                ));
            }
            if queue != "dlq" && model.seen_dlq.contains(&id) {
                bad(format!("seen in dlq, back in {queue} (S-DLX-7)"));
            }
            if queue == "dlq" {
                let reason = death_reason(&d);
                let allowed = match reason.as_str() {
                    "rejected" => model.rejected.contains(&id),
                    "expired" => kind == Kind::Ttl,
                    _ => false,
                };
                if !allowed {
                    bad(format!("in dlq for reason {reason} ({kind:?})"));
                }
            }
        }
    }
    for (id, places) in &found {
        if places.len() > 1 {
            violations.push(format!(
                "round {round}: {id}: found in {places:?} (duplicate)"
            ));
        }
    }
    for id in &model.confirmed {
        if !found.contains_key(id) && !model.acked.contains(id) {
            violations.push(format!("round {round}: {id}: confirmed, never acked, lost"));
        }
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_torture_confirmed_messages_survive_sigkill_exactly_once() {
    let secs = std::env::var("WHARF_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SECS_DEFAULT);
    let seed = std::env::var("WHARF_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    eprintln!("crash torture: {secs} s, seed {seed}");
    let mut rng = Rng(seed | 1);
    let started = now();
    let dir = tempfile::tempdir().unwrap();
    let bin = std::env::var("WHARF_TORTURE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_wharf").to_owned());
    let mut broker = Broker::start_bin(&bin, dir.path());
    {
        let (_conn, ch) = broker.channel().await;
        ch.queue_declare("dlq".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        ch.queue_declare("src".into(), durable(), dlx_args())
            .await
            .unwrap();
        ch.queue_declare("ttl".into(), durable(), dlx_args())
            .await
            .unwrap();
    }
    let mut violations = Vec::new();
    let (mut kills, mut checked, mut confirmed, mut published) = (0u32, 0usize, 0usize, 0usize);
    let mut round = 0;
    while round < ROUNDS_MAX && started.elapsed() < Duration::from_secs(secs) {
        round += 1;
        let model: Shared = Arc::default();
        let url = broker.url();
        let mut tasks = Vec::new();
        for p in 0..PUBLISHERS {
            tasks.push(tokio::spawn(publisher(
                url.clone(),
                round,
                p,
                rng.next(),
                model.clone(),
            )));
        }
        tasks.push(tokio::spawn(src_consumer(
            url.clone(),
            rng.next(),
            model.clone(),
        )));
        tasks.push(tokio::spawn(dlq_consumer(url.clone(), model.clone())));
        let load_ms = 100 + rng.below(1_400);
        tokio::time::sleep(Duration::from_millis(load_ms)).await;
        broker.kill();
        kills += 1;
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        // Recovery must always succeed (Broker::start panics with the output otherwise).
        broker = Broker::start_bin(&bin, dir.path());
        let model = std::mem::take(&mut *model.lock().unwrap());
        violations.extend(
            model
                .violations
                .iter()
                .map(|v| format!("round {round}: {v}")),
        );
        checked += check(&broker, round, &model, &mut violations).await;
        confirmed += model.confirmed.len();
        published += model.published.len();
        if !violations.is_empty() {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "crash torture: {kills} kills survived in {elapsed:.0} s ({:.1} kills/min), \
         {published} published, {confirmed} confirmed, {checked} messages checked after \
         restarts, seed {seed}",
        f64::from(kills) * 60.0 / elapsed
    );
    assert!(
        violations.is_empty(),
        "{} violations (seed {seed}):\n{}\nbroker output:\n{}",
        violations.len(),
        violations.join("\n"),
        broker.output()
    );
    assert!(kills >= 1);
    assert!(confirmed > 0, "no publish was ever confirmed");
    broker.terminate();
}
