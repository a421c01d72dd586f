//! Direct reply-to's names and consumers (S-DRT), as plain data: the pseudo-queue's name, the
//! reply-name prefix, and every channel's reply consumer. `reply_to.rs` holds the rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::types::ChanRef;

/// The pseudo-queue's name.
pub const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";
/// What every reply name starts with.
pub(super) const REPLY_NAME_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// One channel's reply consumer.
#[derive(Debug, Clone)]
pub(super) struct ReplyConsumer {
    pub(super) tag: Arc<str>,
    pub(super) suffix: Arc<str>,
}

/// The reply consumers of every channel, by channel and by reply-name suffix. Invariant: the
/// two maps describe the same consumers.
#[derive(Debug, Default)]
pub(super) struct ReplyConsumers {
    pub(super) by_chan: BTreeMap<ChanRef, ReplyConsumer>,
    pub(super) by_suffix: BTreeMap<Arc<str>, ChanRef>,
}

impl ReplyConsumers {
    /// Forgets `chan`'s reply consumer (its channel closed): replies to its name are dropped.
    pub(super) fn forget(&mut self, chan: ChanRef) {
        if let Some(c) = self.by_chan.remove(&chan) {
            self.by_suffix.remove(&c.suffix);
        }
    }

    /// True when `tag` is `chan`'s reply consumer.
    pub(super) fn is_tag(&self, chan: ChanRef, tag: &str) -> bool {
        self.by_chan.get(&chan).is_some_and(|c| &*c.tag == tag)
    }

    /// The channel whose reply name is `name`, if it still consumes.
    pub(super) fn channel_of(&self, name: &str) -> Option<ChanRef> {
        let suffix = name.strip_prefix(REPLY_NAME_PREFIX)?;
        self.by_suffix.get(suffix).copied()
    }

    /// Checks the two maps agree (`check_invariants`).
    pub(super) fn check(&self) {
        assert_eq!(
            self.by_chan.len(),
            self.by_suffix.len(),
            "reply consumer maps"
        );
        for (chan, c) in &self.by_chan {
            assert_eq!(
                self.by_suffix.get(&c.suffix),
                Some(chan),
                "reply suffix of {chan:?}"
            );
        }
    }
}

/// True for the names RabbitMQ treats as direct reply-to (every declare of them is passive).
pub(super) fn is_reply_name(queue: &str) -> bool {
    queue.starts_with(REPLY_QUEUE)
}
