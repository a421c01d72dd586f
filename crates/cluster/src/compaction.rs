//! When a member of a group builds its snapshot (S-CLU-80, DESIGN "Replication", "When a
//! snapshot is built"). A snapshot is the whole committed broker, every body included, so its
//! cost grows with the queues' depth; building one every fixed number of entries made the cost
//! of a queue filled by a publisher quadratic (a 767 MB snapshot every 10,000 entries). Here a
//! snapshot is due once at least [`SnapshotRule::every`] entries were applied since the last
//! one, or those entries logged at least [`SnapshotRule::bytes`] more than the committed queues
//! hold now, **and** the bytes they logged reach the smaller of the last snapshot's size and
//! the content the committed queues hold now. A growing queue's next snapshot then costs
//! at most the last one plus what was logged since, about twice the bytes logged since, so the
//! bytes spent writing snapshots stay within a small factor of the bytes the log took,
//! whatever the depth (a publisher filling a queue gets snapshots of doubling sizes); a
//! shallow queue (a small snapshot) still snapshots every `every` entries, or sooner when its
//! entries are large (an entry holds up to 1 MiB: 10,000 of them held up to 10 GB in memory,
//! and a consumer keeping a queue of 64 KiB messages empty grew each member by 50 MB a second
//! until then), which keeps its log short (a filling queue's log holds the queue's own bodies,
//! shared, so it costs no memory of its own and does not hasten a snapshot); and a queue
//! emptied (a purge, consumers catching up) snapshots soon after, not once the log outgrew the
//! old, deep snapshot. (The last snapshot's size alone would miss that; the queued content
//! alone, an estimate counting more per message than an entry logs, could outrun the log of a
//! filling queue for ever.)
//!
//! openraft builds only when asked (`SnapshotPolicy::Never`, `node.rs`): the state machine
//! counts what it applies ([`Compaction::applied`]) and, when a snapshot falls due, wakes the
//! group's trigger task ([`trigger_task`]), which asks its Raft (`trigger().snapshot()`).
//! openraft ignores a request while a build runs (and this side cannot tell when openraft has
//! seen a build end): a request no build followed is made again after `every` more entries or
//! `bytes` more bytes.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::types::Raft;

/// When a group's member builds a snapshot (S-CLU-80).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRule {
    /// The fewest entries applied since the last snapshot before another is built...
    pub every: u64,
    /// ...or the fewest bytes they logged beyond what the queues hold now, whichever comes
    /// first: the log's dead weight, the bodies it alone still holds (large entries reach
    /// it; a filling queue, whose log holds the queue's own bodies, never does).
    pub bytes: u64,
}

impl SnapshotRule {
    /// The rule for the member in seed slot `slot` (from 1) of `members` seeds: at least
    /// `every` entries (or `bytes`), and `every / members` more (`bytes / members`) for each
    /// slot before it, so that the members of a group do not all build at the same entry
    /// (S-CLU-81). A build of a deep queue's snapshot takes a core and the disk for seconds;
    /// built on every member at once, it slowed the whole group (a follower campaigned during
    /// one), while built on one member at a time it leaves a majority at full speed. Later
    /// snapshots stay apart: each member's falls due after as many bytes as its own last
    /// snapshot held.
    pub fn staggered(every: u64, bytes: u64, slot: u64, members: u64) -> SnapshotRule {
        let before = slot.saturating_sub(1).min(members.saturating_sub(1));
        let stagger = |base: u64| base.saturating_add(base / members.max(1) * before);
        SnapshotRule {
            every: stagger(every),
            bytes: stagger(bytes),
        }
    }

    /// Whether a snapshot is due, `entries` (logging about `bytes`) applied since the last one,
    /// whose size was `sizes.last_snapshot` (0: none), the committed queues holding about
    /// `sizes.queued` bytes.
    pub fn due(&self, entries: u64, bytes: u64, sizes: Sizes) -> bool {
        (entries >= self.every || bytes >= self.bytes.saturating_add(sizes.queued))
            && bytes >= sizes.last_snapshot.min(sizes.queued)
    }
}

/// What the next snapshot is reckoned to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// The last snapshot's bytes (0: none yet).
    pub last_snapshot: u64,
    /// The content the committed queues hold, in memory or left in the log
    /// (`Broker::queued_bytes`).
    pub queued: u64,
}

