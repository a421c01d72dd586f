//! A publish/consume run: sets up the queue, opens one connection per publisher and consumer,
//! drives them until the time or message counts are reached, and sums their totals. Each
//! publisher is a writer task plus a confirm reader; each consumer is one task that batches its
//! acks into one write per read. With `--hold` / `--watch-dir` it also runs `soak`'s holding
//! consumer and directory watcher. Depends on `client`, `wire`, `clock`, `cpu`, `pacing`,
//! `report`, `soak`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use anyhow::{Context, Result, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, watch};

use crate::args::{ArgValue, RunConfig};
use crate::client::{CHANNEL, Connection, READ_BUFFER_BYTES, check_close, field_table};
use crate::clock::{Stopwatch, wall_us};
use crate::cpu;
use crate::histogram::Histogram;
use crate::pacing::Pace;
use crate::report::Totals;
use crate::soak::{self, WatchSummary};
use crate::wire::{
    self, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, PublishTemplates,
};

/// Most messages a publisher encodes into one write.
const BATCH_MSGS_MAX: usize = 256;
/// Most bytes a publisher encodes into one write (at least one message always goes).
const BATCH_BYTES_MAX: usize = 256 * 1024;
/// How long a publisher waits for outstanding confirms, without any arriving, after it stopped.
const DRAIN_IDLE: Duration = Duration::from_secs(10);

/// What one publisher did.
#[derive(Clone, Copy, Debug, Default)]
struct PublisherTotals {
    confirmed: u64,
    nacked: u64,
    elapsed: Duration,
}

/// What one consumer did.
#[derive(Clone, Debug, Default)]
struct ConsumerTotals {
    consumed: u64,
    consumed_bytes: u64,
    elapsed: Duration,
    latency_us: Histogram,
}

/// Settles publisher confirms that may be single or `multiple` and arrive in any order.
/// Invariant: every tag <= `upto` is settled; `singles` holds settled tags above `upto + 1`.
#[derive(Debug, Default)]
pub struct ConfirmTracker {
    upto: u64,
    singles: BTreeSet<u64>,
}

impl ConfirmTracker {
    /// Applies one confirm and returns how many tags it newly settled (0 for a repeat).
    pub fn settle(&mut self, tag: u64, multiple: bool) -> u64 {
        if tag <= self.upto {
            return 0;
        }
        if multiple {
            let below = self.singles.range(..=tag).count() as u64;
            self.singles = self.singles.split_off(&(tag + 1));
            let newly = tag - self.upto - below;
            self.upto = tag;
            self.advance();
            newly
        } else if self.singles.insert(tag) {
            self.advance();
            1
        } else {
            0
        }
    }

    fn advance(&mut self) {
        while self.singles.first() == Some(&(self.upto + 1)) {
            self.singles.pop_first();
            self.upto += 1;
        }
    }

    /// Tags settled so far.
    pub fn settled(&self) -> u64 {
        self.upto + self.singles.len() as u64
    }
}

fn properties(config: &RunConfig) -> BasicProperties {
    let properties = BasicProperties::default();
    if config.persistent {
        properties.with_delivery_mode(2)
    } else {
        properties
    }
}

/// Declares (and maybe purges) the queue on a setup connection kept for the end of the run.
async fn setup_queue(config: &RunConfig) -> Result<Connection> {
    let mut setup = Connection::open(&config.uri).await?;
    let mut args = config.queue.args.clone();
    if config.queue.priorities > 0 {
        let max = i64::from(config.queue.priorities);
        args.push(("x-max-priority".to_owned(), ArgValue::Int(max)));
    }
    let arguments = field_table(&args)?;
    setup
        .queue_declare(&config.queue.name, config.queue.durable, false, arguments)
        .await?;
    if config.purge_before {
        setup.queue_purge(&config.queue.name).await?;
    }
    Ok(setup)
}

