//! The per-queue message marks a step logs (settled, delivered, returned), batched so that a
//! step that settles many messages of one queue logs one record.

use crate::types::{Event, HeldDeath, MessageId, SettleKind};

/// Which batched per-queue event to extend.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    Settle(SettleKind),
    Delivered,
    Returned,
}

/// Appends `id` to the last event if it is the same kind for the same queue, so a step that
/// settles many messages of one queue logs one record (DESIGN: a batch per record).
pub(super) fn push_mark(
    events: &mut Vec<Event>,
    vhost: &str,
    queue: &str,
    id: MessageId,
    mark: Mark,
) {
    if let Some(last) = events.last_mut() {
        let ids = match (last, mark) {
            (
                Event::Settled {
                    vhost: v,
                    queue: q,
                    ids,
                    kind,
                },
                Mark::Settle(k),
            ) if *kind == k && v == vhost && q == queue => Some(ids),
            (
                Event::Delivered {
                    vhost: v,
                    queue: q,
                    ids,
                },
                Mark::Delivered,
            )
            | (
                Event::Returned {
                    vhost: v,
                    queue: q,
                    ids,
                },
                Mark::Returned,
            ) if v == vhost && q == queue => Some(ids),
            _ => None,
        };
        if let Some(ids) = ids {
            ids.push(id);
            return;
        }
    }
    let (vhost, queue, ids) = (vhost.to_owned(), queue.to_owned(), vec![id]);
    events.push(match mark {
        Mark::Settle(kind) => Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        },
        Mark::Delivered => Event::Delivered { vhost, queue, ids },
        Mark::Returned => Event::Returned { vhost, queue, ids },
    });
}

/// Appends `id` to the last event if it holds messages of the same queue that died the same
/// way at the same time (S-QQ-10), as [`push_mark`] does.
pub(super) fn push_held(
    events: &mut Vec<Event>,
    vhost: &str,
    queue: &str,
    death: HeldDeath,
    id: MessageId,
) {
    if let Some(Event::DeadLetterHeld {
        vhost: v,
        queue: q,
        reason,
        at_ms,
        ids,
    }) = events.last_mut()
        && v == vhost
        && q == queue
        && *reason == death.reason
        && *at_ms == death.at_ms
    {
        ids.push(id);
        return;
    }
    events.push(Event::DeadLetterHeld {
        vhost: vhost.to_owned(),
        queue: queue.to_owned(),
        reason: death.reason,
        at_ms: death.at_ms,
        ids: vec![id],
    });
}
