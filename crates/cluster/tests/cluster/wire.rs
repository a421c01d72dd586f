//! The cluster link's messages (docs/CLUSTER-WIRE.md): golden bytes of a frame, a hello and a
//! vote; every message decodes back to itself; cut or damaged bodies are refused or decoded,
//! never a panic (S-ERR-2).

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

use openraft::error::SnapshotMismatch;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::SnapshotMeta;
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, SnapshotSegmentId};
use wharf_broker::Event;
use wharf_cluster::net::wire::{self, Failure, Kind};
use wharf_cluster::{Entry, LogId, Membership, Origin, Proposal, StoredMembership, Vote};

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

/// The documented bytes: a `Hello` frame from node 2, a `Vote` frame's header for member 3
/// of group 1, a `Vote` body, a `Probe` reply and an `AddMember` body.
#[test]
fn cluster_link_frames_match_the_documented_bytes() {
    let hello = wire::frame(Kind::Hello, 0, 0, wire::ANY_MEMBER, wire::hello(2).into())
        .unwrap()
        .to_vec();
    assert_eq!(
        hex(&hello),
        "2b000000 01 0000000000000000 0000000000000000 0000000000000000 77686172666e6574 0400 0200000000000000"
            .replace(' ', "")
    );
    let (header, body) = wire::split(&hello[4..]).unwrap();
    assert_eq!(
        (header.kind, header.id, header.group, header.target),
        (Kind::Hello, 0, 0, 0)
    );
    assert_eq!(wire::decode_hello(body).unwrap(), 2);
    // A node of another build is refused at its hello, saying which side is older.
    for (version, says) in [(3u16, "older"), (5, "newer")] {
        let mut other = wire::hello(2);
        other[8..10].copy_from_slice(&version.to_le_bytes());
        let refused = wire::decode_hello(&other).unwrap_err().to_string();
        assert!(refused.contains(says), "{refused}");
    }
    // S-CLU-50: a proposal handed to the leader, and the leader's answer.
    let proposal = Proposal {
        now_ms: 1_000,
        events: vec![Event::VhostAdded { vhost: "v".into() }].into(),
        origin: Some(Origin {
            session: 0x0a0b,
            seq: 4,
        }),
    };
    let body = wire::propose(&proposal).unwrap();
    assert_eq!(
        hex(&body),
        "03 0b0a000000000000 0400000000000000 e803000000000000 01000000 10 03000000 010076"
            .replace(' ', "")
    );
    assert_eq!(wire::decode_propose(&body).unwrap(), proposal);
    let committed = wire::propose_response(&log_id(2, 3, 6));
    assert_eq!(
        hex(&committed),
        "0200000000000000 0300000000000000 0600000000000000".replace(' ', "")
    );
    assert_eq!(
        hex(&wire::failed(&Failure::NotLeader(Some(3)))),
        "01 07 0300000000000000".replace(' ', "")
    );
    // S-CLU-70: a relayed stream's push (a protocol header on session 1) and pull bodies,
    // and their kinds.
    assert_eq!(
        hex(&wharf_cluster::net::relay_push(1, b"AMQP\x00\x00\x09\x01")),
        "0100000000000000 414d515000000901".replace(' ', "")
    );
    assert_eq!(
        hex(&wharf_cluster::net::relay_pull(1, 256 * 1024)),
        "0100000000000000 00000400".replace(' ', "")
    );
    let kinds = [
        Kind::RelayOpen,
        Kind::RelayPush,
        Kind::RelayPull,
        Kind::RelayClose,
    ];
    assert_eq!(kinds.map(|k| k as u8), [0x18, 0x19, 0x1a, 0x1b]);
    assert_eq!(kinds.map(|k| Kind::from_byte(k as u8)), kinds.map(Some));
    let to_member = wire::frame(Kind::Vote, 5, 1, 3, Bytes::new())
        .unwrap()
        .to_vec();
    assert_eq!(
        hex(&to_member),
        "19000000 11 0500000000000000 0100000000000000 0300000000000000".replace(' ', "")
    );
    let probed = wire::Probed {
        has_state: true,
        member: 0x0001_0000_0000_0002,
    };
    assert_eq!(
        hex(&wire::probe_response(probed)),
        "01 0200000000000100".replace(' ', "")
    );
    assert_eq!(
        wire::decode_probe_response(&wire::probe_response(probed)).unwrap(),
        probed
    );
    assert_eq!(
        hex(&wire::add_member(0, "127.0.0.1:7")),
        "00 3132372e302e302e313a37".replace(' ', "")
    );
    assert_eq!(
        wire::decode_add_member(&wire::add_member(1, "127.0.0.1:7")).unwrap(),
        (1, "127.0.0.1:7".to_owned())
    );
    assert_eq!(
        wire::decode_remove_member(&wire::remove_member(0, 9)).unwrap(),
        (0, 9)
    );

    let vote = VoteRequest {
        vote: Vote::new(2, 3),
        last_log_id: Some(log_id(1, 1, 4)),
    };
    assert_eq!(
        hex(&wire::vote(&vote)),
        "0200000000000000 0300000000000000 00 01 0100000000000000 0100000000000000 0400000000000000"
            .replace(' ', "")
    );
}

fn entries() -> Vec<Entry> {
    let nodes: BTreeMap<u64, BasicNode> = [
        (
            1,
            BasicNode {
                addr: "127.0.0.1:1".into(),
            },
        ),
        (
            2,
            BasicNode {
                addr: "127.0.0.1:2".into(),
            },
        ),
    ]
    .into();
    vec![
        Entry {
            log_id: log_id(1, 1, 0),
            payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2])], nodes)),
        },
        Entry {
            log_id: log_id(1, 1, 1),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(1, 1, 2),
            payload: EntryPayload::Normal(Proposal {
                now_ms: 7,
                events: vec![Event::VhostAdded { vhost: "v".into() }].into(),
                origin: None,
            }),
        },
    ]
}