/// Opens every publisher and consumer connection (confirm mode, prefetch) before the clock
/// starts, so that setup does not count against the rates.
async fn connect_clients(config: &RunConfig) -> Result<(Vec<Connection>, Vec<Connection>)> {
    let mut publishers = Vec::new();
    for _ in 0..config.producers {
        let mut conn = Connection::open(&config.uri).await?;
        if config.confirm_window.is_some() {
            conn.confirm_select().await?;
        }
        publishers.push(conn);
    }
    let mut consumers = Vec::new();
    for _ in 0..config.consumers {
        let mut conn = Connection::open(&config.uri).await?;
        if config.qos > 0 {
            conn.basic_qos(config.qos).await?;
        }
        consumers.push(conn);
    }
    Ok((publishers, consumers))
}

type Task<T> = tokio::task::JoinHandle<Result<T>>;

/// Joins every client task and sums what they did.
async fn join_clients(
    publishers: Vec<Task<PublisherTotals>>,
    consumers: Vec<Task<ConsumerTotals>>,
    totals: &mut Totals,
) -> Result<()> {
    for task in publishers {
        let one = task.await.context("publisher task")??;
        totals.published += one.confirmed;
        totals.nacked += one.nacked;
        totals.publish_elapsed = totals.publish_elapsed.max(one.elapsed);
    }
    for task in consumers {
        let one = task.await.context("consumer task")??;
        totals.consumed += one.consumed;
        totals.consumed_bytes += one.consumed_bytes;
        totals.consume_elapsed = totals.consume_elapsed.max(one.elapsed);
        totals.latency_us.merge(&one.latency_us);
    }
    Ok(())
}

/// Runs the configured scenario and returns its totals.
pub async fn run(config: RunConfig) -> Result<Totals> {
    let config = Arc::new(config);
    let mut setup = setup_queue(&config).await?;
    let holder = if config.soak.hold > 0 {
        Some(soak::open_holder(&config).await?)
    } else {
        None
    };
    let (publishers, consumers) = connect_clients(&config).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let clock = Stopwatch::start();
    let run_start_us = wall_us();
    let broker_cpu_start = config.broker_pid.and_then(cpu::process_cpu_s);
    let perf_cpu_start = cpu::self_cpu_s();
    let soak_tasks = spawn_soak(&config, holder, clock, &stop_rx);

    let mut consumer_tasks = Vec::new();
    for mut conn in consumers {
        conn.basic_consume(&config.queue.name, config.auto_ack)
            .await?;
        let (config, stop) = (Arc::clone(&config), stop_rx.clone());
        consumer_tasks.push(tokio::spawn(async move {
            consume(conn, &config, clock, run_start_us, stop).await
        }));
    }
    let mut publisher_tasks = Vec::new();
    for (seed, conn) in (1..).zip(publishers) {
        let (config, stop) = (Arc::clone(&config), stop_rx.clone());
        publisher_tasks.push(tokio::spawn(async move {
            publish(conn, &config, seed, clock, stop).await
        }));
    }
    // Kept alive until every task is joined: a dropped sender would read as "stop" to them.
    let stop_tx = Arc::new(stop_tx);
    let timer = config.time.map(|time| {
        let stop_tx = Arc::clone(&stop_tx);
        tokio::spawn(async move {
            tokio::time::sleep(time).await;
            let _ = stop_tx.send(true);
        })
    });

    let mut totals = Totals {
        size_bytes: config.size_bytes,
        target_rate: (config.rate > 0 && config.producers > 0).then_some(config.rate),
        ..Totals::default()
    };
    join_clients(publisher_tasks, consumer_tasks, &mut totals).await?;
    totals.wall = clock.elapsed();
    if let Some(timer) = timer {
        timer.abort();
    }
    // A run ended by its message counts stops the holder and the watcher too.
    let _ = stop_tx.send(true);
    drop(stop_tx);
    join_soak(soak_tasks, &mut totals).await?;
    totals.broker_cpu_s = broker_cpu_start
        .zip(config.broker_pid.and_then(cpu::process_cpu_s))
        .map(|(start, end)| end - start);
    totals.perf_cpu_s = perf_cpu_start
        .zip(cpu::self_cpu_s())
        .map(|(start, end)| end - start);

    if config.purge_after {
        setup.queue_purge(&config.queue.name).await?;
    }
    if config.delete_after {
        setup.queue_delete(&config.queue.name).await?;
    }
    setup.close().await?;
    Ok(totals)
}

