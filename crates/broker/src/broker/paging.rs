//! Paging (DESIGN "Memory"): the content of durable queued messages beyond a memory budget
//! is left on disk as stored references, and read back through the store's
//! [`MessageLoader`] when a message is delivered or dead-lettered; a failure to read is kept
//! for the server, which stops (S-DUR-7).

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::Broker;
use crate::types::{LoggedMessage, Message, MessageLoader, MessageRef};

impl Broker {
    /// Hands the broker the store's reader of stored messages (before `recovered`, which may
    /// dead-letter stored messages).
    pub fn set_loader(&mut self, loader: Arc<dyn MessageLoader>) {
        self.loader = Some(loader);
    }

    /// The reader of stored messages set by [`Broker::set_loader`], if any (so a server can
    /// wrap it, to time it).
    pub fn loader(&self) -> Option<Arc<dyn MessageLoader>> {
        self.loader.clone()
    }

    /// Records where the store wrote the records of the messages it just logged (what
    /// `Store::log` reported): once a record's Lsn is durable, [`Broker::page_out`] may leave
    /// that message's content on disk.
    pub fn messages_logged(&mut self, logged: &[LoggedMessage]) {
        for l in logged {
            l.message.set_stored(l.lsn, l.at);
        }
    }

    /// The first failure to read a stored message back, if any: the store is damaged and the
    /// server must stop (S-DUR-7). Nothing about that message was logged.
    pub fn storage_failure(&self) -> Option<&str> {
        self.storage_failure.as_deref()
    }

    /// Memory the content of queued messages held in memory takes (bodies plus about 512
    /// bytes each), over every queue.
    pub fn loaded_bytes(&self) -> u64 {
        self.totals.loaded.load(Ordering::Relaxed)
    }

    /// What the ready messages take, in memory or left on disk (bodies plus about 512 bytes
    /// each, as [`Broker::loaded_bytes`] counts), over every queue: what a checkpoint of them
    /// writes, for a broker of logged queues only (a group's committed one).
    pub fn queued_bytes(&self) -> u64 {
        self.totals.queued.load(Ordering::Relaxed)
    }

    /// Keeps memory bounded (DESIGN "Memory"): when the content of queued messages in memory
    /// exceeds `budget` bytes, the oldest whose record is durable (Lsn at most `durable_lsn`)
    /// in a log the loader reads back ([`MessageLoader::pages`]) in logged queues are replaced
    /// by stored references until a quarter of the budget is free again, queue after queue,
    /// each page-out going on from the queue where the one before stopped. Returns the body
    /// bytes released from the queues (a message still held elsewhere, unacked or in another
    /// queue, is freed when the last holder lets go).
    pub fn page_out(&mut self, durable_lsn: u64, budget: u64) -> u64 {
        let loaded = self.loaded_bytes();
        if loaded <= budget {
            return 0;
        }
        // Only what the loader reads back leaves memory (none without one).
        let Some(reader) = self.loader.clone() else {
            return 0;
        };
        let pages = |slot| reader.pages(slot, durable_lsn);
        let mut want = loaded - budget / 4 * 3;
        let mut freed = 0;
        let mut large = Vec::new();
        // Round robin: from the queue after the one the last page-out stopped at, not from
        // the first queue each time (issue 18: with messages spread over many queues, every
        // batch over budget visited every queue already paged out before reaching one with
        // something left to page).
        let cursor = self.page_cursor;
        let after = (Bound::Excluded(cursor), Bound::Unbounded);
        let up_to = (Bound::Unbounded, Bound::Included(cursor));
        for range in [after, up_to] {
            for (&id, q) in self.queues.range_mut(range) {
                if want == 0 {
                    break;
                }
                if !q.logged() {
                    continue;
                }
                let got = q.ready.page_out(&pages, want, &mut large);
                want = want.saturating_sub(got);
                freed += got;
                self.page_cursor = id;
            }
        }
        self.paged_large.retain(|_, w| w.strong_count() > 0);
        for w in large {
            if let Some(m) = w.upgrade() {
                self.paged_large.insert(m.id, w);
            }
        }
        freed
    }

    /// The content of `m`: shared when in memory, else read back through the loader. A
    /// message that cannot be read back is a damaged store: the failure is kept for the
    /// server, which stops (S-DUR-7), and `None` is returned (the message stays in the log).
    pub(super) fn loaded(&mut self, m: &MessageRef) -> Option<Arc<Message>> {
        match self.read(m) {
            Ok(msg) => Some(msg),
            Err(e) => {
                self.storage_failure.get_or_insert(e);
                None
            }
        }
    }

