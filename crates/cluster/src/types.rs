//! openraft's type configuration for a wharf Raft group, and what an entry carries: a
//! [`Proposal`] (the leader's `now` and the broker events of one batch, DESIGN "Replication").

use std::io::Cursor;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use wharf_broker::Event;

use crate::lock;

/// A member's id in every group (`u64`, as openraft's examples use).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The type configuration of every wharf Raft group.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry as openraft hands it to the log store and the state machine.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (leader term and node, index).
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// A group's membership.
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
/// A membership with the log id that set it.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// A storage failure as openraft wants it reported.
pub type StorageError = openraft::StorageError<NodeId>;
/// A Raft instance of a wharf group.
pub type Raft = openraft::Raft<TypeConfig>;

/// What the leader proposes: the durable events of one batch of its broker, decided at
/// `now_ms` (the leader's clock, milliseconds since the epoch; S-CLU-5). Every member applies
/// the events in order with `Broker::apply` once the entry is committed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Proposal {
    /// The leader's clock when it decided these events.
    pub now_ms: u64,
    /// The events, in the order the leader's broker produced them.
    pub events: Events,
    /// Who proposed it, when a member handed it to the leader (`forward.rs`): an entry whose
    /// origin was applied already is skipped, so a retried proposal applies once (S-CLU-50).
    /// `None` for the leader's own proposals.
    pub origin: Option<Origin>,
}

/// A proposal's events, shared by every copy openraft makes of its entry (the log's, each
/// follower's append, the state machine's), and their encoding (the events part of an entry
/// record, storage-format.md "Raft records"), kept from the first time it is made until the
/// entry is applied: the leader encodes an entry once, for its WAL, and sends those bytes to
/// every follower; a follower writes to its WAL the bytes it received and decoded. The
/// encoding of an entry a member applied is dropped, so the log holds one copy of each body;
/// a follower asking for it later gets it encoded again. Equal when the events are.
#[derive(Clone, Default)]
pub struct Events(Arc<SharedEvents>);

#[derive(Default)]
struct SharedEvents {
    list: Vec<Event>,
    encoded: Mutex<Encoded>,
    /// Told once the entry is handed to this member's log ([`Events::watched`]).
    appended: Option<watch::Sender<bool>>,
}

/// Waits until a proposal's entry is handed to the proposer's log ([`Events::watched`]).
#[derive(Debug)]
pub struct Appended(watch::Receiver<bool>);

impl Appended {
    /// Returns once the entry is handed to the log, or will never be (every copy of it is
    /// gone: the proposal was refused, or its Raft stopped).
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|appended| *appended).await;
    }
}

/// The state of an entry's kept encoding.
#[derive(Default)]
enum Encoded {
    /// Not encoded yet.
    #[default]
    Not,
    /// The bytes, as the first encoding made them (or as they arrived).
    Kept(Vec<u8>),
    /// Applied: encoded each time again, and not kept.
    Released,
}

impl Events {
    fn new(list: Vec<Event>, encoded: Encoded, appended: Option<watch::Sender<bool>>) -> Events {
        Events(Arc::new(SharedEvents {
            list,
            encoded: Mutex::new(encoded),
            appended,
        }))
    }

    /// Events decoded from `encoded`, which is kept as their encoding.
    pub(crate) fn decoded(list: Vec<Event>, encoded: Vec<u8>) -> Events {
        Events::new(list, Encoded::Kept(encoded), None)
    }

    /// Events to propose, and what tells their proposer when their entry is handed to its
    /// log. openraft 0.9 appends a leader's entries one at a time, each waiting for its fsync,
    /// so a proposer that waits for its last entry to be handed over before it submits the
    /// next can put everything that arrived meanwhile into that next entry.
    pub fn watched(list: Vec<Event>) -> (Events, Appended) {
        let (tx, rx) = watch::channel(false);
        (Events::new(list, Encoded::Not, Some(tx)), Appended(rx))
    }

