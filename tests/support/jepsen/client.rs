//! The clients of a Jepsen-style run: publishers with confirms, consumers that ack or reject
//! (into the dead-letter queue), and the final drain, each recording every operation into the
//! [`History`] and reconnecting after any error or timeout.
//!
//! **Which node a client uses** is [`Route`]: with [`Route::EveryNode`] (the default) client
//! `i` goes through node `i mod n` first, whichever node leads, its quorum queue work forwarded
//! to the leader (S-CLU-70); the other nodes are tried, in order, only when its own does not
//! answer. With [`Route::Leader`] (`WHARF_JEPSEN_ROUTE=leader`, forwarding off) every client
//! finds the group's current leader (a 405 names it, S-CLU-11) and works through it. Depends on lapin, tokio and the history.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::history::{History, Msg, Op, Queue, Settle};

/// The source queue's name.
pub const SOURCE: &str = "jepsen";
/// The dead-letter queue's name.
pub const DEAD: &str = "jepsen-dead";
/// How long any one AMQP operation may take before the client gives its connection up (a
/// paused node never answers).
const OP: Duration = Duration::from_secs(5);
/// Publishes in flight per publisher before it waits for their confirms.
const WINDOW: u64 = 8;
/// Each consumer's prefetch.
const PREFETCH: u16 = 16;
/// Settlements a consumer sends before it asks for a reply that shows they took effect.
const SYNC_EVERY: u32 = 8;

/// Which node a client works through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The group's current leader, found by asking.
    Leader,
    /// Client `i` through node `i mod n`, forwarded to the leader (S-CLU-70).
    EveryNode,
}

/// The nodes' AMQP addresses as the nemesis keeps them (a restarted node listens on a new
/// port; a killed one on none), and the leader the clients last heard of.
pub struct Nodes {
    urls: Mutex<Vec<Option<String>>>,
    /// The node the last 405 named, or 0.
    hint: AtomicU64,
    route: Route,
}

impl Nodes {
    pub fn new(urls: Vec<Option<String>>, route: Route) -> Nodes {
        Nodes {
            urls: Mutex::new(urls),
            hint: AtomicU64::new(0),
            route,
        }
    }

    /// Node `id` now listens at `url` (`None`: down).
    pub fn set(&self, id: u64, url: Option<String>) {
        self.urls.lock().unwrap()[usize::try_from(id - 1).unwrap()] = url;
    }

    /// The nodes to try, in order, for client number `client`.
    fn candidates(&self, client: usize) -> Vec<(u64, String)> {
        let urls = self.urls.lock().unwrap();
        let n = urls.len();
        let first = match self.route {
            Route::Leader => usize::try_from(self.hint.load(Ordering::Relaxed))
                .unwrap()
                .checked_sub(1)
                .unwrap_or(client % n),
            Route::EveryNode => client % n,
        };
        (0..n)
            .map(|k| (first + k) % n)
            .filter_map(|i| Some((i as u64 + 1, urls[i].clone()?)))
            .collect()
    }
}

/// Shared by every client of a run.
pub struct Ctx {
    pub nodes: Nodes,
    pub history: History,
    /// Publishers stop once set.
    pub stop_publishing: AtomicBool,
    /// Consumers stop once set.
    pub stop_consuming: AtomicBool,
}

/// Runs `fut` for at most [`OP`]; a timeout is an error like any other.
async fn op<T>(fut: impl Future<Output = Result<T, lapin::Error>>) -> Result<T, String> {
    match tokio::time::timeout(OP, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {OP:?}")),
    }
}

/// The node a 405 names as the leader ("... is led by node 2, not this node ...").
fn leader_named(err: &str) -> Option<u64> {
    let rest = &err[err.find("led by node ")? + "led by node ".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A connection with one channel, recorded as an incarnation of its own.
pub struct Session {
    conn: Connection,
    pub ch: Channel,
    pub id: u64,
}

impl Session {
    /// Gives the connection up, recording why.
    async fn close(self, ctx: &Ctx, who: &str, why: &str) {
        ctx.history.record(
            who,
            Op::Closed {
                conn: self.id,
                why: why.to_owned(),
            },
        );
        let _ =
            tokio::time::timeout(Duration::from_secs(1), self.conn.close(200, "bye".into())).await;
    }
}

/// The source queue's arguments: a quorum queue dead-lettering into [`DEAD`] through the
/// default exchange.
fn source_args() -> FieldTable {
    let mut args = quorum_args();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(DEAD.into()),
    );
    args
}

fn quorum_args() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

/// Declares both queues on the channel (durable quorum queues of the group).
pub async fn declare(ch: &Channel) -> Result<(), String> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    op(ch.queue_declare(DEAD.into(), durable, quorum_args())).await?;
    op(ch.queue_declare(SOURCE.into(), durable, source_args())).await?;
    Ok(())
}

