//! The broker task's loop and its durability gate: drain a batch of messages, apply them,
//! log the batch's events with one `store.log`, then seal each touched outbox with the batch's
//! ticket and release what the durability waiter reports durable (S-DUR-3/4, S-DLX-7); the
//! expiry timer is re-armed after every batch, and while the store waits for disk space a
//! timer gives it a turn once a second (S-DISK-3).

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{error, warn};

use super::member;
use super::msg::CoreMsg;
use super::timings::{CoreTimings, TimedLoader};
use super::{BATCH_MSGS_MAX, Core, DurableFuture, TICKET_THIS_BATCH};
use crate::counters::MessageCounters;
use wharf_broker::{Broker, Event};
use wharf_clock::Clock;
use wharf_clock::Stopwatch;
use wharf_store::{Store, StoreError, Ticket};

impl Core {
    /// A broker task over a recovered broker and its store.
    pub fn new(mut broker: Broker, store: Store, clock: Arc<dyn Clock>) -> Self {
        let timings = CoreTimings::default();
        if let Some(inner) = broker.loader() {
            broker.set_loader(Arc::new(TimedLoader {
                inner,
                took: timings.read_back.clone(),
            }));
        }
        let (to_waiter, from_core) = mpsc::channel(4096);
        let (durable_tx, durable) = watch::channel(Ok(0));
        tokio::spawn(durability_waiter(from_core, durable_tx));
        let counters = MessageCounters {
            queues_at_start: broker.totals().queues,
            ..MessageCounters::default()
        };
        Core {
            broker,
            store: Some(store),
            clock,
            conns: HashMap::new(),
            events: Vec::new(),
            logged: Vec::new(),
            last_ticket: 0,
            dirty: HashSet::new(),
            dropped_dirty: Vec::new(),
            held: HashMap::new(),
            released_to: 0,
            waited_ticket: 0,
            to_waiter,
            durable,
            armed: None,
            stopping: false,
            ticks: Vec::new(),
            admin_waiting: VecDeque::new(),
            counters,
            registry: None,
            access: None,
            message_memory_bytes: wharf_base::limits::MESSAGE_MEMORY_BYTES,
            timings,
            inline_store: false,
            io_latency: None,
            replica: None,
            meta: None,
        }
    }

    /// Logs events produced before serving (recovery's `recovered(now)`).
    pub fn log_startup(&mut self, events: Vec<Event>) -> Result<(), StoreError> {
        self.events = events;
        self.log_batch()
    }

    /// Runs until shutdown; then makes everything durable and closes the store.
    pub async fn run(mut self, mut rx: mpsc::Receiver<CoreMsg>) -> Result<(), StoreError> {
        let mut batch = Vec::with_capacity(BATCH_MSGS_MAX);
        let mut sleep = Box::pin(tokio::time::sleep(Duration::ZERO));
        // S-DISK-3: while the store waits for room that nothing logged may bring, it gets a
        // turn once a second (`Store::waits_for_space`).
        let mut space = Box::pin(tokio::time::sleep(Duration::ZERO));
        let mut space_armed = false;
        // A member may lead already (S-CLU-6): take over before the first batch.
        if self.replica.is_some() {
            self.on_role();
            self.end_batch()?;
        }
        self.rearm(&mut sleep);
        loop {
            // A batch of messages: when it started, and how many (for the metrics).
            let mut drained = None;
            tokio::select! {
                biased;
                changed = self.durable.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                wake = member::wake(self.replica.as_mut(), self.meta.as_mut()) => {
                    if let member::Wake::Role = wake {
                        self.on_role();
                    }
                    // S-CLU-51: after any change on the groups' side.
                    self.converge();
                }
                () = &mut sleep, if self.armed.is_some() => {
                    self.armed = None;
                    self.expire();
                }
                () = &mut space, if space_armed => {
                    space_armed = false;
                    if let Some(store) = self.store.as_mut() {
                        store.recheck_space();
                    }
                }
                n = rx.recv_many(&mut batch, BATCH_MSGS_MAX) => {
                    if n == 0 {
                        break;
                    }
                    drained = Some((Stopwatch::start(), n));
                    for msg in batch.drain(..) {
                        self.on_msg(msg);
                    }
                }
            }
            let ended = self.end_batch();
            if let Some((started, n)) = drained {
                self.timings.batch.record_duration(started.elapsed());
                self.timings
                    .batch_messages
                    .record(u64::try_from(n).unwrap_or(u64::MAX));
            }
            if let Err(e) = ended {
                error!(error = %e, "write-ahead log failed; closing every connection");
                self.fail_all(LOG_FAILED);
                break;
            }
            if let Some(e) = self.replica_failure() {
                error!(error = %e, "the quorum queues' group failed this member; closing every connection");
                self.fail_all(
                    "this node stopped leading the quorum queues' group, or the group stopped",
                );
                break;
            }
            let durable_failure = self.durable.borrow().as_ref().err().cloned();
            if let Some(e) = durable_failure {
                error!(error = %e, "making the log durable failed; closing every connection");
                self.fail_all(LOG_FAILED);
                break;
            }
            if self.stopping {
                break;
            }
            self.rearm(&mut sleep);
            if !space_armed && self.store.as_ref().is_some_and(Store::waits_for_space) {
                space.set(tokio::time::sleep(
                    wharf_base::limits::RESOURCE_CHECK_INTERVAL,
                ));
                space_armed = true;
            }
        }
        self.close().await
    }