    /// Tells the proposer, if it watches, that the entry is handed to the log.
    pub(crate) fn mark_appended(&self) {
        if let Some(appended) = &self.0.appended {
            appended.send_replace(true);
        }
    }

    /// Appends the events' encoding to `out`: the kept bytes, or what `encode` writes (kept
    /// when nothing was kept before, unless the entry was applied).
    ///
    /// # Errors
    /// `encode`'s.
    pub(crate) fn put_encoded<E>(
        &self,
        out: &mut Vec<u8>,
        encode: impl FnOnce(&[Event], &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut encoded = lock(&self.0.encoded);
        match &*encoded {
            Encoded::Kept(bytes) => out.extend_from_slice(bytes),
            Encoded::Not => {
                let start = out.len();
                encode(&self.0.list, out)?;
                *encoded = Encoded::Kept(out.get(start..).unwrap_or_default().to_vec());
            }
            Encoded::Released => encode(&self.0.list, out)?,
        }
        Ok(())
    }

    /// Drops the kept encoding: the entry was applied (see [`Events`]).
    pub(crate) fn release_encoding(&self) {
        *lock(&self.0.encoded) = Encoded::Released;
    }
}

impl From<Vec<Event>> for Events {
    fn from(list: Vec<Event>) -> Events {
        Events::new(list, Encoded::Not, None)
    }
}

impl Deref for Events {
    type Target = [Event];
    fn deref(&self) -> &[Event] {
        &self.0.list
    }
}

impl PartialEq for Events {
    fn eq(&self, other: &Events) -> bool {
        self.0.list == other.0.list
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.list.fmt(f)
    }
}

/// A forwarded proposal's identity, chosen by its proposer (S-CLU-50): the proposer's
/// `session` (unique per proposer process) and the proposal's `seq` within it, from 1, one
/// proposal at a time. A group applies an entry of a session only when its `seq` is above the
/// highest it applied of that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The proposer's session.
    pub session: u64,
    /// The proposal's number in the session.
    pub seq: u64,
}

/// What applying one committed entry returned to the proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The entry's log index.
    pub index: u64,
    /// Events applied (0 for blank and membership entries, and for a voided entry).
    pub events: usize,
    /// The entry's events did not fit the committed state: none of them applied, on any
    /// member (S-CLU-60).
    pub voided: bool,
}

#[cfg(test)]
mod tests {
    use openraft::raft::AppendEntriesRequest;
    use openraft::{CommittedLeaderId, EntryPayload, Vote};
    use wharf_broker::{Event, Message, MessageId, MessageRecord, Properties, StoredSlot};

    use super::*;
    use crate::net::wire;
    use crate::record::{self, RaftRecord};

    fn events() -> Vec<Event> {
        let message = Message {
            id: MessageId(7),
            enqueued_at_ms: 1_000,
            ttl_ms: Some(60_000),
            exchange: "x".into(),
            routing_key: "k".into(),
            properties: Properties::default(),
            body: bytes::Bytes::from(vec![0xab; 2_000]),
            stored: StoredSlot::default(),
        };
        vec![
            Event::VhostAdded { vhost: "v".into() },
            Event::Published {
                vhost: "v".into(),
                message: MessageRecord {
                    message: std::sync::Arc::new(message),
                },
                queues: vec!["q".into()],
                scheduled: None,
            },
        ]
    }

