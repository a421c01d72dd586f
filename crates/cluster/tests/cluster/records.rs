//! The Raft log in the WAL: a member's log comes back from what its disk synced (the flush
//! callback fires only after the group commit's fsync, S-CLU-1); the record bytes are the
//! ones storage-format.md shows ("Raft records"); the decoder refuses damage without
//! panicking (S-ERR-2).

use std::collections::{BTreeMap, BTreeSet};

use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, RaftLogReader};
use wharf_broker::{Broker, Event};
use wharf_cluster::record::{self, RAFT_FORMAT_VERSION, RaftRecord};
use wharf_cluster::{Entry, LogId, Membership, Origin, Proposal, Vote};
use wharf_cluster::{snapshot, snapshot_file};

use crate::commands::{declare_quorum, publish};
use crate::support::{Cluster, GROUP, HangGuard, LiveBroker, open_log};

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

/// S-CLU-1: every entry a follower acknowledged (so the leader confirmed it) is in what the
/// follower's disk had synced: after a power loss its log reopens from the WAL with those
/// entries, byte for byte, and its vote.
#[tokio::test(start_paused = true)]
async fn s_clu_1_a_followers_confirmed_entries_survive_its_power_loss() {
    let _guard = HangGuard::new("s_clu_1_a_followers_confirmed_entries_survive_its_power_loss");
    let c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let mut cmds = vec![declare_quorum("q", None)];
    cmds.extend((0..3).map(|i| publish("q", &format!("m{i}"), None)));
    let (p, _) = leader.batch(cmds, 1_000);
    let index = c.raft(1).client_write(p).await.unwrap().log_id.index;
    c.isolate(3);
    let (p, _) = leader.batch(vec![publish("q", "two of three", None)], 2_000);
    let index = index.max(c.raft(1).client_write(p).await.unwrap().log_id.index);

    // Member 2 acknowledged every entry through `index` (the last one was committed by 1 and
    // 2 alone); cut its power now, keeping only what its disk had synced.
    // (What its log holds, read first: entries it let go of are read back from its disk.)
    let want = c.members[&2]
        .log
        .clone()
        .try_get_log_entries(0..=index)
        .await
        .unwrap();
    let synced = c.members[&2].disk.power_loss();
    let mut reopened = open_log(&synced);
    let got = reopened.try_get_log_entries(0..=index).await.unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.log_id, w.log_id);
        assert_eq!(format!("{:?}", g.payload), format!("{:?}", w.payload));
        if let (EntryPayload::Normal(g), EntryPayload::Normal(w)) = (&g.payload, &w.payload) {
            assert_eq!(g, w, "entry {}", w.now_ms);
        }
    }
    let vote = reopened.read_vote().await.unwrap().unwrap();
    assert_eq!(
        vote.leader_id.node_id, 1,
        "member 2's durable vote is for member 1"
    );
}