/// The holder and watcher tasks of a soak run.
struct SoakTasks {
    hold: Option<Task<u64>>,
    watch: Option<Task<WatchSummary>>,
}

/// Starts the holding consumer's task and the directory watcher, as configured.
fn spawn_soak(
    config: &Arc<RunConfig>,
    holder: Option<Connection>,
    clock: Stopwatch,
    stop: &watch::Receiver<bool>,
) -> SoakTasks {
    let held_count = Arc::new(AtomicU64::new(0));
    let hold =
        holder.map(|conn| tokio::spawn(soak::hold(conn, Arc::clone(&held_count), stop.clone())));
    let watch = config.soak.watch_dir.clone().map(|dir| {
        let watch = soak::Watch {
            dir,
            held: held_count,
            clock,
        };
        tokio::spawn(soak::watch_dir(Arc::clone(config), watch, stop.clone()))
    });
    SoakTasks { hold, watch }
}

async fn join_soak(tasks: SoakTasks, totals: &mut Totals) -> Result<()> {
    if let Some(task) = tasks.hold {
        totals.held = Some(task.await.context("holding consumer task")??);
    }
    if let Some(task) = tasks.watch {
        totals.watch = Some(task.await.context("watch task")??);
    }
    Ok(())
}

/// One publisher: a writer task bounded by the confirm window, and this task reading confirms.
async fn publish(
    conn: Connection,
    config: &RunConfig,
    seed: u64,
    clock: Stopwatch,
    stop: watch::Receiver<bool>,
) -> Result<PublisherTotals> {
    let templates = PublishTemplates::new(
        CHANNEL,
        &config.queue.name,
        properties(config),
        config.queue.priorities,
        config.size_bytes,
        conn.frame_max,
        seed,
    )?;
    let Connection {
        stream,
        rbuf,
        frame_max,
    } = conn;
    let (reader, writer) = stream.into_split();
    let window = config
        .confirm_window
        .map(|w| Arc::new(Semaphore::new(usize::try_from(w).unwrap_or(usize::MAX))));
    let (done_tx, done_rx) = watch::channel(None);
    // A publisher behind schedule catches up at most one confirm window (or one batch without
    // confirms) per wake-up.
    let burst_max = config
        .confirm_window
        .map_or(BATCH_MSGS_MAX as u64, u64::from);
    let pace = Pace::new(config.rate, config.producers, burst_max);
    let writer_task = tokio::spawn(write_publishes(
        writer,
        templates,
        Limits {
            messages: config.pmessages,
            pace,
            clock,
        },
        window.clone(),
        stop,
        done_tx,
    ));
    let (reader, rbuf, confirm_totals) =
        read_confirms(reader, rbuf, frame_max, window.as_ref(), done_rx, clock).await?;
    let (writer, sent) = writer_task.await.context("publisher writer task")??;
    let stream = reader.reunite(writer)?;
    Connection {
        stream,
        rbuf,
        frame_max,
    }
    .close()
    .await?;
    let mut totals = confirm_totals;
    if window.is_none() {
        // Without confirms, close-ok is the proof the broker took every publish.
        totals.confirmed = sent;
        totals.elapsed = clock.elapsed();
    }
    Ok(totals)
}

/// How much and how fast a publisher sends.
struct Limits {
    /// Messages to send in all (`None`: until stopped).
    messages: Option<u64>,
    /// The `--rate` schedule (`None`: as fast as the window allows).
    pace: Option<Pace>,
    /// The run's stopwatch, whose origin is the schedule's start.
    clock: Stopwatch,
}