    /// After the loop: makes everything durable, closes the store (with a checkpoint after a
    /// clean stop) and lets the last frames go.
    async fn close(mut self) -> Result<(), StoreError> {
        if self.stopping {
            // In a group, the last frames (the 320 closes) wait for their gate: bounded.
            self.drain_gate().await;
        }
        let store = self.store.take();
        // A clean shutdown ends with a checkpoint (it refers to the queued messages, so it is
        // quick, S-DISK-9), so the next start replays almost nothing. Only when every event
        // was logged (the snapshot must match the log).
        let snapshot = self.events.is_empty().then(|| self.own_snapshot());
        let closed = match store {
            Some(store) if self.inline_store => close_store(store, snapshot),
            Some(store) => tokio::task::spawn_blocking(move || close_store(store, snapshot))
                .await
                .unwrap_or_else(|e| Err(StoreError::Log(format!("close task failed: {e}")))),
            None => Ok(()),
        };
        // Closing the store made everything logged durable: the last held frames (the 320
        // closes of a shutdown) may go. After a failure they were discarded (fail_all).
        // In a group, only what passed the gate: an entry not committed is never shown.
        if closed.is_ok() {
            let to = self.gate_passed().unwrap_or(Ticket::MAX);
            for outbox in self.held.values() {
                outbox.release(to);
            }
        }
        for c in self.conns.values() {
            c.outbox.flush();
        }
        closed
    }

    pub(super) fn now(&self) -> u64 {
        self.decide_now()
    }

    pub(super) fn rearm(&mut self, sleep: &mut Pin<Box<tokio::time::Sleep>>) {
        let next = self.broker.next_deadline();
        if next == self.armed {
            return;
        }
        self.armed = next;
        if let Some(deadline) = next {
            let wait_ms = deadline.saturating_sub(self.now());
            sleep.set(tokio::time::sleep(Duration::from_millis(wait_ms)));
        }
    }

    pub(super) fn expire(&mut self) {
        let out = self.broker.expire_due(self.now());
        self.apply_outcome(out, None);
    }

