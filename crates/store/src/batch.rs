//! One batch of events as log records: each event encoded and size-checked before anything
//! is appended, so an event that cannot be logged leaves nothing of its batch in the log, and
//! id-list events longer than `limits::RECORD_IDS_MAX` cut into several records.

use std::sync::Arc;

use bytes::Bytes;

use crate::codec;
use crate::error::StoreError;
use crate::segment_index::{self, writer::Collector};
use wharf_base::limits;
use wharf_broker::{Event, Message};

/// Encoded payloads of the batch being logged, reused across calls. A message body is not
/// copied here: each record is its bytes here followed by its body, by reference (S-BIG-3).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub(crate) bytes: Vec<u8>,
    /// Per encoded event: its kind, the end offset of its head in `bytes`, its body (the rest
    /// of its payload, empty when it has none), the message the record holds, and the end of
    /// its message ids in `ids`.
    pub(crate) records: Vec<Encoded>,
    /// The message ids each record concerns (for the segment index), one after the other.
    pub(crate) ids: Vec<u64>,
    /// The segment index's notes of the segment being written (kept across batches).
    pub(crate) index: Collector,
}

/// One encoded record of a batch: kind, head end, body, message held, end of its ids.
pub(crate) type Encoded = (u8, usize, Bytes, Option<Arc<Message>>, usize);

/// Emptied scratch buffers larger than this are freed, not kept for the next batch.
const SCRATCH_BYTES_KEPT_MAX: usize = 4 * 1024 * 1024;

impl Scratch {
    /// Encodes `events` as the records of one batch (after clearing the last one).
    pub(crate) fn encode_batch(&mut self, events: &[Event]) -> Result<(), StoreError> {
        if self.bytes.capacity() > SCRATCH_BYTES_KEPT_MAX {
            self.bytes = Vec::new();
        }
        self.bytes.clear();
        self.records.clear();
        self.ids.clear();
        for event in events {
            match split_ids(event) {
                None => self.encode(event)?,
                Some(parts) => {
                    for part in &parts {
                        self.encode(part)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Encodes one event as the next record of the batch, checking its size.
    fn encode(&mut self, event: &Event) -> Result<(), StoreError> {
        let start = self.bytes.len();
        let (kind, body) = codec::encode_event_leaving_body(event, &mut self.bytes)?;
        let len = self.bytes.len() - start + body.len();
        if len > limits::RECORD_PAYLOAD_BYTES_MAX {
            return Err(StoreError::RecordTooLarge {
                len,
                max: limits::RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        let message = event.message().cloned();
        segment_index::event_ids(event, &mut self.ids);
        self.records
            .push((kind.byte(), self.bytes.len(), body, message, self.ids.len()));
        Ok(())
    }
}

/// An id-list event longer than `limits::RECORD_IDS_MAX`, as consecutive events of the same
/// kind over parts of its ids (in order); `None` when it fits one record.
fn split_ids(event: &Event) -> Option<Vec<Event>> {
    let max = limits::RECORD_IDS_MAX;
    let parts = |ids: &[wharf_broker::MessageId], make: &dyn Fn(Vec<_>) -> Event| {
        (ids.len() > max).then(|| ids.chunks(max).map(|c| make(c.to_vec())).collect())
    };
    match event {
        Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        } => parts(ids, &|ids| Event::Settled {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
            kind: *kind,
        }),
        Event::Delivered { vhost, queue, ids } => parts(ids, &|ids| Event::Delivered {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        Event::Returned { vhost, queue, ids } => parts(ids, &|ids| Event::Returned {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        Event::Purged { vhost, queue, ids } => parts(ids, &|ids| Event::Purged {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        Event::DeadLetterHeld {
            vhost,
            queue,
            reason,
            at_ms,
            ids,
        } => parts(ids, &|ids| Event::DeadLetterHeld {
            vhost: vhost.clone(),
            queue: queue.clone(),
            reason: *reason,
            at_ms: *at_ms,
            ids,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_broker::{MessageId, SettleKind};

    #[test]
    fn long_id_lists_are_split_in_order_and_short_ones_kept() {
        let max = limits::RECORD_IDS_MAX;
        let ids: Vec<MessageId> = (0..(max as u64 * 2 + 5)).map(MessageId).collect();
        let settled = Event::Settled {
            vhost: "/".into(),
            queue: "q".into(),
            ids: ids.clone(),
            kind: SettleKind::Ack,
        };
        let parts = split_ids(&settled).expect("longer than the limit");
        assert_eq!(parts.len(), 3);
        let mut rejoined = Vec::new();
        for e in &parts {
            let Event::Settled { ids, kind, .. } = e else {
                panic!("{e:?}");
            };
            assert!(ids.len() <= max);
            assert_eq!(*kind, SettleKind::Ack);
            rejoined.extend_from_slice(ids);
        }
        assert_eq!(rejoined, ids);
        let short = Event::Purged {
            vhost: "/".into(),
            queue: "q".into(),
            ids: ids[..max].to_vec(),
        };
        assert!(split_ids(&short).is_none());
    }
}