/// Writes publishes in batches (one `write` each) until stopped or the message limit is reached,
/// taking one window permit per message when confirms are on and, with `--rate`, sending only
/// what the schedule says is due; then says how many it sent.
async fn write_publishes(
    mut writer: OwnedWriteHalf,
    mut templates: PublishTemplates,
    limits: Limits,
    window: Option<Arc<Semaphore>>,
    mut stop: watch::Receiver<bool>,
    done: watch::Sender<Option<u64>>,
) -> Result<(OwnedWriteHalf, u64)> {
    let template = templates.first();
    let mut body: Vec<u8> = (0..template.body_bytes())
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect();
    let per_batch = (BATCH_BYTES_MAX / template.encoded_bytes().max(1)).clamp(1, BATCH_MSGS_MAX);
    let mut out = Vec::with_capacity(BATCH_BYTES_MAX + template.encoded_bytes());
    let mut sent: u64 = 0;
    // Paced: messages that may still go before the schedule is consulted again (at most one
    // burst; behind schedule the next burst follows at once, throttled only by the window).
    let mut quota: u64 = 0;
    loop {
        if *stop.borrow() {
            break;
        }
        let remaining = limits.messages.map_or(u64::MAX, |l| l - sent.min(l));
        if remaining == 0 {
            break;
        }
        let mut allowed = remaining;
        if let Some(pace) = &limits.pace {
            if quota == 0 {
                let elapsed = limits.clock.elapsed();
                let due = pace.due(elapsed, sent);
                if due == 0 {
                    tokio::select! {
                        () = tokio::time::sleep(pace.wait(elapsed, sent)) => {}
                        _ = stop.changed() => break,
                    }
                    continue;
                }
                quota = due;
            }
            allowed = allowed.min(quota);
        }
        let mut batch = usize::try_from(allowed)
            .unwrap_or(usize::MAX)
            .min(per_batch);
        if let Some(window) = &window {
            tokio::select! {
                permit = window.acquire() => permit?.forget(),
                _ = stop.changed() => break,
            }
            let extra = window.available_permits().min(batch - 1);
            batch = 1;
            if extra > 0
                && let Ok(permits) = window.try_acquire_many(u32::try_from(extra)?)
            {
                permits.forget();
                batch += extra;
            }
        }
        for _ in 0..batch {
            wire::stamp(&mut body, wall_us());
            templates.pick().push(&mut out, &body);
        }
        writer.write_all(&out).await?;
        out.clear();
        sent += batch as u64;
        quota = quota.saturating_sub(batch as u64);
    }
    writer.flush().await?;
    let _ = done.send(Some(sent));
    Ok((writer, sent))
}

/// Applies every whole frame in `rbuf` to the confirm tracker; returns how many messages were
/// newly settled.
fn settle_confirms(
    rbuf: &mut BytesMut,
    frame_max: u32,
    tracker: &mut ConfirmTracker,
    totals: &mut PublisherTotals,
) -> Result<u64> {
    let mut newly = 0;
    while let Some((frame, used)) = wire::split_frame(rbuf, frame_max)? {
        match frame.kind {
            FRAME_METHOD => {
                if let Some(confirm) = wire::fast_confirm(frame.payload) {
                    let settled = tracker.settle(confirm.tag, confirm.multiple);
                    newly += settled;
                    if confirm.nack {
                        totals.nacked += settled;
                    } else {
                        totals.confirmed += settled;
                    }
                } else {
                    // connection.blocked and the like are tolerated; a close is fatal.
                    check_close(wire::decode_method(frame.payload)?)?;
                }
            }
            FRAME_HEARTBEAT => {}
            other => bail!("unexpected frame type {other} on a publisher"),
        }
        rbuf.advance(used);
    }
    Ok(newly)
}