/// The golden bytes of storage-format.md, "Raft records" (format 2): a vote, a normal entry
/// with one event, a membership entry, a truncation, a purge and committed marks; each
/// decodes back to itself.
#[test]
fn raft_records_match_the_documented_bytes() {
    let mut vote = Vote::new(2, 3);
    vote.commit();
    let normal = Entry {
        log_id: log_id(2, 3, 5),
        payload: EntryPayload::Normal(Proposal {
            now_ms: 1_000,
            events: vec![Event::VhostAdded { vhost: "v".into() }].into(),
            origin: None,
        }),
    };
    let forwarded = Entry {
        log_id: log_id(2, 3, 6),
        payload: EntryPayload::Normal(Proposal {
            now_ms: 1_000,
            events: vec![Event::VhostAdded { vhost: "v".into() }].into(),
            origin: Some(Origin {
                session: 0x0a0b,
                seq: 4,
            }),
        }),
    };
    let nodes: BTreeMap<u64, BasicNode> = [(1, BasicNode { addr: "a".into() })].into();
    let membership = Entry {
        log_id: log_id(1, 1, 0),
        payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1])], nodes)),
    };
    let cases: Vec<(RaftRecord, &str)> = vec![
        (
            RaftRecord::Format {
                group: GROUP,
                version: RAFT_FORMAT_VERSION,
            },
            "0700000000000000 0300",
        ),
        (
            RaftRecord::Vote { group: GROUP, vote },
            "0700000000000000 0200000000000000 0300000000000000 01",
        ),
        (
            RaftRecord::Entry {
                group: GROUP,
                entry: normal,
            },
            "0700000000000000 0200000000000000 0300000000000000 0500000000000000 \
             01 e803000000000000 01000000 10 03000000 010076",
        ),
        (
            RaftRecord::Entry {
                group: GROUP,
                entry: forwarded,
            },
            "0700000000000000 0200000000000000 0300000000000000 0600000000000000 \
             03 0b0a000000000000 0400000000000000 e803000000000000 01000000 10 03000000 010076",
        ),
        (
            RaftRecord::Entry {
                group: GROUP,
                entry: membership,
            },
            "0700000000000000 0100000000000000 0100000000000000 0000000000000000 \
             02 01000000 01000000 0100000000000000 01000000 0100000000000000 01000000 61",
        ),
        (
            RaftRecord::Truncate {
                group: GROUP,
                index: 9,
            },
            "0700000000000000 0900000000000000",
        ),
        (
            RaftRecord::Purge {
                group: GROUP,
                log_id: log_id(2, 3, 4),
            },
            "0700000000000000 0200000000000000 0300000000000000 0400000000000000",
        ),
        (
            RaftRecord::Committed {
                group: GROUP,
                log_id: Some(log_id(2, 3, 6)),
            },
            "0700000000000000 01 0200000000000000 0300000000000000 0600000000000000",
        ),
        (
            RaftRecord::Committed {
                group: GROUP,
                log_id: None,
            },
            "0700000000000000 00",
        ),
    ];
    for (rec, want) in cases {
        let (kind, payload) = record::encode(&rec).unwrap();
        assert_eq!(hex(&payload), want.replace([' ', '\n'], ""), "{rec:?}");
        let back = record::decode(kind, &payload).unwrap();
        assert_eq!(format!("{back:?}"), format!("{rec:?}"));
    }
}

