//! When a member of a group builds its snapshot (S-CLU-80, DESIGN "Replication", "When a
//! snapshot is built"). A snapshot is the whole committed broker, every body included, so its
//! cost grows with the queues' depth; building one every fixed number of entries made the cost
//! of a queue filled by a publisher quadratic (a 767 MB snapshot every 10,000 entries). Here a
//! snapshot is due once at least [`SnapshotRule::every`] entries were applied since the last
//! one **and** the bytes those entries logged reach the last snapshot's size: the bytes spent
//! writing snapshots stay within about the bytes the log took, whatever the depth, and a
//! shallow queue (a small snapshot) still snapshots every `every` entries, which keeps its log
//! short.
//!
//! openraft builds only when asked (`SnapshotPolicy::Never`, `node.rs`): the state machine
//! counts what it applies ([`Compaction::applied`]) and, when a snapshot falls due, wakes the
//! group's trigger task ([`trigger_task`]), which asks its Raft (`trigger().snapshot()`).
//! openraft ignores a request while a build runs (and this side cannot tell when openraft has
//! seen a build end): a request no build followed is made again after `every` more entries.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::types::Raft;

/// When a group's member builds a snapshot (S-CLU-80).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRule {
    /// The fewest entries applied since the last snapshot before another is built.
    pub every: u64,
}

impl SnapshotRule {
    /// Whether a snapshot is due, `entries` (logging about `bytes`) applied since the last one,
    /// whose bytes were `last_snapshot_bytes` (0: none yet).
    pub fn due(&self, entries: u64, bytes: u64, last_snapshot_bytes: u64) -> bool {
        entries >= self.every && bytes >= last_snapshot_bytes
    }
}

/// What a state machine applied since its last snapshot, and whether it asked for the next.
#[derive(Debug, Default)]
pub(crate) struct Compaction {
    /// The rule, once a trigger task listens ([`Compaction::listen`]): a machine without one
    /// never asks (its Raft snapshots by its own policy, as tests' members do).
    rule: Option<SnapshotRule>,
    entries: u64,
    bytes: u64,
    /// `entries` when a snapshot was last asked for, if none took the state since.
    asked_at: Option<u64>,
    wake: Arc<Notify>,
}

impl Compaction {
    /// From now on, requests follow `rule`; the returned [`Notify`] is woken for each.
    pub(crate) fn listen(&mut self, rule: SnapshotRule) -> Arc<Notify> {
        self.rule = Some(rule);
        Arc::clone(&self.wake)
    }

    /// One entry applied, logging about `bytes`.
    pub(crate) fn applied(&mut self, bytes: u64) {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// A build took the committed state, or a snapshot was installed or loaded: what was
    /// applied so far is in it.
    pub(crate) fn covered(&mut self) {
        self.entries = 0;
        self.bytes = 0;
        self.asked_at = None;
    }

    /// Asks for a snapshot if one is due under the rule, the last one being
    /// `last_snapshot_bytes`, unless it asked within the last `every` entries. Whether it
    /// asked.
    pub(crate) fn request_if_due(&mut self, last_snapshot_bytes: u64) -> bool {
        let Some(rule) = self.rule else {
            return false;
        };
        let asked_lately = self
            .asked_at
            .is_some_and(|at| self.entries < at.saturating_add(rule.every));
        if asked_lately || !rule.due(self.entries, self.bytes, last_snapshot_bytes) {
            return false;
        }
        self.asked_at = Some(self.entries);
        // A permit is kept when the task is not waiting yet: no request is lost.
        self.wake.notify_one();
        true
    }

    /// Entries applied since the last snapshot (for tests and status).
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }
}

/// Asks `raft` for a snapshot each time `wake` is woken, until the Raft stops.
pub(crate) async fn trigger_task(wake: Arc<Notify>, raft: Raft) {
    loop {
        wake.notified().await;
        if let Err(e) = raft.trigger().snapshot().await {
            tracing::debug!(error = %e, "snapshot trigger: the group stopped");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: SnapshotRule = SnapshotRule { every: 100 };

    /// S-CLU-80: a shallow queue (a small snapshot) snapshots every `every` entries.
    #[test]
    fn a_small_snapshot_is_due_after_every_entries() {
        assert!(!RULE.due(99, 1 << 20, 1_000));
        assert!(RULE.due(100, 1_000, 1_000));
        assert!(
            RULE.due(100, 64 * 100, 0),
            "no snapshot yet: the count alone"
        );
    }

    /// S-CLU-80: a large snapshot is due only once the log took as many bytes as it holds,
    /// however many entries that took.
    #[test]
    fn a_large_snapshot_waits_for_as_many_logged_bytes() {
        let last = 767 << 20;
        assert!(!RULE.due(10_000, 100 << 20, last));
        assert!(!RULE.due(1_000_000, last - 1, last));
        assert!(RULE.due(1_000_000, last, last));
    }

    /// S-CLU-80: a queue filled by a publisher, every entry logging 100 bytes and the snapshot
    /// holding every byte logged: the bytes written into snapshots stay within twice the bytes
    /// logged (the snapshots double), where a snapshot every `every` entries writes a
    /// quadratic amount.
    #[test]
    fn filling_a_queue_writes_snapshots_in_proportion_to_the_log() {
        let mut c = Compaction::default();
        let wake = c.listen(RULE);
        let (mut logged, mut written, mut snapshots) = (0u64, 0u64, 0u64);
        let mut last = 0;
        for _ in 0..1_000_000 {
            c.applied(100);
            logged += 100;
            if c.request_if_due(last) {
                // The build takes the state: the snapshot holds every byte logged so far.
                c.covered();
                last = logged;
                written += last;
                snapshots += 1;
            }
        }
        assert!(
            written <= 2 * logged,
            "{written} written for {logged} logged"
        );
        assert!(
            (10..=20).contains(&snapshots),
            "{snapshots} snapshots: about log2(1,000,000 / 100)"
        );
        // Every request woke the trigger task once (permits do not add up past one).
        assert!(has_permit(&wake));
    }

    /// A request is made once; openraft ignores one made while a build runs, so one no build
    /// followed is made again `every` entries later.
    #[test]
    fn a_request_no_build_followed_is_made_again_every_entries_later() {
        let mut c = Compaction::default();
        for _ in 0..100 {
            c.applied(10);
        }
        assert!(!c.request_if_due(0), "no rule: never");
        let _wake = c.listen(RULE);
        assert!(c.request_if_due(0));
        for _ in 0..99 {
            c.applied(10);
            assert!(!c.request_if_due(0), "asked already");
        }
        c.applied(10);
        assert!(c.request_if_due(0), "no build took the state: asked again");
        c.covered();
        assert_eq!(c.entries(), 0);
        assert!(!c.request_if_due(0), "a build took the state");
        for _ in 0..100 {
            c.applied(10);
        }
        assert!(c.request_if_due(0), "due again after the build");
    }

    /// Whether `wake` holds a permit (a request not yet taken by the trigger task).
    fn has_permit(wake: &Notify) -> bool {
        let notified = wake.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable()
    }
}