    /// The content of `m`, read back through the loader when stored.
    pub(super) fn read(&self, m: &MessageRef) -> Result<Arc<Message>, String> {
        let s = match m {
            MessageRef::Loaded(m) => return Ok(Arc::clone(m)),
            MessageRef::Stored(s) => s,
        };
        // Still in memory elsewhere: the same content, without a second copy (S-BIG-3).
        if let Some(m) = self.paged_large.get(&s.id).and_then(Weak::upgrade) {
            return Ok(m);
        }
        let loader = self.loader.as_ref().ok_or("no store to read it from")?;
        loader
            .load(s)
            .map(Arc::new)
            .map_err(|e| format!("stored message {} unreadable: {e}", s.id.0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::types::{
        ChanRef, ChannelId, Command, ConnId, Properties, Publish, QueueDeclare, Reply,
        StoredMessage,
    };
    use crate::value::FieldTable;

    /// Counts reads and returns a message of the right id and size.
    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    impl MessageLoader for Counting {
        fn load(&self, s: &StoredMessage) -> Result<Message, String> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(Message {
                id: s.id,
                enqueued_at_ms: 0,
                ttl_ms: None,
                exchange: String::new(),
                routing_key: "q".into(),
                properties: Properties {
                    delivery_mode: Some(2),
                    ..Properties::default()
                },
                body: bytes::Bytes::from(vec![0u8; s.body_len as usize]),
                stored: crate::types::StoredSlot::default(),
            })
        }
    }

    const CH: ChanRef = ChanRef {
        conn: ConnId(1),
        channel: ChannelId(1),
    };

    fn declare(b: &mut Broker, queue: &str) {
        b.handle(
            Command::QueueDeclare(QueueDeclare {
                vhost: "/".into(),
                queue: queue.into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
                owner: None,
            }),
            0,
        )
        .unwrap();
    }

    /// Publishes a persistent message of `len` bytes to `queue`; its content.
    fn publish(b: &mut Broker, queue: &str, len: usize) -> Arc<Message> {
        let out = b
            .handle(
                Command::Publish(Publish {
                    vhost: "/".into(),
                    exchange: String::new(),
                    routing_key: queue.into(),
                    mandatory: false,
                    properties: Properties {
                        delivery_mode: Some(2),
                        ..Properties::default()
                    },
                    body: bytes::Bytes::from(vec![7u8; len]),
                }),
                0,
            )
            .unwrap();
        let crate::types::Event::Published { message, .. } = &out.events[0] else {
            panic!("{:?}", out.events);
        };
        Arc::clone(&message.message)
    }

    fn logged_at_1(message: &Arc<Message>) -> LoggedMessage {
        LoggedMessage {
            message: Arc::clone(message),
            lsn: 1,
            at: 0,
        }
    }

    /// A broker with queue `q` holding one persistent message of `len` bytes, logged at Lsn 1
    /// and paged out; returns the message as published (still held by the caller).
    fn paged_out(len: usize, loader: &Arc<Counting>) -> (Broker, Arc<Message>) {
        let mut b = Broker::new();
        b.set_loader(Arc::clone(loader) as Arc<dyn MessageLoader>);
        for cmd in [
            Command::ConnectionOpen {
                conn: CH.conn,
                vhost: "/".into(),
            },
            Command::ChannelOpen { chan: CH },
        ] {
            b.handle(cmd, 0).unwrap();
        }
        declare(&mut b, "q");
        let message = publish(&mut b, "q", len);
        b.messages_logged(&[logged_at_1(&message)]);
        assert!(b.page_out(1, 0) > 0, "paged out");
        (b, message)
    }

    fn get(b: &mut Broker) -> Arc<Message> {
        let out = b
            .handle(
                Command::Get {
                    chan: CH,
                    queue: "q".into(),
                    no_ack: true,
                },
                0,
            )
            .unwrap();
        let Reply::GetOk(g) = out.reply else {
            panic!("{:?}", out.reply)
        };
        g.message
    }

    /// A message routed to a classic and a quorum queue is one message: the slot a
    /// replicated group's log filled (`GROUP_LOG_BIT`) is not the store's to read back, so the
    /// store's page-out keeps that message in memory and goes on with the next one.
    #[test]
    fn a_page_out_leaves_on_disk_only_what_its_loader_reads_back() {
        let loader = Arc::new(Counting::default());
        let mut b = Broker::new();
        b.set_loader(Arc::clone(&loader) as Arc<dyn MessageLoader>);
        declare(&mut b, "q");
        let first = publish(&mut b, "q", 1000);
        let second = publish(&mut b, "q", 1000);
        first.set_group_stored(1, crate::types::GROUP_LOG_BIT | 7);
        b.messages_logged(&[logged_at_1(&second)]);
        let freed = b.page_out(1, 0);
        assert_eq!(
            freed,
            1000 + crate::queue::LOADED_OVERHEAD_BYTES,
            "the second only"
        );
        let snapshot = b.snapshot();
        let kinds: Vec<bool> = snapshot.queues[0]
            .messages
            .iter()
            .map(|m| matches!(m.message, MessageRef::Loaded(_)))
            .collect();
        assert_eq!(kinds, [true, false], "the group's stays in memory");
    }

    /// What a checkpoint writes counts a message whether in memory or paged out, and leaves
    /// with it.
    #[test]
    fn queued_bytes_count_messages_in_memory_or_not() {
        let loader = Arc::new(Counting::default());
        let (mut b, _held) = paged_out(1000, &loader);
        let each = 1000 + crate::queue::LOADED_OVERHEAD_BYTES;
        assert_eq!(b.loaded_bytes(), 0, "paged out");
        assert_eq!(b.queued_bytes(), each);
        publish(&mut b, "q", 10);
        assert_eq!(
            b.queued_bytes(),
            each + 10 + crate::queue::LOADED_OVERHEAD_BYTES
        );
        get(&mut b);
        assert_eq!(b.queued_bytes(), 10 + crate::queue::LOADED_OVERHEAD_BYTES);
    }

    #[test]
    fn s_big_3_a_large_message_still_in_memory_is_not_read_back() {
        let loader = Arc::new(Counting::default());
        let (mut b, held) = paged_out(2 << 20, &loader);
        let got = get(&mut b);
        assert!(Arc::ptr_eq(&got, &held), "the same content, no second copy");
        assert_eq!(loader.0.load(Ordering::Relaxed), 0, "nothing read back");
    }

    #[test]
    fn s_big_3_a_large_message_let_go_is_read_back() {
        let loader = Arc::new(Counting::default());
        let (mut b, held) = paged_out(2 << 20, &loader);
        drop(held);
        assert_eq!(get(&mut b).body.len(), 2 << 20);
        assert_eq!(loader.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_small_message_is_read_back_even_if_held() {
        // Small ones are not remembered: the weak map stays as small as the large bodies.
        let loader = Arc::new(Counting::default());
        let (mut b, _held) = paged_out(1000, &loader);
        get(&mut b);
        assert_eq!(loader.0.load(Ordering::Relaxed), 1);
    }

    /// Issue 18: a page-out starts after the queue the one before stopped at (round robin),
    /// so a broker over budget does not visit every queue already paged out at every batch.
    #[test]
    fn page_out_goes_round_the_queues_from_where_it_stopped() {
        let mut b = Broker::new();
        b.set_loader(Arc::new(Counting::default()) as Arc<dyn MessageLoader>);
        b.handle(
            Command::ConnectionOpen {
                conn: CH.conn,
                vhost: "/".into(),
            },
            0,
        )
        .unwrap();
        let mut logged = Vec::new();
        for name in ["a", "b", "c"] {
            declare(&mut b, name);
            for _ in 0..8 {
                logged.push(logged_at_1(&publish(&mut b, name, 1000)));
            }
        }
        b.messages_logged(&logged);
        let loaded = |b: &Broker| -> Vec<usize> {
            b.queues
                .values()
                .map(|q| {
                    q.ready
                        .iter()
                        .filter(|(m, _)| matches!(m, MessageRef::Loaded(_)))
                        .count()
                })
                .collect()
        };
        assert_eq!(loaded(&b), vec![8, 8, 8]);
        // Each page-out frees a few messages (a quarter of the budget at least): from a,
        // then from b where the one before stopped at a, then from c, never from the start.
        let mut before = loaded(&b);
        for pages in 0..3 {
            let budget = b.loaded_bytes() - 1;
            assert!(b.page_out(1, budget) > 0);
            let now = loaded(&b);
            for q in 0..3 {
                if q == pages {
                    assert!(now[q] < before[q], "queue {q} paged: {before:?} -> {now:?}");
                } else {
                    assert_eq!(now[q], before[q], "queue {q} left: {before:?} -> {now:?}");
                }
            }
            before = now;
        }
    }
}
