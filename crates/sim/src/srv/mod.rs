//! The whole server under deterministic simulation (issue 19): the real `wharf_server::Server`
//! (connections, channels, the broker task, group commit, publisher confirms, outboxes) with
//! the real store and log on the simulated disk, in a current-thread tokio runtime with paused
//! time, driven by simulated AMQP clients speaking real frames through the server's
//! socket-free door (S-NET-2), with crashes, power losses, failing fsyncs and writes, a full
//! disk (S-DISK-1..4: a small volume the run's own messages fill, another writer filling it
//! for a few steps; the server's resource monitor reads the simulated disk's free space) and
//! a slow disk, and checked against a reference model ([`Ledger`]) at every step.
//!
//! What makes a run a function of its seed: every choice comes from the seed's [`Rng`]; the
//! server runs its store inline (`ServerConfig::inline_store`: no writer thread, no
//! checkpoint thread, no blocking pool); the runtime has one thread and paused time, so tasks
//! run in a fixed order and time moves only when every task is idle, by what the run asks
//! (the server's timers fire at their exact times); the server's clock reads that time
//! ([`SimClock`]); `select!`s that could pick among ready branches at random are biased. The
//! trace hash covers every choice, every frame the clients read and every observation of the
//! queues (not the disk's bytes: a password hash's salt is random).
//!
//! The network between clients and server is the door's in-memory stream; a simulated
//! network for the cluster work plugs in where [`Client`] gets its stream.
//!
//! # Layout
//!
//! - `process`: [`Process`], one server lifetime (runtime, server, fence), and [`SimClock`].
//! - `client`: [`Client`], a scripted AMQP client over the door.
//! - `ledger`: [`Ledger`], the reference model.
//! - `room`: the disk's room (a small volume, another writer filling it) and the liveness
//!   checks of a full disk.
//! - this file: [`ServerWorld`], one run: steps, faults, restarts, checks.

mod client;
mod ledger;
mod process;
mod room;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use tokio::sync::oneshot;
use wharf_broker::{BrokerError, Reply};
use wharf_clock::Clock;
use wharf_server::{AdminQuery, AdminRequest, AdminView};
use wharf_wal::Storage;

pub use client::{Client, Incoming};
pub use ledger::{Holder, InFlight, Ledger, Queues};
pub use process::{Process, ProcessConfig, SimClock};

use crate::disk::Disk;
use crate::model::{
    DEAD, LEASE, LEASE_MS, TTL, TTL_QUEUE_MS, WORK, body_len, body_of, key_of, policy_ttl,
};
use crate::rng::Rng;
use crate::{Stats, Violation};

/// Wall-clock start of every run (ms since the epoch).
const T0_MS: u64 = 1_700_000_000_000;
/// The clients, by index.
const PUBLISHERS: [usize; 2] = [0, 1];
const CONSUMER: usize = 2;
const GETTER: usize = 3;
const ADMIN: usize = 4;
const CLIENTS: usize = 5;
/// The consumer's prefetch.
const PREFETCH: u16 = 4;
/// Virtual time a settling round lets pass (ms).
const ROUND_MS: u64 = 1;

/// Two of the resource monitor's checks (`RESOURCE_CHECK_INTERVAL`, a second): by then a log
/// paused on a full disk was retried.
const RETRY_MS: u64 = 2_000;

/// A publisher in confirm mode: sequence numbers not confirmed yet, to keys.
#[derive(Debug, Default)]
struct Publisher {
    next_seq: u64,
    unconfirmed: BTreeMap<u64, u64>,
    /// Told `connection.blocked` (and not `unblocked` since).
    blocked: bool,
}

/// The simulated disk's room: a volume of the seed's size, or another writer's files
/// filling it for a few steps.
#[derive(Debug, Default)]
struct Room {
    /// The volume's capacity (`None`: unlimited).
    volume_bytes: Option<u64>,
    /// Steps left while another writer fills the disk (0: none).
    filled_steps: u32,
    /// Until when (virtual ms) the log may still be paused after the disk was filled (its
    /// retry is the resource monitor's next check).
    tight_until_ms: u64,
}