/// S-ERR-2: every cut of a valid record and every single flipped byte is refused or decodes,
/// never panics; a cut one is always refused.
#[test]
fn raft_record_decoder_refuses_damage_without_panicking() {
    let entry = Entry {
        log_id: log_id(4, 2, 17),
        payload: EntryPayload::Normal(Proposal {
            now_ms: 99,
            events: vec![
                Event::VhostAdded { vhost: "v".into() },
                Event::QueueDeleted {
                    vhost: "v".into(),
                    queue: "q".into(),
                },
            ]
            .into(),
            origin: Some(Origin {
                session: 0x0102,
                seq: 3,
            }),
        }),
    };
    let (kind, payload) = record::encode(&RaftRecord::Entry { group: 1, entry }).unwrap();
    for cut in 0..payload.len() {
        assert!(
            record::decode(kind, &payload[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    for at in 0..payload.len() {
        for bit in 0..8 {
            let mut damaged = payload.clone();
            damaged[at] ^= 1 << bit;
            let _ = record::decode(kind, &damaged);
        }
    }
    assert!(
        record::decode(0x01, &payload).is_err(),
        "a store kind is not a Raft record"
    );
}

/// storage-format.md, "Raft snapshots": the header, then a checkpoint that reads back into the
/// same committed state (S-CLU-4); a damaged header or checkpoint is refused.
#[test]
fn raft_snapshot_is_a_header_and_a_checkpoint() {
    let mut live = LiveBroker::new();
    let (p, _) = live.batch(
        vec![declare_quorum("q", Some(5_000)), publish("q", "m", None)],
        1_000,
    );
    let mut committed = Broker::new();
    for e in p.events.iter() {
        committed.apply(e).unwrap();
    }
    let sessions = snapshot::Sessions::from([(0x0a0b, 4)]);
    let bytes = snapshot::encode(&committed, 5, 1_000, &sessions).unwrap();
    assert_eq!(
        hex(&bytes[..38]),
        "7768617266736e700200e803000000000000 01000000 0b0a000000000000 0400000000000000"
            .replace(' ', "")
    );
    let back = snapshot::decode(&bytes).unwrap();
    assert_eq!(back.now_ms, 1_000);
    assert_eq!(back.sessions, sessions);
    // A version-1 snapshot (no sessions) still reads.
    let mut v1 = bytes[..18].to_vec();
    v1[8] = 1;
    v1.extend_from_slice(&bytes[38..]);
    let old = snapshot::decode(&v1).unwrap();
    assert!(old.sessions.is_empty());
    assert_eq!(old.broker.durable_state(), committed.durable_state());
    assert_eq!(back.broker.durable_state(), committed.durable_state());

    let mut bad_magic = bytes.clone();
    bad_magic[0] ^= 1;
    assert!(snapshot::decode(&bad_magic).is_err());
    let mut bad_body = bytes.clone();
    let last = bad_body.len() - 1;
    bad_body[last] ^= 1;
    assert!(
        snapshot::decode(&bad_body).is_err(),
        "the checkpoint's CRC catches it"
    );
    assert!(snapshot::decode(&bytes[..bytes.len() - 1]).is_err());

    // Written to its file as it is encoded (a member's build), the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let storage = wharf_wal::FileStorage;
    let meta = snapshot_file::Meta {
        last_log_id: Some(log_id(1, 1, 5)),
        last_membership: wharf_cluster::StoredMembership::default(),
        snapshot_id: "5-1".into(),
    };
    let taken = committed.snapshot();
    let len = snapshot_file::write_streamed(&storage, dir.path(), &meta, |out| {
        snapshot::encode_to_stream(&taken, 5, 1_000, &sessions, None, out)
    })
    .unwrap();
    assert_eq!(len, bytes.len() as u64);
    let (_, streamed) = snapshot_file::read(&storage, dir.path()).unwrap().unwrap();
    assert_eq!(streamed, bytes);
}

/// S-CLU-1: a follower acknowledges an entry only once its WAL synced it. Member 3 is cut off
/// and member 2's disk fails its next sync: member 2 never acknowledges the entry (its WAL
/// latches the failure and its Raft stops), so the leader, alone, never confirms it.
#[tokio::test(start_paused = true)]
async fn s_clu_1_an_entry_a_follower_could_not_sync_is_not_confirmed() {
    let _guard = HangGuard::new("s_clu_1_an_entry_a_follower_could_not_sync_is_not_confirmed");
    let c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    let base = c.raft(1).client_write(p).await.unwrap().log_id.index;
    c.settle(1).await;
    c.isolate(3);
    c.members[&2].disk.fail_sync_after(0);
    let (p, _) = leader.batch(vec![publish("q", "unsynced", None)], 2_000);
    let pending = c.raft(1).client_write_ff(p).await.unwrap();
    let index = base + 1;
    c.until(2, "its Raft stopped by the failed sync", |m| {
        m.running_state.is_err()
    })
    .await;
    c.until(1, "the entry in its own log", |m| {
        m.last_log_index >= Some(index)
    })
    .await;
    let applied = c.raft(1).metrics().borrow().last_applied.map(|l| l.index);
    assert!(
        applied < Some(index),
        "confirmed without a majority: {applied:?}"
    );
    drop(pending);
}

/// A message routed to a classic queue and a quorum queue is one message in the leader's
/// memory: the member's own log records where it wrote it (the slot a page-out uses), and the
/// group's committed broker holds the same message. Its snapshot still carries it whole (a
/// position in one member's log means nothing to another, nor to its own snapshot file), and
/// reads back.
#[test]
fn s_clu_4_a_snapshot_carries_a_message_the_members_own_log_also_holds() {
    let mut live = LiveBroker::new();
    let (p, _) = live.batch(
        vec![declare_quorum("q", None), publish("q", "m", None)],
        1_000,
    );
    let mut committed = Broker::new();
    for e in p.events.iter() {
        committed.apply(e).unwrap();
    }
    let message = p
        .events
        .iter()
        .find_map(|e| match e {
            Event::Published { message, .. } => Some(std::sync::Arc::clone(&message.message)),
            _ => None,
        })
        .unwrap();
    // The store's position of a record at offset 4,096 of its segment 3.
    let at = (3 << 40) | 4_096;
    live.broker.messages_logged(&[wharf_broker::LoggedMessage {
        message,
        lsn: 7,
        at,
    }]);
    let sessions = snapshot::Sessions::new();
    let bytes = snapshot::encode(&committed, 5, 1_000, &sessions).unwrap();
    let back = snapshot::decode(&bytes).unwrap();
    assert_eq!(back.broker.durable_state(), committed.durable_state());
}