/// Reads confirms (or, without confirms, only watches for a broker-initiated close) until the
/// writer is done and every message it sent is settled.
async fn read_confirms(
    mut reader: OwnedReadHalf,
    mut rbuf: BytesMut,
    frame_max: u32,
    window: Option<&Arc<Semaphore>>,
    mut done: watch::Receiver<Option<u64>>,
    clock: Stopwatch,
) -> Result<(OwnedReadHalf, BytesMut, PublisherTotals)> {
    let mut tracker = ConfirmTracker::default();
    let mut totals = PublisherTotals::default();
    let mut sent_total: Option<u64> = None;
    loop {
        let newly = settle_confirms(&mut rbuf, frame_max, &mut tracker, &mut totals)?;
        if newly > 0 {
            totals.elapsed = clock.elapsed();
            if let Some(window) = window {
                window.add_permits(usize::try_from(newly)?);
            }
        }
        if sent_total.is_none() {
            sent_total = *done.borrow();
        }
        if let Some(total) = sent_total
            && (window.is_none() || tracker.settled() >= total)
        {
            return Ok((reader, rbuf, totals));
        }
        if rbuf.capacity() - rbuf.len() < READ_BUFFER_BYTES / 4 {
            rbuf.reserve(READ_BUFFER_BYTES);
        }
        if let Some(total) = sent_total {
            let Ok(read) = tokio::time::timeout(DRAIN_IDLE, reader.read_buf(&mut rbuf)).await
            else {
                bail!(
                    "{} confirms still missing {DRAIN_IDLE:?} after the last one",
                    total.saturating_sub(tracker.settled())
                );
            };
            if read? == 0 {
                bail!("the broker closed the connection");
            }
            continue;
        }
        tokio::select! {
            read = reader.read_buf(&mut rbuf) => {
                if read? == 0 { bail!("the broker closed the connection"); }
            }
            changed = done.changed() => {
                if changed.is_err() {
                    // The writer failed before saying how much it sent; its error is reported
                    // when it is joined.
                    return Ok((reader, rbuf, totals));
                }
            }
        }
    }
}

/// Where a consumer is inside the frames of one delivery.
#[derive(Clone, Copy, Debug)]
enum Delivery {
    /// Between deliveries.
    Idle,
    /// basic.deliver seen; the content header comes next.
    Header { tag: u64 },
    /// Header seen; `remaining` body bytes to come.
    Body {
        tag: u64,
        remaining: u64,
        stamp: Option<u64>,
        first: bool,
    },
}

/// Consumer state besides the socket.
struct ConsumerState<'a> {
    config: &'a RunConfig,
    clock: Stopwatch,
    run_start_us: u64,
    totals: ConsumerTotals,
    delivery: Delivery,
    unacked: u32,
    last_tag: u64,
    acks: Vec<u8>,
}

impl ConsumerState<'_> {
    fn complete(&mut self, tag: u64, stamp: Option<u64>) {
        self.totals.consumed += 1;
        self.totals.elapsed = self.clock.elapsed();
        // Only messages sent during this run measure latency; older ones (a pre-filled queue)
        // would report how long they waited, not how fast the broker is.
        if let Some(sent_us) = stamp.filter(|&s| s >= self.run_start_us) {
            self.totals
                .latency_us
                .record(wall_us().saturating_sub(sent_us));
        }
        self.delivery = Delivery::Idle;
        if self.config.auto_ack {
            return;
        }
        self.last_tag = tag;
        self.unacked += 1;
        if self.unacked >= self.config.multi_ack_every {
            wire::push_ack(
                &mut self.acks,
                CHANNEL,
                tag,
                self.config.multi_ack_every > 1,
            );
            self.unacked = 0;
        }
    }

    fn on_frame(&mut self, kind: u8, payload: &[u8]) -> Result<()> {
        match (kind, self.delivery) {
            (FRAME_METHOD, Delivery::Idle) => {
                if let Some(tag) = wire::fast_deliver_tag(payload) {
                    self.delivery = Delivery::Header { tag };
                } else {
                    let method = check_close(wire::decode_method(payload)?)?;
                    if let AMQPClass::Basic(basic::AMQPMethod::Cancel(_)) = method {
                        bail!("the broker cancelled the consumer");
                    }
                }
            }
            (FRAME_HEADER, Delivery::Header { tag }) => {
                let size = wire::header_body_size(payload).context("short content header")?;
                if size == 0 {
                    self.complete(tag, None);
                } else {
                    self.delivery = Delivery::Body {
                        tag,
                        remaining: size,
                        stamp: None,
                        first: true,
                    };
                }
            }
            (
                FRAME_BODY,
                Delivery::Body {
                    tag,
                    remaining,
                    stamp,
                    first,
                },
            ) => {
                let stamp = if first {
                    wire::read_stamp(payload)
                } else {
                    stamp
                };
                let len = payload.len() as u64;
                self.totals.consumed_bytes += len;
                if len > remaining {
                    bail!("body frames exceed the announced body size");
                }
                if len == remaining {
                    self.complete(tag, stamp);
                } else {
                    self.delivery = Delivery::Body {
                        tag,
                        remaining: remaining - len,
                        stamp,
                        first: false,
                    };
                }
            }
            (FRAME_HEARTBEAT, _) => {}
            (kind, state) => bail!("frame type {kind} unexpected in state {state:?}"),
        }
        Ok(())
    }
}