/// Opens a session for client number `client` on the first candidate node that takes
/// quorum-queue work: a passive declare of the source queue answers there (forwarded to the
/// leader, S-CLU-70; without forwarding a follower refuses it with 405 naming the leader,
/// which becomes the next first candidate of [`Route::Leader`]). `None`
/// when no node did; the caller waits a moment and tries again.
pub async fn open(ctx: &Ctx, who: &str, client: usize) -> Option<Session> {
    for (node, url) in ctx.nodes.candidates(client) {
        let Ok(conn) = op(Connection::connect(&url, ConnectionProperties::default())).await else {
            continue;
        };
        let probe = async {
            let ch = op(conn.create_channel()).await?;
            let passive = QueueDeclareOptions {
                passive: true,
                durable: true,
                ..QueueDeclareOptions::default()
            };
            op(ch.queue_declare(SOURCE.into(), passive, FieldTable::default())).await?;
            Ok::<_, String>(ch)
        };
        match probe.await {
            Ok(ch) => {
                let id = ctx.history.conn_id();
                ctx.history.record(who, Op::Open { conn: id, node });
                return Some(Session { conn, ch, id });
            }
            Err(e) => {
                if let Some(leader) = leader_named(&e) {
                    ctx.nodes.hint.store(leader, Ordering::Relaxed);
                }
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.close(200, "bye".into()))
                    .await;
            }
        }
    }
    None
}