/// A policy change sent through the management path, waiting for its answer.
type PolicyWait = (Option<u64>, oneshot::Receiver<Result<Reply, BrokerError>>);

/// One run of the whole server.
#[derive(Debug)]
pub struct ServerWorld {
    rng: Rng,
    disk: Disk,
    clock: Arc<SimClock>,
    process: Option<Process>,
    config: ProcessConfig,
    clients: Vec<Client>,
    publishers: [Publisher; 2],
    consumer_held: Vec<(u64, u64)>,
    getter_held: Vec<(u64, u64)>,
    ledger: Ledger,
    next_key: u64,
    /// An fsync or write failure was armed for this process lifetime.
    fault_armed: bool,
    policy_waiting: Vec<PolicyWait>,
    room: Room,
    /// Since when the consumer had room while `work` had ready messages.
    starved_since_ms: Option<u64>,
    /// `basic.get`s sent and not answered yet.
    gets_waiting: usize,
    /// The run's statistics and trace hash.
    pub stats: Stats,
}

fn debug() -> bool {
    std::env::var("WHARF_SIM_DEBUG").is_ok()
}

fn table(pairs: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(k.into(), v);
    }
    t
}

fn long(ms: u64) -> AMQPValue {
    AMQPValue::LongInt(i32::try_from(ms).unwrap_or(i32::MAX))
}

impl ServerWorld {
    /// A new run of `seed`: the server started on an empty disk, the clients connected, the
    /// topology declared.
    ///
    /// # Errors
    /// A violation while starting.
    pub fn new(seed: u64) -> Result<Self, Violation> {
        let mut rng = Rng::new(seed);
        let mut config = ProcessConfig {
            message_memory_bytes: rng.below(16 * 1024),
            segment_bytes: (16 * 1024) << rng.below(3),
            checkpoint_log_bytes_min: (8 * 1024) << rng.below(4),
            disk_free_limit_bytes: 0,
        };
        let mut room = Room::default();
        // A third of the seeds run on a small volume that their own messages fill (S-DISK-1):
        // the alarm's limit, the segments in use and a little more.
        if rng.chance(333) {
            let segment = config.segment_bytes;
            // Room at the start for the first segment, the next one's reservation (S-DISK-1),
            // the limit and its hysteresis (a tenth: more than the alarm's 5 %), and one to three
            // segments more.
            let limit = segment / 4 + rng.below(2 * segment);
            config.disk_free_limit_bytes = limit;
            let start = 2 * segment + limit + limit / 10;
            room.volume_bytes = Some(start + segment + rng.below(2 * segment));
        } else if rng.chance(500) {
            config.disk_free_limit_bytes = rng.below(4 * config.segment_bytes);
        }
        let mut world = ServerWorld {
            disk: Disk::new(rng.next_u64()),
            rng,
            clock: Arc::new(SimClock::new(T0_MS)),
            process: None,
            config,
            clients: Vec::new(),
            publishers: [Publisher::default(), Publisher::default()],
            consumer_held: Vec::new(),
            getter_held: Vec::new(),
            ledger: Ledger::default(),
            next_key: 1,
            fault_armed: false,
            policy_waiting: Vec::new(),
            room,
            starved_since_ms: None,
            gets_waiting: 0,
            stats: Stats::default(),
        };
        world.disk.sim().set_capacity(world.room.volume_bytes);
        // A third of the seeds run on a slow disk: fsyncs of up to 1..20 ms, one in 20..220
        // stalling for up to 0.1..3 s more.
        if world.rng.chance(333) {
            let seed = world.rng.next_u64();
            let sync_ms_max = 1 + world.rng.below(20);
            let stall_one_in = 20 + world.rng.below(200);
            let stall_ms_max = 100 + world.rng.below(2900);
            world.disk.set_slow(crate::disk::Slowness::new(
                seed,
                sync_ms_max,
                stall_one_in,
                stall_ms_max,
            ));
        }
        world.boot()?;
        Ok(world)
    }