/// Every body a cut refuses; every flipped bit decodes or is refused, never panics.
fn refuses_damage<T>(
    body: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, wharf_cluster::record::RecordDecodeError>,
) {
    for cut in 0..body.len() {
        assert!(decode(&body[..cut]).is_err(), "cut at {cut}");
    }
    for at in 0..body.len() {
        for bit in 0..8 {
            let mut damaged = body.to_vec();
            damaged[at] ^= 1 << bit;
            let _ = decode(&damaged);
        }
    }
}

/// Each request and reply decodes back to itself, and refuses damage without panicking.
#[test]
fn cluster_link_messages_round_trip_and_refuse_damage() {
    let mut vote = Vote::new(3, 1);
    vote.commit();
    let append = AppendEntriesRequest {
        vote,
        prev_log_id: Some(log_id(1, 1, 0)),
        entries: entries(),
        leader_commit: None,
    };
    let (body, sent) = wire::append_entries(&append).unwrap();
    assert_eq!(sent, 3);
    let back = wire::decode_append_entries(&body).unwrap();
    assert_eq!(format!("{back:?}"), format!("{append:?}"));
    refuses_damage(&body, wire::decode_append_entries);

    for resp in [
        AppendEntriesResponse::Success,
        AppendEntriesResponse::PartialSuccess(Some(log_id(1, 1, 2))),
        AppendEntriesResponse::PartialSuccess(None),
        AppendEntriesResponse::Conflict,
        AppendEntriesResponse::HigherVote(vote),
    ] {
        let body = wire::append_entries_response(&resp);
        assert_eq!(wire::decode_append_entries_response(&body).unwrap(), resp);
        refuses_damage(&body, wire::decode_append_entries_response);
    }

    let req = VoteRequest {
        vote,
        last_log_id: None,
    };
    let body = wire::vote(&req);
    assert_eq!(wire::decode_vote(&body).unwrap(), req);
    refuses_damage(&body, wire::decode_vote);
    let resp = VoteResponse {
        vote,
        vote_granted: true,
        last_log_id: Some(log_id(3, 1, 9)),
    };
    let body = wire::vote_response(&resp);
    assert_eq!(wire::decode_vote_response(&body).unwrap(), resp);
    refuses_damage(&body, wire::decode_vote_response);

    let EntryPayload::Membership(m) = entries()[0].payload.clone() else {
        unreachable!()
    };
    let install = InstallSnapshotRequest {
        vote,
        meta: SnapshotMeta {
            last_log_id: Some(log_id(3, 1, 9)),
            last_membership: StoredMembership::new(Some(log_id(1, 1, 0)), m),
            snapshot_id: "9-1".into(),
        },
        offset: 4096,
        data: b"chunk".to_vec(),
        done: true,
    };
    let body = wire::install_snapshot(&install).unwrap();
    assert_eq!(
        format!("{:?}", wire::decode_install_snapshot(&body).unwrap()),
        format!("{install:?}")
    );
    refuses_damage(&body, wire::decode_install_snapshot);
    let resp = InstallSnapshotResponse { vote };
    let body = wire::install_snapshot_response(&resp);
    assert_eq!(wire::decode_install_snapshot_response(&body).unwrap(), resp);

    let mismatch = Failure::SnapshotMismatch(SnapshotMismatch {
        expect: SnapshotSegmentId {
            id: "9-1".into(),
            offset: 0,
        },
        got: SnapshotSegmentId {
            id: "9-2".into(),
            offset: 4096,
        },
    });
    for failure in [
        Failure::NoGroup,
        Failure::Stopped,
        Failure::BadRequest,
        Failure::WrongMember,
        Failure::Refused("a membership change is in flight".into()),
        Failure::NotLeader(Some(3)),
        Failure::NotLeader(None),
        mismatch,
    ] {
        let body = wire::failed(&failure);
        assert_eq!(wire::decode_reply(&body).unwrap(), Err(failure));
    }
    let ok = wire::ok(b"x");
    assert_eq!(wire::decode_reply(&ok).unwrap(), Ok(&b"x"[..]));
    assert!(wire::split(&[0x77; 24]).is_err(), "shorter than a header");
    assert!(wire::split(&[0x77; 25]).is_err(), "an unknown kind");
}

/// S-CLU-50: a `Propose` body and its answer decode back to themselves and refuse damage; a
/// proposal without its origin is refused.
#[test]
fn propose_messages_round_trip_and_refuse_damage() {
    let forwarded = Proposal {
        now_ms: 5,
        events: vec![Event::VhostAdded { vhost: "v".into() }].into(),
        origin: Some(Origin { session: 9, seq: 1 }),
    };
    let body = wire::propose(&forwarded).unwrap();
    refuses_damage(&body, wire::decode_propose);
    let no_origin = wire::propose(&Proposal {
        origin: None,
        ..forwarded
    })
    .unwrap();
    assert!(
        wire::decode_propose(&no_origin).is_err(),
        "a proposal must carry its origin"
    );
    let body = wire::propose_response(&log_id(2, 3, 6));
    assert_eq!(
        wire::decode_propose_response(&body).unwrap(),
        log_id(2, 3, 6)
    );
    refuses_damage(&body, wire::decode_propose_response);
}