/// What a state machine applied since its last snapshot, and whether it asked for the next.
#[derive(Debug, Default)]
pub(crate) struct Compaction {
    /// The rule, once a trigger task listens ([`Compaction::listen`]): a machine without one
    /// never asks (its Raft snapshots by its own policy, as tests' members do).
    rule: Option<SnapshotRule>,
    entries: u64,
    bytes: u64,
    /// `entries` and `bytes` when a snapshot was last asked for, if none took the state since.
    asked_at: Option<(u64, u64)>,
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

    /// Asks for a snapshot if one is due under the rule, with `sizes`, unless it asked within
    /// the last `every` entries and `bytes` bytes. Whether it asked.
    pub(crate) fn request_if_due(&mut self, sizes: Sizes) -> bool {
        let Some(rule) = self.rule else {
            return false;
        };
        let asked_lately = self.asked_at.is_some_and(|(entries, bytes)| {
            self.entries < entries.saturating_add(rule.every)
                && self.bytes < bytes.saturating_add(rule.bytes)
        });
        if asked_lately || !self.due(rule, sizes) {
            return false;
        }
        self.asked_at = Some((self.entries, self.bytes));
        // A permit is kept when the task is not waiting yet: no request is lost.
        self.wake.notify_one();
        true
    }

    /// Whether a snapshot is due under `rule`, with `sizes`.
    pub(crate) fn due(&self, rule: SnapshotRule, sizes: Sizes) -> bool {
        rule.due(self.entries, self.bytes, sizes)
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

    const RULE: SnapshotRule = SnapshotRule {
        every: 100,
        bytes: u64::MAX,
    };

    /// S-CLU-81: three members' first snapshots fall due 10,000, 13,333 and 16,666 entries
    /// in; a slot past the seed list gets the last one's; one member alone is not delayed.
    #[test]
    fn s_clu_81_members_snapshot_at_staggered_entries() {
        let rule = |slot| SnapshotRule::staggered(10_000, 3 << 20, slot, 3);
        assert_eq!(
            [rule(1), rule(2), rule(3)].map(|r| r.every),
            [10_000, 13_333, 16_666]
        );
        assert_eq!(
            [rule(1), rule(2), rule(3)].map(|r| r.bytes),
            [3 << 20, 4 << 20, 5 << 20]
        );
        assert_eq!(rule(9), rule(3));
        assert_eq!(SnapshotRule::staggered(10_000, 3 << 20, 1, 1), rule(1));
        let empty = sizes(0, 0);
        assert!(!rule(2).due(10_000, 1, empty));
        assert!(rule(2).due(13_333, 1, empty));
        assert!(!rule(2).due(1, (4 << 20) - 1, empty));
        assert!(rule(2).due(1, 4 << 20, empty));
    }

    fn sizes(last_snapshot: u64, queued: u64) -> Sizes {
        Sizes {
            last_snapshot,
            queued,
        }
    }

    /// S-CLU-80: a shallow queue (a small snapshot) snapshots every `every` entries.
    #[test]
    fn a_small_snapshot_is_due_after_every_entries() {
        assert!(!RULE.due(99, 1 << 20, sizes(1_000, 1_000)));
        assert!(RULE.due(100, 1_000, sizes(1_000, 1_000)));
        assert!(
            RULE.due(100, 0, sizes(0, 1 << 20)),
            "no snapshot yet: the count alone"
        );
        assert!(
            RULE.due(100, 0, sizes(1 << 20, 0)),
            "nothing queued: the count alone"
        );
    }

    /// S-CLU-80: a shallow queue's log of large entries snapshots once it logged `bytes`,
    /// long before `every` entries; a deep queue's still waits for the bytes of its last
    /// snapshot and for `bytes` beyond what it holds; a filling queue's for the count.
    #[test]
    fn s_clu_80_large_entries_snapshot_after_bytes_not_entries() {
        let rule = SnapshotRule {
            every: 10_000,
            bytes: 64 << 20,
        };
        let mib = 1 << 20;
        let mut c = Compaction::default();
        let _wake = c.listen(rule);
        let mut asked = Vec::new();
        for entry in 1..=200u64 {
            c.applied(mib);
            if c.request_if_due(sizes(mib, 0)) {
                asked.push(entry);
            }
        }
        assert_eq!(asked, [64, 128, 192], "asked at 64 MiB, again 64 MiB later");
        let deep = 767 << 20;
        assert!(!rule.due(100, 100 * mib, sizes(deep, deep)));
        assert!(
            !rule.due(767, deep, sizes(deep, deep)),
            "the log holds the queue"
        );
        assert!(rule.due(767, deep, sizes(deep, deep - (64 << 20))));
        assert!(
            !rule.due(100, 100 * mib, sizes(0, 101 * mib)),
            "a queue filling since a snapshot: the count alone"
        );
        assert!(rule.due(10_000, 100 * mib, sizes(0, 101 * mib)));
    }

    /// S-CLU-80: a deep queue's snapshot is due only once the log took as many bytes as the
    /// last snapshot held, however many entries that took.
    #[test]
    fn a_large_snapshot_waits_for_as_many_logged_bytes() {
        let deep = 767 << 20;
        assert!(!RULE.due(10_000, 100 << 20, sizes(deep, deep + (100 << 20))));
        assert!(!RULE.due(1_000_000, deep - 1, sizes(deep, 2 * deep)));
        assert!(RULE.due(1_000_000, deep, sizes(deep, 2 * deep)));
    }

    /// S-CLU-80: once the queues hold less than the last snapshot (a purge, consumers catching
    /// up), the next is due once the log took what they hold.
    #[test]
    fn an_emptied_queue_snapshots_once_the_log_took_what_it_holds() {
        let deep = 767 << 20;
        assert!(RULE.due(10_000, 1 << 20, sizes(deep, 0)));
        assert!(!RULE.due(10_000, (10 << 20) - 1, sizes(deep, 10 << 20)));
        assert!(RULE.due(10_000, 10 << 20, sizes(deep, 10 << 20)));
    }

    /// S-CLU-80: a queue filled by a publisher, every entry logging 100 bytes and the queue
    /// holding 150 bytes a message (the in-memory estimate counts more than an entry logs):
    /// snapshots keep being built, of about doubling sizes, and the bytes written into them
    /// stay within 3 times the bytes logged, where a snapshot every `every` entries writes a
    /// quadratic amount.
    #[test]
    fn filling_a_queue_writes_snapshots_in_proportion_to_the_log() {
        let mut c = Compaction::default();
        let wake = c.listen(RULE);
        let (mut logged, mut written, mut snapshots, mut last) = (0u64, 0u64, 0u64, 0u64);
        let messages = 1_000_000;
        for n in 1..=messages {
            c.applied(100);
            logged += 100;
            let queued = 150 * n;
            if c.request_if_due(sizes(last, queued)) {
                // The build takes the state: the snapshot holds every message queued.
                c.covered();
                last = queued;
                written += last;
                snapshots += 1;
            }
        }
        assert!(
            written <= 3 * logged,
            "{written} written for {logged} logged"
        );
        assert!(
            (10..=20).contains(&snapshots),
            "{snapshots} snapshots: about log2(1,000,000 / 100)"
        );
        assert!(
            c.entries() < messages / 2,
            "the last snapshot is at most one doubling behind"
        );
        assert!(has_permit(&wake), "the trigger task was woken");
    }

    /// A request is made once; openraft ignores one made while a build runs, so one no build
    /// followed is made again `every` entries later.
    #[test]
    fn a_request_no_build_followed_is_made_again_every_entries_later() {
        let nothing = sizes(0, 0);
        let mut c = Compaction::default();
        for _ in 0..100 {
            c.applied(10);
        }
        assert!(!c.request_if_due(nothing), "no rule: never");
        let _wake = c.listen(RULE);
        assert!(c.request_if_due(nothing));
        for _ in 0..99 {
            c.applied(10);
            assert!(!c.request_if_due(nothing), "asked already");
        }
        c.applied(10);
        assert!(
            c.request_if_due(nothing),
            "no build took the state: asked again"
        );
        c.covered();
        assert_eq!(c.entries(), 0);
        assert!(!c.request_if_due(nothing), "a build took the state");
        for _ in 0..100 {
            c.applied(10);
        }
        assert!(c.request_if_due(nothing), "due again after the build");
    }

    /// Whether `wake` holds a permit (a request not yet taken by the trigger task).
    fn has_permit(wake: &Notify) -> bool {
        let notified = wake.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable()
    }
}
