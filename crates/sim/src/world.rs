//! [`World`]: one seeded run. A disk, a clock, a node (the broker process), the network and
//! the clients; each step the seed picks what happens next (a client acts, time passes, a
//! checkpoint, or a fault: a process crash, a power loss, a failing fsync or write, a full
//! disk, a clean restart), the node settles the step as the broker task settles a batch, and
//! the model judges what the node logged and what the clients saw. Every restart goes through
//! the real recovery and is checked against the model before anything else happens.

use wharf_broker::Command;
use wharf_wal::Storage;

use crate::clients::{self, ADMIN, CLIENTS, CONSUMER, GETTER, Holder, PUBLISHERS, Publisher};
use crate::disk::Disk;
use crate::model::{self, DEAD, LEASE, Model, Removal, TTL, WORK};
use crate::net::Network;
use crate::node::{DATA_DIR, Node, NodeConfig, Output};
use crate::rng::Rng;
use crate::{Stats, Violation};

/// Wall-clock start of every run (ms since the epoch).
const T0_MS: u64 = 1_700_000_000_000;

/// One run.
#[derive(Debug)]
pub struct World {
    rng: Rng,
    disk: Disk,
    node: Option<Node>,
    net: Network,
    model: Model,
    now_ms: u64,
    next_key: u64,
    publishers: [Publisher; 2],
    consumer: Holder,
    getter: Holder,
    /// Steps left with the disk full (nothing is released meanwhile).
    disk_full_steps: u32,
    /// An fsync or write failure was armed for this process lifetime (it may still be
    /// pending: a clean stop may meet it).
    fault_armed: bool,
    config: NodeConfig,
    /// The run's statistics and trace hash.
    pub stats: Stats,
}

impl World {
    /// A new run of `seed`: the node started on an empty disk, the topology declared.
    ///
    /// # Errors
    /// A violation while starting.
    pub fn new(seed: u64) -> Result<World, Violation> {
        let mut rng = Rng::new(seed);
        let config = NodeConfig {
            message_memory_bytes: rng.below(16 * 1024),
            segment_bytes: wharf_wal::SEGMENT_BYTES_MIN,
        };
        let mut world = World {
            disk: Disk::new(rng.next_u64()),
            rng,
            node: None,
            net: Network::default(),
            model: Model::default(),
            now_ms: T0_MS,
            next_key: 1,
            publishers: [Publisher::default(), Publisher::default()],
            consumer: Holder::default(),
            getter: Holder::default(),
            disk_full_steps: 0,
            fault_armed: false,
            config,
            stats: Stats::default(),
        };
        world.boot()?;
        world.cmd(ADMIN, clients::declare_lease());
        world.model.lease_started(world.now_ms);
        world.settle()?;
        Ok(world)
    }