async fn consume(
    mut conn: Connection,
    config: &RunConfig,
    clock: Stopwatch,
    run_start_us: u64,
    mut stop: watch::Receiver<bool>,
) -> Result<ConsumerTotals> {
    let mut state = ConsumerState {
        config,
        clock,
        run_start_us,
        totals: ConsumerTotals::default(),
        delivery: Delivery::Idle,
        unacked: 0,
        last_tag: 0,
        acks: Vec::with_capacity(64 * 1024),
    };
    let limit = config.cmessages.unwrap_or(u64::MAX);
    'run: loop {
        while let Some((frame, used)) = wire::split_frame(&conn.rbuf, conn.frame_max)? {
            state.on_frame(frame.kind, frame.payload)?;
            conn.rbuf.advance(used);
            if state.totals.consumed >= limit {
                break 'run;
            }
        }
        if !state.acks.is_empty() {
            conn.stream.write_all(&state.acks).await?;
            state.acks.clear();
        }
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            filled = conn.fill() => filled?,
            _ = stop.changed() => break,
        }
    }
    if state.unacked > 0 {
        wire::push_ack(&mut state.acks, CHANNEL, state.last_tag, true);
    }
    if !state.acks.is_empty() {
        conn.stream.write_all(&state.acks).await?;
    }
    conn.close().await?;
    Ok(state.totals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;
    use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};

    fn frames_of(frames: &[AMQPFrame]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in frames {
            wire::encode(frame, &mut out).unwrap();
        }
        out
    }

    fn delivery(tag: u64, body: &[&[u8]]) -> Vec<AMQPFrame> {
        let size: usize = body.iter().map(|chunk| chunk.len()).sum();
        let mut frames = vec![
            AMQPFrame::Method(
                CHANNEL,
                AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                    consumer_tag: "ctag".into(),
                    delivery_tag: tag,
                    redelivered: false,
                    exchange: "".into(),
                    routing_key: "q".into(),
                })),
            ),
            AMQPFrame::Header(
                CHANNEL,
                AMQPContentHeader {
                    class_id: 60,
                    body_size: size as u64,
                    properties: BasicProperties::default(),
                },
            ),
        ];
        frames.extend(
            body.iter()
                .map(|chunk| AMQPFrame::Body(CHANNEL, chunk.to_vec())),
        );
        frames
    }

    fn feed(state: &mut ConsumerState<'_>, bytes: &[u8]) {
        let mut at = 0;
        while let Some((frame, used)) = wire::split_frame(&bytes[at..], 0).unwrap() {
            state.on_frame(frame.kind, frame.payload).unwrap();
            at += used;
        }
        assert_eq!(at, bytes.len());
    }

    fn acks_in(bytes: &[u8]) -> Vec<(u64, bool)> {
        let mut at = 0;
        let mut acks = Vec::new();
        while let Some((frame, used)) = wire::split_frame(&bytes[at..], 0).unwrap() {
            let ack = wire::fast_confirm(frame.payload).unwrap();
            acks.push((ack.tag, ack.multiple));
            at += used;
        }
        acks
    }

    fn state(config: &RunConfig, run_start_us: u64) -> ConsumerState<'_> {
        ConsumerState {
            config,
            clock: Stopwatch::start(),
            run_start_us,
            totals: ConsumerTotals::default(),
            delivery: Delivery::Idle,
            unacked: 0,
            last_tag: 0,
            acks: Vec::new(),
        }
    }

    fn config(flags: &str) -> RunConfig {
        let argv: Vec<String> = flags.split_whitespace().map(str::to_owned).collect();
        let args::Command::Run(config) = args::parse(&argv).unwrap() else {
            panic!("not a run");
        };
        config
    }

    #[test]
    fn consumer_acks_every_k_with_multiple_and_reassembles_split_bodies() {
        let config = config("-z 1 -q 10 -A 3");
        let mut state = state(&config, 0);
        let mut stamped = [0u8; 12];
        wire::stamp(&mut stamped, 1);
        let mut bytes = Vec::new();
        for tag in 1..=7 {
            // The body arrives in two frames; only the first carries the stamp.
            bytes.extend(frames_of(&delivery(tag, &[&stamped[..9], &stamped[9..]])));
        }
        feed(&mut state, &bytes);
        assert_eq!(state.totals.consumed, 7);
        assert_eq!(state.totals.consumed_bytes, 7 * 12);
        assert_eq!(acks_in(&state.acks), vec![(3, true), (6, true)]);
        assert_eq!(state.unacked, 1, "tag 7 is acked when the consumer stops");
        assert_eq!(state.totals.latency_us.count(), 7);
    }

    #[test]
    fn consumer_acks_each_message_singly_and_skips_old_stamps() {
        let config = config("-z 1 -q 10");
        // Messages stamped before the run started (a pre-filled queue) measure no latency.
        let mut state = state(&config, u64::MAX);
        let mut bytes = frames_of(&delivery(1, &[&[0u8; 16]]));
        bytes.extend(frames_of(&delivery(2, &[])));
        feed(&mut state, &bytes);
        assert_eq!(state.totals.consumed, 2);
        assert_eq!(acks_in(&state.acks), vec![(1, false), (2, false)]);
        assert_eq!(state.totals.latency_us.count(), 0);
    }

    #[test]
    fn consumer_refuses_a_body_without_a_header() {
        let config = config("-z 1 -a");
        let mut state = state(&config, 0);
        assert!(state.on_frame(FRAME_BODY, b"stray").is_err());
    }

    #[test]
    fn in_order_multiple_confirms_settle_ranges() {
        let mut t = ConfirmTracker::default();
        assert_eq!(t.settle(5, true), 5);
        assert_eq!(t.settle(6, false), 1);
        assert_eq!(t.settle(10, true), 4);
        assert_eq!(t.settled(), 10);
        assert_eq!(t.settle(3, true), 0, "a repeat settles nothing");
    }

    #[test]
    fn out_of_order_singles_are_not_counted_twice_by_a_later_multiple() {
        let mut t = ConfirmTracker::default();
        assert_eq!(t.settle(3, false), 1);
        assert_eq!(t.settle(5, false), 1);
        assert_eq!(t.settle(3, false), 0);
        assert_eq!(t.settled(), 2);
        // 1..=4 by `multiple`: 3 was already settled, so 1, 2 and 4 are new; 5 stays settled.
        assert_eq!(t.settle(4, true), 3);
        assert_eq!(t.settled(), 5);
        assert_eq!(t.settle(6, false), 1);
        assert_eq!(t.settled(), 6);
        assert!(t.singles.is_empty(), "contiguous singles fold into `upto`");
    }
}