    fn trace(&mut self, what: u64) {
        self.stats.trace = (self.stats.trace ^ what).wrapping_mul(0x0100_0000_01b3);
    }

    fn trace_str(&mut self, s: &str) {
        for chunk in s.as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.trace(u64::from_le_bytes(word));
        }
    }

    /// The server's clock now.
    fn now(&self) -> u64 {
        match &self.process {
            Some(p) => p.block_on(async { self.clock.now_ms() }),
            None => self.clock.now_ms(),
        }
    }

    fn process(&self) -> Result<&Process, Violation> {
        self.process
            .as_ref()
            .ok_or_else(|| Violation("no server process between steps".into()))
    }

    /// One step chosen by the seed, then the step settled and judged.
    ///
    /// # Errors
    /// The first violation of the model.
    pub fn step(&mut self) -> Result<(), Violation> {
        self.stats.steps += 1;
        let roll = self.rng.below(100);
        if debug() {
            eprintln!(
                "STEP {} roll {roll} now {} trace {}",
                self.stats.steps,
                self.now(),
                self.stats.trace
            );
        }
        self.trace(roll);
        match roll {
            0..30 => self.publish(),
            30..46 => self.consumer_acts(),
            46..58 => self.getter_acts(),
            58..74 => {
                let dt = 1 + self.rng.below(2500);
                self.advance(dt)?;
            }
            74..77 => self.change_policy()?,
            77..79 => self.declare_lease(),
            79..83 => return self.restart(false, false),
            83..86 => return self.restart(true, false),
            86..89 => self.arm_fault(true),
            89..90 => self.arm_fault(false),
            90..92 => return self.restart(false, true),
            92..94 => self.fill_disk(),
            _ => {
                let dt = 1 + self.rng.below(300);
                self.advance(dt)?;
            }
        }
        self.end_step()
    }

    fn publish(&mut self) {
        let p = self.rng.index(2);
        let queue = if self.rng.below(10) < 6 { WORK } else { TTL };
        let own = self.rng.chance(300).then(|| 100 + self.rng.below(4000));
        let len = body_len(&mut self.rng);
        let key = self.next_key;
        self.next_key += 1;
        let publisher = &mut self.publishers[p];
        let seq = publisher.next_seq.max(1);
        publisher.next_seq = seq + 1;
        publisher.unconfirmed.insert(seq, key);
        let now = self.now();
        self.ledger.published(key, queue, now, own);
        self.stats.published += 1;
        let client = PUBLISHERS[p];
        self.clients[client].publish(queue, &body_of(key, len), own);
    }

    fn consumer_acts(&mut self) {
        if self.consumer_held.is_empty() {
            return;
        }
        let i = self.rng.index(self.consumer_held.len());
        let (tag, key) = self.consumer_held.remove(i);
        // Ack half the time, requeue or reject a quarter each.
        let requeue = match self.rng.below(4) {
            0 | 1 => None,
            n => Some(n == 2),
        };
        self.settle_delivery(CONSUMER, tag, key, requeue);
    }

    fn getter_acts(&mut self) {
        if self.getter_held.len() < 3 && self.rng.chance(600) {
            self.get();
            return;
        }
        if self.getter_held.is_empty() {
            return;
        }
        let i = self.rng.index(self.getter_held.len());
        let (tag, key) = self.getter_held.remove(i);
        // Ack three times in five, requeue or reject once each.
        let requeue = match self.rng.below(5) {
            0..3 => None,
            n => Some(n == 3),
        };
        self.settle_delivery(GETTER, tag, key, requeue);
    }

    fn get(&mut self) {
        self.gets_waiting += 1;
        self.clients[GETTER].get(DEAD);
    }

    /// The client acks delivery `tag` of `key` (`None`), or rejects it with or without
    /// requeue.
    fn settle_delivery(&mut self, client: usize, tag: u64, key: u64, requeue: Option<bool>) {
        let c = &mut self.clients[client];
        match requeue {
            None => c.ack(tag),
            Some(requeue) => c.reject(tag, requeue),
        }
        self.ledger
            .settled(key, requeue.is_none(), requeue.unwrap_or(false));
    }

    /// Time passes: the server's timers fire, each at its time, while the clients wait.
    fn advance(&mut self, dt: u64) -> Result<(), Violation> {
        self.flush()?;
        // The sleep is made inside the runtime (it needs its timer).
        self.process()?
            .block_on(async { tokio::time::sleep(Duration::from_millis(dt)).await });
        Ok(())
    }

    /// A policy on `ttl` with a `message-ttl` (S-TTL-11), or its removal, through the
    /// management path (answered once durable).
    fn change_policy(&mut self) -> Result<(), Violation> {
        let ttl = match self.rng.below(5) {
            0 => Some(500),
            1 => Some(1000),
            2 => Some(3000),
            _ => None,
        };
        if ttl.is_none() && self.ledger.policy().is_none() {
            return Ok(());
        }
        self.ledger.policy_sent(ttl);
        let (done, answer) = oneshot::channel();
        let cmd = Box::new(crate::clients::policy(ttl));
        let p = self.process()?;
        p.block_on(
            p.server()
                .admin_request(AdminRequest::Command { cmd, done }),
        );
        self.policy_waiting.push((ttl, answer));
        Ok(())
    }

    /// `lease`, with its lease (S-QEXP-1); declaring it again renews it (S-QEXP-2).
    fn declare_lease(&mut self) {
        let now = self.now();
        self.clients[ADMIN].declare(LEASE, table(vec![("x-expires", long(LEASE_MS))]));
        self.ledger.lease_end_ms = Some(now + LEASE_MS);
    }

    /// The next fsync (or write) fails, within the next few.
    fn arm_fault(&mut self, sync: bool) {
        let n = self.rng.below(3);
        self.fault_armed = true;
        self.stats.sync_faults += u64::from(sync);
        self.stats.write_faults += u64::from(!sync);
        self.disk.fail_soon(sync, n);
    }

    /// Writes what every client queued.
    fn flush(&mut self) -> Result<(), Violation> {
        let Some(p) = self.process.as_ref() else {
            return Err(Violation("no server process to write to".into()));
        };
        for c in &mut self.clients {
            p.block_on(c.flush());
        }
        Ok(())
    }

    /// Lets the server work until it has nothing left to do and the clients have read all of
    /// it: rounds of a millisecond until no client reads a byte.
    fn settle(&mut self) -> Result<(), Violation> {
        self.flush()?;
        loop {
            let Some(p) = self.process.as_ref() else {
                return Err(Violation("no server process to settle".into()));
            };
            p.block_on(async { tokio::time::sleep(Duration::from_millis(ROUND_MS)).await });
            let mut arrived = false;
            let mut all = Vec::new();
            for (i, c) in self.clients.iter_mut().enumerate() {
                let (events, any) = p.block_on(c.poll());
                arrived |= any;
                all.extend(events.into_iter().map(|e| (i, e)));
            }
            for (i, e) in all {
                self.receive(i, e)?;
            }
            if !arrived {
                // A slow disk: a batch may still wait for its fsync; time passes until then.
                let now = self.now();
                let busy_until = self.disk.slow().map_or(0, |s| s.busy_until_ms());
                // (At `busy_until` itself the waiter may not have run yet: one round past it.)
                if now <= busy_until {
                    let p = self.process()?;
                    p.block_on(async {
                        tokio::time::sleep(Duration::from_millis(busy_until - now)).await;
                    });
                    continue;
                }
                return Ok(());
            }
        }
    }

    fn receive(&mut self, client: usize, e: Incoming) -> Result<(), Violation> {
        if debug() {
            eprintln!("IN {client} {e:?}");
        }
        self.trace(client as u64);
        self.trace_str(&format!("{e:?}"));
        match e {
            Incoming::Confirm { tag, multiple, ack } => {
                if !ack {
                    return Err(Violation(format!("client {client}: publish {tag} nacked")));
                }
                let p = usize::from(client == PUBLISHERS[1]);
                let unconfirmed = &mut self.publishers[p].unconfirmed;
                let seqs: Vec<u64> = if multiple {
                    unconfirmed.range(..=tag).map(|(s, _)| *s).collect()
                } else {
                    unconfirmed
                        .contains_key(&tag)
                        .then_some(tag)
                        .into_iter()
                        .collect()
                };
                if seqs.is_empty() {
                    return Err(Violation(format!(
                        "client {client}: confirm {tag} (multiple {multiple}) of nothing unconfirmed"
                    )));
                }
                let now = self.now();
                for seq in seqs {
                    if let Some(key) = self.publishers[p].unconfirmed.remove(&seq) {
                        self.stats.confirmed += 1;
                        self.ledger.confirmed(key, now);
                    }
                }
            }
            Incoming::Message {
                tag,
                redelivered,
                body,
                ..
            } => {
                self.stats.delivered += 1;
                let now = self.now();
                if client == CONSUMER {
                    let key =
                        self.ledger
                            .delivered(Holder::Consumer(tag), redelivered, &body, now)?;
                    self.consumer_held.push((tag, key));
                } else if client == GETTER {
                    self.gets_waiting = self.gets_waiting.saturating_sub(1);
                    let key =
                        self.ledger
                            .delivered(Holder::Getter(tag), redelivered, &body, now)?;
                    self.getter_held.push((tag, key));
                } else {
                    return Err(Violation(format!("client {client} got a message")));
                }
            }
            Incoming::GetEmpty => self.gets_waiting = self.gets_waiting.saturating_sub(1),
            Incoming::Blocked(on) => {
                let Some(p) = PUBLISHERS.iter().position(|&c| c == client) else {
                    return Err(Violation(format!(
                        "client {client}, which never published, told blocked {on} (S-DISK-2)"
                    )));
                };
                if self.publishers[p].blocked == on {
                    return Err(Violation(format!(
                        "client {client}: told blocked {on} twice"
                    )));
                }
                self.publishers[p].blocked = on;
                self.stats.blocked += u64::from(on);
            }
            Incoming::Reply(name) => {
                if client == ADMIN && name.contains("QosOk") {
                    self.ledger.barrier_answered();
                }
            }
            Incoming::ChannelClosed(code, text) | Incoming::ConnectionClosed(code, text) => {
                if !self.fault_armed {
                    return Err(Violation(format!(
                        "client {client}: closed by the server: {code} {text}"
                    )));
                }
            }
            Incoming::HungUp => {
                if !self.fault_armed {
                    return Err(Violation(format!("client {client}: the server hung up")));
                }
            }
        }
        Ok(())
    }

    /// The end of a step: settled, then the server's state judged, and now and then a
    /// durability barrier.
    fn end_step(&mut self) -> Result<(), Violation> {
        self.settle()?;
        if self.fail_stopped()? {
            return Ok(());
        }
        if self.room.filled_steps > 0 || self.room.volume_bytes.is_some() {
            self.disk
                .check_no_partial_checkpoint(std::path::Path::new(process::DATA_DIR))?;
        }
        if self.room.filled_steps > 0 {
            self.room.filled_steps -= 1;
            if self.room.filled_steps == 0 {
                // The log, if it paused, retries at the resource monitor's next check.
                self.room.tight_until_ms = self.now() + RETRY_MS;
                self.unfill_disk();
            }
        }
        self.answers();
        self.observe()?;
        if self.rng.chance(300) {
            self.ledger.barrier_sent();
            self.clients[ADMIN].qos(0);
            self.settle()?;
            if self.fail_stopped()? {
                return Ok(());
            }
            self.observe()?;
        }
        Ok(())
    }

    /// Management answers that arrived: their changes are durable.
    fn answers(&mut self) {
        let mut waiting = std::mem::take(&mut self.policy_waiting);
        waiting.retain_mut(|(ttl, answer)| match answer.try_recv() {
            Ok(Ok(_)) => {
                self.ledger.policy_durable(*ttl);
                false
            }
            Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => false,
            Err(oneshot::error::TryRecvError::Empty) => true,
        });
        self.policy_waiting = waiting;
    }

    /// The queues now, as a management query sees them (`None`: the broker task is gone).
    fn queues(&self) -> Result<Option<Queues>, Violation> {
        let (tx, rx) = oneshot::channel();
        let query: AdminQuery = Box::new(move |view: &AdminView<'_>| {
            let b = view.broker;
            let mut q = Queues::default();
            for name in [WORK, TTL, DEAD] {
                let keys = b
                    .ready_messages("/", name)
                    .iter()
                    .filter_map(|(m, _)| key_of(&m.body))
                    .collect();
                q.ready.insert(name, keys);
            }
            q.lease_exists = b.queues("/").iter().any(|i| i.name == LEASE);
            q.policy_ttl_ms = b
                .policies("/")
                .into_iter()
                .find(|p| p.policy.name == "p")
                .and_then(|p| policy_ttl(&p.policy.definition));
            let _ = tx.send(q);
        });
        let p = self.process()?;
        Ok(p.block_on(async {
            p.server().admin_request(AdminRequest::Query(query)).await;
            rx.await.ok()
        }))
    }

    /// Judges the server's queues against the model now.
    fn observe(&mut self) -> Result<(), Violation> {
        let now = self.now();
        let Some(q) = self.queues()? else {
            // The log may fail while the query waits (a checkpoint sealing a segment on a
            // faulty disk): a fail-stop then, not a lost broker task.
            if self.fail_stopped()? {
                return Ok(());
            }
            return Err(Violation("the broker task is gone, not stopped".into()));
        };
        let in_flight = if self.log_may_be_paused(now)? {
            InFlight {
                work: usize::from(PREFETCH).saturating_sub(self.consumer_held.len()),
                dead: self.gets_waiting,
            }
        } else {
            InFlight::default()
        };
        self.ledger.expire(now, &q, in_flight);
        self.trace(now);
        self.trace_str(&format!("{q:?}"));
        if debug() {
            let free = self
                .disk
                .sim()
                .available_bytes(std::path::Path::new(process::DATA_DIR));
            eprintln!(
                "OBSERVE now {now} free {free:?} alarm {:?} room {:?} gets {} held {} busy {:?}",
                self.process()?.server().blocked_reason(),
                self.room,
                self.gets_waiting,
                self.consumer_held.len(),
                self.disk.slow().map(|s| s.busy_until_ms()),
            );
        }
        self.ledger.check_queues(&q, now, in_flight)?;
        self.check_consumer_progress(&q, now)
    }

    /// Whether the log failed and the server stopped (fail-stop): then it restarts, with a
    /// power loss now and then.
    fn fail_stopped(&mut self) -> Result<bool, Violation> {
        if !self.process()?.stopped() {
            return Ok(false);
        }
        if !self.fault_armed {
            return Err(Violation(
                "the server stopped with no fault injected".into(),
            ));
        }
        self.stats.fail_stops += 1;
        let power = self.rng.chance(500);
        self.restart(power, false)?;
        Ok(true)
    }

    /// The process ends (a crash, a power loss on top, or a clean stop) and starts again
    /// through recovery, which is checked against the model before any client connects.
    fn restart(&mut self, power_loss: bool, clean: bool) -> Result<(), Violation> {
        // Whatever the process took, it took by now (S-TTL: the clock of its enqueues).
        self.ledger.process_ended(self.now());
        let Some(process) = self.process.take() else {
            return Err(Violation("restart without a running server".into()));
        };
        if debug() {
            eprintln!("RESTART power={power_loss} clean={clean}");
        }
        let clients = std::mem::take(&mut self.clients);
        if clean {
            self.stats.clean_restarts += 1;
            for c in clients {
                process.block_on(c.hang_up());
            }
            let excused = self.stop_may_fail();
            match process.stop() {
                Ok(()) => {}
                Err(_) if excused => self.stats.fail_stops += 1,
                Err(e) => return Err(Violation(format!("clean stop failed: {e}"))),
            }
        } else {
            self.stats.crashes += 1;
            drop(clients);
            process.crash();
        }
        self.stats.power_losses += u64::from(power_loss);
        self.disk.process_ended(power_loss);
        self.fault_armed = false;
        self.ledger.barriers_lost();
        self.starved_since_ms = None;
        self.gets_waiting = 0;
        self.unfill_disk();
        self.policy_waiting.clear();
        for p in &mut self.publishers {
            p.next_seq = 1;
            p.unconfirmed.clear();
            p.blocked = false;
        }
        self.consumer_held.clear();
        self.getter_held.clear();
        self.boot()
    }

    /// Recovery, checked against the model; then the clients connect, the administrator
    /// declares the topology, the consumer consumes.
    fn boot(&mut self) -> Result<(), Violation> {
        let process = Process::start(&self.disk, &self.clock, &self.config)
            .map_err(|e| Violation(format!("recovery failed: {e}")))?;
        self.process = Some(process);
        self.stats.recoveries += 1;
        let now = self.now();
        let Some(q) = self.queues()? else {
            return Err(Violation("the broker task is gone after recovery".into()));
        };
        self.trace_str(&format!("{q:?}"));
        self.ledger.check_recovered(&q, now)?;
        // S-QEXP-4: a full period again, from the end of recovery.
        self.ledger.lease_end_ms = q.lease_exists.then_some(now + LEASE_MS);
        let p = self.process()?;
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            // Within the runtime: the door spawns the connection's task.
            let Some(stream) = p.block_on(async { p.server().connect_in_memory() }) else {
                return Err(Violation(
                    "the server refused an in-memory connection".into(),
                ));
            };
            clients.push(Client::new(stream));
        }
        self.clients = clients;
        let admin = &mut self.clients[ADMIN];
        let dlx = || {
            (
                "x-dead-letter-exchange",
                AMQPValue::LongString(LongString::from("dead")),
            )
        };
        admin.declare_exchange("dead", "fanout");
        admin.declare(DEAD, FieldTable::default());
        admin.bind(DEAD, "dead");
        admin.declare(WORK, table(vec![dlx()]));
        admin.declare(
            TTL,
            table(vec![dlx(), ("x-message-ttl", long(TTL_QUEUE_MS))]),
        );
        for p in PUBLISHERS {
            self.clients[p].confirm_select();
        }
        self.settle()?;
        let consumer = &mut self.clients[CONSUMER];
        consumer.qos(PREFETCH);
        consumer.consume(WORK, "worker");
        self.end_step()
    }

    /// The end of a run: time passes until every TTL has run out, a clean stop, and the
    /// restart must bring back what the model allows.
    ///
    /// # Errors
    /// The first violation.
    pub fn finish(mut self) -> Result<Stats, Violation> {
        self.advance(10_000)?;
        self.end_step()?;
        if self.room.volume_bytes.is_some() || self.publishers.iter().any(|p| p.blocked) {
            self.drain()?;
        }
        self.restart(false, true)?;
        self.trace(self.ledger.len() as u64);
        self.trace(self.ledger.confirmed_held() as u64);
        if let Some(slow) = self.disk.slow() {
            (self.stats.slow_ios, self.stats.stalls) = slow.counts();
            self.trace(self.stats.slow_ios);
            self.trace(self.stats.stalls);
        }
        if let Some(p) = self.process.take() {
            self.final_stop(p)?;
        }
        Ok(self.stats)
    }
}

/// Runs seed `seed` of the whole-server simulation for `steps` steps, then a clean stop and
/// a final checked recovery.
///
/// # Errors
/// The first violation, prefixed with the seed and step and the command that reruns it.
pub fn run(seed: u64, steps: u64) -> Result<Stats, Violation> {
    let at = |step: u64, v: Violation| {
        Violation(format!(
            "seed {seed} step {step}: {v} (rerun: WHARF_SIM_SERVER_SEED={seed} \
             WHARF_SIM_STEPS={steps} cargo test -p wharf-sim --test sim server)"
        ))
    };
    let mut world = ServerWorld::new(seed).map_err(|v| at(0, v))?;
    for step in 1..=steps {
        world.step().map_err(|v| at(step, v))?;
    }
    world.finish().map_err(|v| at(steps + 1, v))
}
