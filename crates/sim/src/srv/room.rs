//! The simulated disk's room in the whole-server simulation (S-DISK-1..4): a volume of the
//! seed's size that the run's own messages fill, another writer filling the disk for a few
//! steps, and the checks that follow from it: a consumer with room is never starved, and once
//! every queue is drained the publishers resume by themselves.

use super::{CONSUMER, GETTER, PREFETCH, Process, ServerWorld, Violation, process};
use crate::model::WORK;
use crate::srv::Queues;
use wharf_wal::Storage;

/// Virtual time a consumer with room may wait while its queue has ready messages before the
/// run calls it starved (S-DISK-2: consumers drain under the disk alarm): a few of the
/// monitor's checks (each one a retry of a log paused on a full disk) and checkpoints.
const STARVED_MS_MAX: u64 = 10_000;
/// Virtual time, once every queue is drained at the end of a run, by which a blocked
/// publisher must be unblocked and its held publishes confirmed (S-DISK-2, S-DISK-3).
const RESUME_MS_MAX: u64 = 30_000;
/// Rounds of a virtual second the end of a run may take to drain every queue.
const DRAIN_ROUNDS_MAX: u64 = 600;

impl ServerWorld {
    /// Another writer fills the disk to within a few KiB for a few steps (S-DISK-1..4): the
    /// log may meet a full disk with the alarm off, and must pause, not fail.
    pub(super) fn fill_disk(&mut self) {
        if self.room.filled_steps > 0 {
            return;
        }
        self.stats.disk_full += 1;
        let used = self.disk.sim().used_bytes();
        let left = self.rng.below(self.config.segment_bytes);
        self.disk.sim().set_capacity(Some(used + left));
        self.room.filled_steps = 1 + u32::try_from(self.rng.below(6)).unwrap_or(0);
    }

    /// The other writer's files go (or the process ended, and the operator made room).
    pub(super) fn unfill_disk(&mut self) {
        self.room.filled_steps = 0;
        self.disk.sim().set_capacity(self.room.volume_bytes);
    }

    /// Whether the log may be paused on a full disk now (its frames then wait): the disk is
    /// full or was lately, or the disk alarm is on (it stays on until the check after the
    /// log's retry).
    pub(super) fn log_may_be_paused(&self, now: u64) -> Result<bool, Violation> {
        let free = self
            .disk
            .sim()
            .available_bytes(std::path::Path::new(process::DATA_DIR))
            .ok()
            .flatten();
        Ok(self.room.filled_steps > 0
            || now < self.room.tight_until_ms
            || free.is_some_and(|f| f < 2 * self.config.segment_bytes)
            || self.process()?.server().blocked_reason().is_some())
    }

    /// S-DISK-2: a consumer with room gets what its queue holds, the disk alarm on or off,
    /// within a bound of virtual time, unless another writer has the disk full (then nothing
    /// the broker does can make room, and it only has to wait).
    pub(super) fn check_consumer_progress(
        &mut self,
        q: &Queues,
        now: u64,
    ) -> Result<(), Violation> {
        let waiting = q.ready.get(WORK).is_some_and(|keys| !keys.is_empty())
            && self.consumer_held.len() < usize::from(PREFETCH)
            && self.room.filled_steps == 0;
        if !waiting {
            self.starved_since_ms = None;
            return Ok(());
        }
        let since = *self.starved_since_ms.get_or_insert(now);
        if now - since > STARVED_MS_MAX {
            let blocked: Vec<bool> = self.publishers.iter().map(|p| p.blocked).collect();
            return Err(Violation(format!(
                "the consumer, holding {} of {PREFETCH}, got nothing from {} ready in {WORK}                  for {} ms (publishers blocked {blocked:?}, disk {} of {:?} used; S-DISK-2)",
                self.consumer_held.len(),
                q.ready.get(WORK).map_or(0, Vec::len),
                now - since,
                self.disk.sim().used_bytes(),
                self.room.volume_bytes,
            )));
        }
        Ok(())
    }