    pub(super) fn on_msg(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Open(open) => self.open_conn(*open),
            CoreMsg::Ops { conn, ops } => {
                for op in ops {
                    self.on_op(conn, op.channel, op.op);
                }
            }
            CoreMsg::Closed(conn) => self.drop_conn(conn),
            CoreMsg::Drained(conn) => self.unthrottle(conn),
            CoreMsg::Tick(done) => {
                self.expire();
                // Answered after this batch's effects are flushed (end_batch).
                self.ticks.push(done);
            }
            CoreMsg::Shutdown => self.shutdown(),
            CoreMsg::Admin(req) => self.admin(req),
        }
    }

    pub(super) fn log_batch(&mut self) -> Result<(), StoreError> {
        if let Some(meta) = self.meta.as_mut() {
            meta.take_definitions(&self.events);
        }
        self.split_batch();
        if !self.events.is_empty() {
            let store = self
                .store
                .as_ref()
                .ok_or_else(|| StoreError::Log("store closed".to_owned()))?;
            if let Some(ticket) = store.log(&self.events, &mut self.logged)? {
                self.last_ticket = ticket;
            }
            self.broker.messages_logged(&self.logged);
            self.logged.clear();
            self.events.clear();
        }
        Ok(())
    }

    /// Seals every outbox that got frames in this batch with the store's latest ticket,
    /// releases what is durable, and asks the durability waiter about the rest.
    pub(super) fn end_batch(&mut self) -> Result<(), StoreError> {
        self.log_batch()?;
        if let Some(failure) = self.broker.storage_failure() {
            return Err(StoreError::Log(failure.to_owned()));
        }
        // The broker now reflects the log exactly: a snapshot for a checkpoint fits here.
        if let Some(store) = self.store.as_mut() {
            let started = Stopwatch::start();
            let (broker, replica) = (&self.broker, &self.replica);
            if store.maybe_checkpoint_of(|| member::own_snapshot(broker, replica.as_ref())) {
                self.timings
                    .checkpoint_start
                    .record_duration(started.elapsed());
            }
        }
        // S-FLOW-1: publishers whose queues caught up may be read again.
        for conn in self.broker.flow_released() {
            if let Some(c) = self.conns.get(&conn.0) {
                c.outbox.set_flow(false);
            }
        }
        let store_watermark = self.watermark();
        let gate = self.gate_positions();
        let (ticket, watermark) = gate.unwrap_or((self.last_ticket, store_watermark));
        // Bodies of durable queued messages beyond the budget go back to disk (DESIGN
        // "Memory"); only when there is a store to read them back from.
        if self.store.is_some() {
            let started = Stopwatch::start();
            if self
                .broker
                .page_out(store_watermark, self.message_memory_bytes)
                > 0
            {
                self.timings.page_out.record_duration(started.elapsed());
            }
        }
        // Held outboxes keep only segments above the watermark they were last released at
        // (a segment sealed since was released as far as it could be when sealed): visit
        // them only once the watermark moved, not at every batch (issue 18: per-connection
        // work per batch).
        if watermark > self.released_to {
            self.held.retain(|_, outbox| outbox.release(watermark));
            self.released_to = watermark;
        }
        for conn in std::mem::take(&mut self.dirty) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.flush_acks();
                if c.outbox.seal(ticket, watermark) {
                    self.held.insert(conn, c.outbox.clone());
                }
            }
        }
        for (conn, outbox) in std::mem::take(&mut self.dropped_dirty) {
            if outbox.seal(ticket, watermark) {
                self.held.insert(conn, outbox);
            }
        }
        // Management answers of this batch wait for its ticket, like frames.
        let mut admin_holds = false;
        for entry in self.admin_waiting.iter_mut().rev() {
            match entry.0 {
                0 => {}
                TICKET_THIS_BATCH => {
                    entry.0 = ticket;
                    admin_holds = true;
                }
                _ => break,
            }
        }
        if gate.is_none()
            && (!self.held.is_empty() || admin_holds)
            && ticket > watermark
            && ticket > self.waited_ticket
            && let Some(store) = self.store.as_ref()
        {
            let durable = store.durable(ticket);
            let fut: DurableFuture = match self.io_latency.clone() {
                None => Box::pin(durable),
                // A slow disk (the simulation): the batch is durable once its I/O's time
                // passed; the waiter, which takes batches in order, sleeps it meanwhile.
                Some(latency) => Box::pin(async move {
                    durable.await?;
                    tokio::time::sleep(latency.take()).await;
                    Ok(())
                }),
            };
            self.waited_ticket = ticket;
            if self.to_waiter.try_send((ticket, fut)).is_err() {
                warn!("durability waiter is behind; frames wait for the next batch");
                self.waited_ticket = watermark;
            }
        }
        while self
            .admin_waiting
            .front()
            .is_some_and(|&(t, _)| t <= watermark)
        {
            if let Some((_, answer)) = self.admin_waiting.pop_front() {
                answer.send();
            }
        }
        for done in self.ticks.drain(..) {
            let _ = done.send(());
        }
        Ok(())
    }

    pub(super) fn watermark(&self) -> Ticket {
        let from_waiter = self.durable.borrow().as_ref().copied().unwrap_or(0);
        let from_store = self.store.as_ref().map_or(0, Store::durable_watermark);
        from_waiter.max(from_store)
    }
}

/// The end of a clean stop: the shutdown checkpoint (when `snapshot` matches the log), then
/// the store closed (everything logged made durable).
fn close_store(
    mut store: Store,
    snapshot: Option<wharf_broker::Snapshot>,
) -> Result<(), StoreError> {
    if let Some(snapshot) = snapshot
        && let Err(e) = store.checkpoint_at_shutdown(snapshot)
    {
        warn!(error = %e, "checkpoint at shutdown failed; the log keeps everything");
    }
    store.close()
}
/// The 541 text of a failed log.
const LOG_FAILED: &str = "write-ahead log failed";

/// Awaits the store's durability futures in ticket order and publishes the durable ticket
/// (or the failure) to the broker task. Never waits on the broker task, so the bounded channel
/// between them cannot deadlock.
pub(super) async fn durability_waiter(
    mut from_core: mpsc::Receiver<(Ticket, DurableFuture)>,
    durable: watch::Sender<Result<Ticket, String>>,
) {
    while let Some((ticket, fut)) = from_core.recv().await {
        match fut.await {
            Ok(()) => {
                durable.send_modify(|d| {
                    if let Ok(t) = d {
                        *t = (*t).max(ticket);
                    }
                });
            }
            Err(e) => {
                let _ = durable.send(Err(e.to_string()));
                return;
            }
        }
    }
}