    /// The run's disk (for tools that look at what a run wrote).
    #[must_use]
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    #[expect(
        clippy::expect_used,
        reason = "between steps a node always runs (restart starts one)"
    )]
    fn node(&mut self) -> &mut Node {
        self.node.as_mut().expect("a node runs between steps")
    }

    fn cmd(&mut self, conn: u64, cmd: Command) {
        let now = self.now_ms;
        let _ = self.node().handle(conn, cmd, now);
    }

    fn trace(&mut self, what: u64) {
        self.stats.trace = (self.stats.trace ^ what).wrapping_mul(0x0100_0000_01b3);
    }

    /// Folds `bytes` into the trace, eight at a time, and their length.
    fn trace_bytes(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            self.trace(u64::from_le_bytes(word));
        }
        for &b in words.remainder() {
            self.trace(u64::from(b));
        }
        self.trace(bytes.len() as u64);
    }

    /// One step chosen by the seed.
    ///
    /// # Errors
    /// The first violation of the model.
    pub fn step(&mut self) -> Result<(), Violation> {
        self.stats.steps += 1;
        let roll = self.rng.below(100);
        if std::env::var("WHARF_SIM_DEBUG").is_ok() {
            eprintln!("STEP {} roll {roll} now {}", self.stats.steps, self.now_ms);
        }
        self.trace(roll);
        let faults_allowed = self.disk_full_steps == 0;
        match roll {
            0..30 => self.publish(),
            30..46 => self.consumer_acts(),
            46..58 => self.getter_acts(),
            58..74 => {
                let dt = 1 + self.rng.below(2500);
                self.advance(dt);
            }
            74..77 => self.change_policy(),
            77..79 => {
                self.cmd(ADMIN, clients::declare_lease());
                self.model.lease_started(self.now_ms);
            }
            79..84 => self.checkpoint(),
            84..87 if faults_allowed => return self.restart(false, false),
            87..90 if faults_allowed => return self.restart(true, false),
            90..92 if faults_allowed => self.arm_fault(true),
            92..93 if faults_allowed => self.arm_fault(false),
            93..95 if faults_allowed => self.fill_disk(),
            95..97 if faults_allowed => return self.restart(false, true),
            _ => {
                let dt = 1 + self.rng.below(300);
                self.advance(dt);
            }
        }
        self.settle()
    }

    fn publish(&mut self) {
        let p = self.rng.index(2);
        let queue = match self.rng.below(10) {
            0..5 => WORK,
            5..8 => TTL,
            _ => LEASE,
        };
        let own = (queue != LEASE && self.rng.chance(300)).then(|| 100 + self.rng.below(4000));
        let len = model::body_len(&mut self.rng);
        let key = self.next_key;
        self.next_key += 1;
        let seq = self.publishers[p].next_seq.max(1);
        self.publishers[p].next_seq = seq + 1;
        let cmd = clients::publish(queue, model::body_of(key, len), own);
        let now = self.now_ms;
        let routed = self.node().publish(PUBLISHERS[p], seq, cmd, now);
        if routed {
            self.model.published(key, queue, now, own);
            self.stats.published += 1;
        }
        self.publishers[p]
            .unconfirmed
            .insert(seq, routed.then_some(key));
    }

    fn consumer_acts(&mut self) {
        if self.consumer.held.is_empty() {
            return;
        }
        let (tag, key) = self
            .consumer
            .held
            .remove(self.rng.index(self.consumer.held.len()));
        match self.rng.below(4) {
            0 | 1 => {
                self.model.removal_asked(key, Removal::Ack);
                self.cmd(CONSUMER, clients::ack(CONSUMER, tag));
            }
            2 => self.cmd(CONSUMER, clients::reject(CONSUMER, tag, true)),
            _ => {
                self.model.removal_asked(key, Removal::Reject);
                self.cmd(CONSUMER, clients::reject(CONSUMER, tag, false));
            }
        }
    }

    fn getter_acts(&mut self) {
        if self.getter.held.len() < 3 && self.rng.chance(600) {
            self.cmd(GETTER, clients::get(GETTER, DEAD));
            return;
        }
        if self.getter.held.is_empty() {
            return;
        }
        let (tag, key) = self
            .getter
            .held
            .remove(self.rng.index(self.getter.held.len()));
        match self.rng.below(5) {
            0..3 => {
                self.model.removal_asked(key, Removal::Ack);
                self.cmd(GETTER, clients::ack(GETTER, tag));
            }
            3 => self.cmd(GETTER, clients::reject(GETTER, tag, true)),
            _ => {
                self.model.removal_asked(key, Removal::Reject);
                self.cmd(GETTER, clients::reject(GETTER, tag, false));
            }
        }
    }

    fn change_policy(&mut self) {
        let ttl = match self.rng.below(5) {
            0 => Some(500),
            1 => Some(1000),
            2 => Some(3000),
            _ => None,
        };
        let exists = self
            .node()
            .broker()
            .policies("/")
            .iter()
            .any(|p| p.policy.name == "p");
        if ttl.is_none() && !exists {
            return;
        }
        self.model.policy_changed(ttl);
        self.cmd(ADMIN, clients::policy(ttl));
    }

    fn advance(&mut self, dt: u64) {
        let from = self.now_ms;
        self.now_ms += dt;
        let now = self.now_ms;
        self.node().advance_to(from, now);
    }

    fn checkpoint(&mut self) {
        self.stats.checkpoints += 1;
        let r = self.node().checkpoint();
        if std::env::var("WHARF_SIM_DEBUG").is_ok() {
            eprintln!("CHECKPOINT {r:?}");
        }
        if r.is_err() {
            self.stats.checkpoints_failed += 1;
        }
    }

    /// The next fsync (or write) fails, within the next few.
    fn arm_fault(&mut self, sync: bool) {
        let n = self.rng.below(3);
        self.fault_armed = true;
        self.stats.sync_faults += u64::from(sync);
        self.stats.write_faults += u64::from(!sync);
        self.disk.fail_soon(sync, n);
    }

    /// The disk fills up to within a few KiB for a few steps (S-DISK-1..4).
    fn fill_disk(&mut self) {
        self.stats.disk_full += 1;
        let used = self.disk.sim().used_bytes();
        self.disk
            .sim()
            .set_capacity(Some(used + self.rng.below(64 * 1024)));
        self.disk_full_steps = 1 + u32::try_from(self.rng.below(4)).unwrap_or(0);
    }

    /// Ends a step as the broker task ends a batch: fire due timers, log, release once
    /// durable, deliver to the clients, judge.
    fn settle(&mut self) -> Result<(), Violation> {
        let now = self.now_ms;
        self.node().advance_to(now, now);
        self.node().end_batch(now);
        for logged in self.node().take_logged() {
            self.trace_bytes(format!("{} {:?}", logged.now_ms, logged.events).as_bytes());
            self.model.logged(&logged.events, logged.now_ms)?;
        }
        if self.disk_full_steps > 0 {
            self.disk_full_steps -= 1;
            if self.disk_full_steps == 0 {
                self.disk.sim().set_capacity(None);
            }
            self.check_no_partial_checkpoint()?;
        }
        let released = self.node().release();
        self.trace(released.as_ref().map_or(0, |r| r.1));
        if self.node().failed() {
            self.stats.fail_stops += 1;
            let power = self.rng.chance(500);
            return self.restart(power, false);
        }
        let Some((outputs, _)) = released else {
            // The disk is full: the log holds the records, nothing is released.
            return self.check_on_time(now);
        };
        self.model.all_durable();
        self.net.send(outputs);
        for out in self.net.deliver() {
            self.receive(out)?;
        }
        self.check_on_time(now)
    }

    fn check_on_time(&self, now: u64) -> Result<(), Violation> {
        let Some(node) = self.node.as_ref() else {
            return Err(Violation("no node after a step".into()));
        };
        self.model.check_on_time(node.broker(), now)
    }

    /// S-DISK-4: a checkpoint that failed for want of space left no partial file.
    fn check_no_partial_checkpoint(&self) -> Result<(), Violation> {
        self.disk
            .check_no_partial_checkpoint(std::path::Path::new(DATA_DIR))
    }

    fn receive(&mut self, out: Output) -> Result<(), Violation> {
        self.trace_bytes(format!("{out:?}").as_bytes());
        match out {
            Output::Confirm { conn, seq, ack } => {
                self.trace(seq);
                let p = usize::from(conn == PUBLISHERS[1]);
                let Some(key) = self.publishers[p].unconfirmed.remove(&seq) else {
                    return Err(Violation(format!("client {conn}: confirm {seq} twice")));
                };
                if !ack {
                    return Err(Violation(format!("client {conn}: publish {seq} nacked")));
                }
                if let Some(key) = key {
                    self.stats.confirmed += 1;
                    self.model.confirmed(key)?;
                }
            }
            Output::Deliver {
                conn,
                tag,
                queue,
                id,
                body,
                ..
            } => {
                let key = self.model.delivered(&queue, id, &body)?;
                self.trace(key);
                self.stats.delivered += 1;
                let holder = if conn == CONSUMER {
                    &mut self.consumer
                } else {
                    &mut self.getter
                };
                holder.held.push((tag, key));
            }
            Output::GetEmpty { .. } => {}
            Output::ChannelClosed { conn, text } => {
                return Err(Violation(format!("client {conn}: channel closed: {text}")));
            }
        }
        Ok(())
    }

    /// The process ends (a crash, a power loss on top, or a clean stop) and starts again
    /// through recovery; the recovered state is checked against the model first.
    fn restart(&mut self, power_loss: bool, clean: bool) -> Result<(), Violation> {
        let Some(node) = self.node.take() else {
            return Err(Violation("restart without a running node".into()));
        };
        if std::env::var("WHARF_SIM_DEBUG").is_ok() {
            eprintln!(
                "RESTART power={power_loss} clean={clean} failed={}",
                node.failed()
            );
        }
        if clean {
            self.stats.clean_restarts += 1;
            match node.stop() {
                Ok(()) => {}
                // The stop met the armed fault: the process fails there, as after a crash.
                Err(_) if self.fault_armed => self.stats.fail_stops += 1,
                Err(e) => return Err(Violation(format!("clean stop failed: {e}"))),
            }
        } else {
            self.stats.crashes += 1;
            node.crash();
        }
        self.stats.power_losses += u64::from(power_loss);
        self.disk.process_ended(power_loss);
        self.fault_armed = false;
        self.net.reset();
        for p in &mut self.publishers {
            p.reset();
        }
        self.consumer.held.clear();
        self.getter.held.clear();
        self.model.forget_requests();
        self.boot()
    }

    /// Recovery, the model's check of what came back, then the clients reconnect.
    fn boot(&mut self) -> Result<(), Violation> {
        let (node, _summary) = Node::start(&self.disk, self.config.clone())
            .map_err(|e| Violation(format!("recovery failed: {e}: {e:?}")))?;
        self.model.check_recovered(node.broker())?;
        self.stats.recoveries += 1;
        let lease_exists = node.broker().queues("/").iter().any(|q| q.name == LEASE);
        self.node = Some(node);
        if lease_exists {
            // S-QEXP-4: a full period again, from the end of recovery.
            self.model.lease_started(self.now_ms);
        } else {
            self.model.lease_end_ms = None;
        }
        let now = self.now_ms;
        self.node().open(now, &CLIENTS);
        for cmd in clients::topology() {
            self.cmd(ADMIN, cmd);
        }
        for cmd in clients::consume() {
            self.cmd(CONSUMER, cmd);
        }
        self.settle()
    }

    /// The end of a run: time passes until every TTL has run out, a clean stop, and the
    /// restart must bring back exactly what the model holds.
    ///
    /// # Errors
    /// The first violation.
    pub fn finish(mut self) -> Result<Stats, Violation> {
        self.disk_full_steps = 0;
        self.disk.sim().set_capacity(None);
        self.advance(10_000);
        self.settle()?;
        self.restart(false, true)?;
        self.stats.trace ^= self.model.msgs.len() as u64;
        if let Some(node) = self.node.take() {
            node.stop()
                .map_err(|e| Violation(format!("final stop failed: {e}")))?;
        }
        // Every byte the run left on its disk.
        let dir = std::path::Path::new(DATA_DIR);
        let names = self.disk.sim().list(dir);
        let names = names.map_err(|e| Violation(format!("listing the data directory: {e}")))?;
        for name in names {
            let bytes = self.disk.sim().file_bytes(&dir.join(&name));
            self.trace_bytes(name.as_bytes());
            self.trace_bytes(&bytes.unwrap_or_default());
        }
        Ok(self.stats)
    }
}