    /// The end of a run on a disk that ran short: the clients take and ack everything, and
    /// once every queue is empty the publishers must be unblocked and every publish they
    /// sent confirmed within [`RESUME_MS_MAX`] of virtual time (S-DISK-2, S-DISK-3: acks free
    /// space by themselves, publishers resume without a restart).
    pub(super) fn drain(&mut self) -> Result<(), Violation> {
        let mut empty_since: Option<u64> = None;
        for _ in 0..DRAIN_ROUNDS_MAX {
            for (tag, key) in std::mem::take(&mut self.consumer_held) {
                self.settle_delivery(CONSUMER, tag, key, None);
            }
            for (tag, key) in std::mem::take(&mut self.getter_held) {
                self.settle_delivery(GETTER, tag, key, None);
            }
            for _ in 0..8 {
                self.get();
            }
            self.advance(1000)?;
            self.end_step()?;
            let now = self.now();
            let Some(q) = self.queues()? else {
                // As in `observe`: the log may fail while the query waits (a checkpoint
                // sealing a segment on a faulty disk), a fail-stop judged as any other.
                if self.fail_stopped()? {
                    continue;
                }
                return Err(Violation("the broker task is gone while draining".into()));
            };
            let empty = q.ready.values().all(Vec::is_empty)
                && self.consumer_held.is_empty()
                && self.getter_held.is_empty();
            let resumed = self
                .publishers
                .iter()
                .all(|p| !p.blocked && p.unconfirmed.is_empty());
            if empty && resumed {
                return Ok(());
            }
            if !empty {
                empty_since = None;
                continue;
            }
            let since = *empty_since.get_or_insert(now);
            if now - since > RESUME_MS_MAX {
                let state: Vec<(bool, usize)> = self
                    .publishers
                    .iter()
                    .map(|p| (p.blocked, p.unconfirmed.len()))
                    .collect();
                return Err(Violation(format!(
                    "every queue empty for {} ms, the publishers (blocked, unconfirmed) are \
                     still {state:?}; a volume of {:?}, segments of {}, a limit of {}: {} \
                     (S-DISK-2, S-DISK-3)",
                    now - since,
                    self.room.volume_bytes,
                    self.config.segment_bytes,
                    self.config.disk_free_limit_bytes,
                    self.disk.describe(std::path::Path::new(process::DATA_DIR)),
                )));
            }
        }
        Err(Violation(format!(
            "the queues did not drain in {DRAIN_ROUNDS_MAX} s of acking everything"
        )))
    }

    /// Whether a clean stop now may fail (S-DISK-11): a fault was injected, or the disk has
    /// no room for a segment, so a log paused on the full disk gives up at the stop the
    /// records it could not write (never durable, never confirmed). The recovery after it is
    /// checked as after any stop: nothing confirmed may be missing.
    pub(super) fn stop_may_fail(&self) -> bool {
        let free = self
            .disk
            .sim()
            .available_bytes(std::path::Path::new(process::DATA_DIR));
        self.fault_armed
            || free
                .ok()
                .flatten()
                .is_some_and(|free| free < self.config.segment_bytes)
    }

    /// The run's last stop, judged as a clean restart's (S-DISK-11): when it may fail and
    /// does, one more recovery must still hold everything confirmed.
    pub(super) fn final_stop(&mut self, p: Process) -> Result<(), Violation> {
        for c in std::mem::take(&mut self.clients) {
            p.block_on(c.hang_up());
        }
        let excused = self.stop_may_fail();
        match p.stop() {
            Ok(()) => Ok(()),
            Err(_) if excused => {
                self.stats.fail_stops += 1;
                self.ledger.process_ended(self.now());
                self.disk.process_ended(false);
                self.unfill_disk();
                let p = Process::start(&self.disk, &self.clock, &self.config)
                    .map_err(|e| Violation(format!("recovery failed: {e}")))?;
                self.process = Some(p);
                let now = self.now();
                let Some(q) = self.queues()? else {
                    return Err(Violation("the broker task is gone after recovery".into()));
                };
                let recovered = self.ledger.check_recovered(&q, now);
                if let Some(p) = self.process.take() {
                    p.crash();
                }
                recovered
            }
            Err(e) => Err(Violation(format!("final stop failed: {e}"))),
        }
    }
}