/// Opens a session, retrying until one opens or `stop` is set.
async fn open_until(ctx: &Ctx, who: &str, client: usize, stop: &AtomicBool) -> Option<Session> {
    while !stop.load(Ordering::Relaxed) {
        if let Some(s) = open(ctx, who, client).await {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Publisher `p`: numbered messages from 1, in windows of [`WINDOW`] confirmed publishes,
/// until told to stop.
pub async fn publisher(ctx: Arc<Ctx>, p: u32, client: usize) {
    let who = format!("pub{p}");
    let stop = &ctx.stop_publishing;
    let mut seq = 0;
    while let Some(s) = open_until(&ctx, &who, client, stop).await {
        let why = match publish_on(&ctx, &who, &s, p, &mut seq).await {
            Ok(()) => "stopped".to_owned(),
            Err(e) => e,
        };
        s.close(&ctx, &who, &why).await;
    }
}

async fn publish_on(
    ctx: &Ctx,
    who: &str,
    s: &Session,
    p: u32,
    seq: &mut u64,
) -> Result<(), String> {
    op(s.ch.confirm_select(ConfirmSelectOptions::default())).await?;
    while !ctx.stop_publishing.load(Ordering::Relaxed) {
        let mut pending = Vec::new();
        for _ in 0..WINDOW {
            *seq += 1;
            let msg = Msg {
                publisher: p,
                seq: *seq,
            };
            ctx.history.record(who, Op::Publish { conn: s.id, msg });
            let confirm = op(s.ch.basic_publish(
                "".into(),
                SOURCE.into(),
                BasicPublishOptions::default(),
                msg.body().as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            ))
            .await?;
            pending.push((msg, confirm));
        }
        for (msg, confirm) in pending {
            let c = op(confirm).await?;
            ctx.history.record(
                who,
                Op::Confirm {
                    conn: s.id,
                    msg,
                    ack: c.is_ack(),
                },
            );
        }
    }
    Ok(())
}

fn queue_name(queue: Queue) -> &'static str {
    match queue {
        Queue::Source => SOURCE,
        Queue::Dead => DEAD,
    }
}

/// How a consumer settles a delivery of `msg` from `queue`: from the source, the messages
/// [`Msg::rejected`] chooses are rejected (dead-lettered), the others acked.
fn settle_of(queue: Queue, msg: Option<Msg>) -> Settle {
    match (queue, msg) {
        (Queue::Source, Some(m)) if m.rejected() => Settle::Reject,
        _ => Settle::Ack,
    }
}

/// Consumer `c` of `queue`: acks or rejects every delivery, asking for a reply every
/// [`SYNC_EVERY`] settlements (and when idle) so the history shows which took effect.
pub async fn consumer(ctx: Arc<Ctx>, c: u32, queue: Queue, client: usize) {
    let who = format!("con{c}");
    let stop = &ctx.stop_consuming;
    while let Some(s) = open_until(&ctx, &who, client, stop).await {
        let why = match consume_on(&ctx, &who, &s, queue).await {
            Ok(()) => "stopped".to_owned(),
            Err(e) => e,
        };
        s.close(&ctx, &who, &why).await;
    }
}

/// Asks for a reply on the session's channel (`basic.qos`): once it comes, every settlement
/// sent before it took effect.
async fn sync(ctx: &Ctx, who: &str, s: &Session) -> Result<(), String> {
    op(s.ch.basic_qos(PREFETCH, BasicQosOptions::default())).await?;
    ctx.history.record(who, Op::Synced { conn: s.id });
    Ok(())
}

/// Records a delivery and settles it as [`settle_of`] says.
async fn take(
    ctx: &Ctx,
    who: &str,
    s: &Session,
    queue: Queue,
    d: &lapin::message::Delivery,
) -> Result<(), String> {
    let body = String::from_utf8_lossy(&d.data).into_owned();
    let msg = Msg::parse(&body);
    ctx.history.record(
        who,
        Op::Deliver {
            conn: s.id,
            queue,
            body,
            redelivered: d.redelivered,
        },
    );
    let how = settle_of(queue, msg);
    if let Some(msg) = msg {
        ctx.history.record(
            who,
            Op::Settle {
                conn: s.id,
                queue,
                msg,
                how,
            },
        );
    }
    match how {
        Settle::Ack => op(d.ack(BasicAckOptions::default())).await.map(drop),
        Settle::Reject => op(d.reject(BasicRejectOptions { requeue: false }))
            .await
            .map(drop),
    }
}

async fn consume_on(ctx: &Ctx, who: &str, s: &Session, queue: Queue) -> Result<(), String> {
    op(s.ch.basic_qos(PREFETCH, BasicQosOptions::default())).await?;
    let mut deliveries = op(s.ch.basic_consume(
        queue_name(queue).into(),
        who.into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await?;
    let mut unsynced = 0;
    while !ctx.stop_consuming.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(500), deliveries.next()).await {
            Err(_) => {
                if unsynced > 0 {
                    sync(ctx, who, s).await?;
                    unsynced = 0;
                }
            }
            Ok(None) => return Err("the consumer ended".into()),
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(Some(Ok(d))) => {
                take(ctx, who, s, queue, &d).await?;
                unsynced += 1;
                if unsynced >= SYNC_EVERY {
                    sync(ctx, who, s).await?;
                    unsynced = 0;
                }
            }
        }
    }
    if unsynced > 0 {
        sync(ctx, who, s).await?;
    }
    Ok(())
}

/// The final drain: `basic.get` from both queues until both are empty, settling as the
/// consumers do (a rejected message moves on to the dead-letter queue and is drained from
/// there), then a reply. Retries on a new session after an error, up to `tries` sessions.
pub async fn drain(ctx: &Ctx, tries: u32) -> Result<(), String> {
    let who = "drain";
    let never = AtomicBool::new(false);
    let mut last = String::new();
    for _ in 0..tries {
        let Some(s) =
            tokio::time::timeout(Duration::from_secs(30), open_until(ctx, who, 0, &never))
                .await
                .ok()
                .flatten()
        else {
            return Err("no node took the drain's session within 30 s".into());
        };
        match drain_on(ctx, who, &s).await {
            Ok(()) => {
                s.close(ctx, who, "drained").await;
                return Ok(());
            }
            Err(e) => {
                last.clone_from(&e);
                s.close(ctx, who, &e).await;
            }
        }
    }
    Err(format!("the drain failed {tries} times; last: {last}"))
}

async fn drain_on(ctx: &Ctx, who: &str, s: &Session) -> Result<(), String> {
    loop {
        let mut got = false;
        for queue in [Queue::Source, Queue::Dead] {
            while let Some(m) =
                op(s.ch.basic_get(queue_name(queue).into(), BasicGetOptions::default())).await?
            {
                got = true;
                take(ctx, who, s, queue, &m.delivery).await?;
            }
        }
        sync(ctx, who, s).await?;
        if !got {
            return Ok(());
        }
    }
}