    fn entry(events: Events) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 42),
            payload: EntryPayload::Normal(Proposal {
                now_ms: 5,
                events,
                origin: None,
            }),
        }
    }

    fn record_bytes(entry: &Entry) -> Vec<u8> {
        let record = RaftRecord::Entry {
            group: 1,
            entry: entry.clone(),
        };
        record::encode(&record).unwrap().1
    }

    /// Kept after the first encoding, brought by an append, or made again after the entry
    /// was applied, an entry's bytes are those a fresh encoding makes (storage-format.md
    /// "Raft records" is unchanged), and the events decode equal.
    #[test]
    fn an_entry_encodes_to_the_same_bytes_whether_kept_received_or_made_again() {
        let fresh = record_bytes(&entry(events().into()));
        let kept = entry(events().into());
        assert_eq!(record_bytes(&kept), fresh, "the first encoding");
        assert_eq!(record_bytes(&kept), fresh, "from the kept bytes");

        let rpc = AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: vec![kept.clone()],
        };
        let (body, sent) = wire::append_entries(&rpc).unwrap();
        assert_eq!(sent, 1);
        let received = wire::decode_append_entries(&body).unwrap();
        let [got] = received.entries.as_slice() else {
            panic!("one entry")
        };
        assert_eq!(got, &kept);
        assert_eq!(record_bytes(got), fresh, "the bytes a follower received");

        let EntryPayload::Normal(p) = &kept.payload else {
            panic!("a normal entry")
        };
        p.events.release_encoding();
        assert_eq!(record_bytes(&kept), fresh, "made again once applied");
        assert!(
            matches!(*lock(&p.events.0.encoded), Encoded::Released),
            "an applied entry's encoding is not kept again"
        );
    }

    /// S-CLU-90: an entry sent early and again is decoded once: the second append takes the
    /// entry the first decoded, by its log id, after stepping over its bytes, which must
    /// still frame (a cut one is refused); an entry not seen yet, or gone past the bound, is
    /// decoded.
    #[test]
    fn a_second_copy_of_an_entry_is_taken_from_the_entries_decoded_last() {
        let with = |entries: Vec<Entry>| {
            let rpc = AppendEntriesRequest {
                vote: Vote::new_committed(3, 1),
                prev_log_id: None,
                leader_commit: None,
                entries,
            };
            wire::append_entries(&rpc).unwrap().0
        };
        let events_of = |rpc: &AppendEntriesRequest<TypeConfig>| -> Vec<Events> {
            let events = rpc.entries.iter().map(|e| match &e.payload {
                EntryPayload::Normal(p) => p.events.clone(),
                _ => panic!("a normal entry"),
            });
            events.collect()
        };
        let at = |index: u64| {
            let mut e = entry(events().into());
            e.log_id.index = index;
            e
        };
        let recent = record::RecentEntries::default();
        let early = wire::decode_append_entries_with(&with(vec![at(1), at(2)]), &recent).unwrap();
        let again =
            wire::decode_append_entries_with(&with(vec![at(1), at(2), at(3)]), &recent).unwrap();
        assert_eq!(again.entries, vec![at(1), at(2), at(3)]);
        let (first, second) = (events_of(&early), events_of(&again));
        assert!(Arc::ptr_eq(&first[0].0, &second[0].0), "taken, not decoded");
        assert!(Arc::ptr_eq(&first[1].0, &second[1].0), "taken, not decoded");
        let third = wire::decode_append_entries_with(&with(vec![at(3)]), &recent).unwrap();
        assert!(
            Arc::ptr_eq(&second[2].0, &events_of(&third)[0].0),
            "kept once decoded"
        );

        let whole = with(vec![at(1)]);
        let cut = whole.get(..whole.len() - 1).unwrap();
        assert!(
            wire::decode_append_entries_with(cut, &recent).is_err(),
            "a cut entry"
        );

        // Past the bound, the oldest entries are decoded again; the newest are still taken.
        let size = whole.len();
        let many = (2 * record::RecentEntries::BYTES_MAX / size) as u64;
        let decode = |i: u64| {
            let rpc = wire::decode_append_entries_with(&with(vec![at(i)]), &recent).unwrap();
            events_of(&rpc).remove(0)
        };
        let oldest = decode(10);
        let mut newest = oldest.clone();
        for i in 11..10 + many {
            newest = decode(i);
        }
        assert!(
            !Arc::ptr_eq(&oldest.0, &decode(10).0),
            "dropped past the bound"
        );
        assert!(
            Arc::ptr_eq(&newest.0, &decode(9 + many).0),
            "the newest are kept"
        );
    }
}
