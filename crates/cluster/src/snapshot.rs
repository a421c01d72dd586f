//! A group's snapshot: wharf's checkpoint bytes of the committed broker, behind a small
//! header with the highest `now` applied and, since version 2, the highest proposal applied
//! of each proposer session (S-CLU-50) (storage-format.md, "Raft snapshots"). A lagging or
//! new member installs one into a fresh broker through the checkpoint reader, which checks
//! every byte (S-CLU-4).
#![warn(clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use wharf_broker::{Broker, MessageLoader, MessageRef, StoredMessage};
use wharf_store::StoreError;
use wharf_store::checkpoint::{self, CheckpointRecord};
use wharf_wal::{Lsn, SimStorage, le};

use crate::snapshot_file::{SnapshotFileError, Stream};

/// The snapshot header's magic bytes (`wharfsnp`), then a version.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"wharfsnp";
/// The snapshot format this build writes (it reads version 1 too: no sessions).
pub const SNAPSHOT_VERSION: u16 = 2;
/// Magic, version (u16), highest applied `now` (u64); then, since version 2, the sessions.
pub const SNAPSHOT_HEADER_BYTES: usize = 8 + 2 + 8;

/// The highest `seq` applied of each proposer session (S-CLU-50), by session.
pub type Sessions = BTreeMap<u64, u64>;

/// Why snapshot bytes could not be made or read back.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The checkpoint encoder or reader refused (damage, a message whose content is on disk).
    #[error("the snapshot's checkpoint")]
    Checkpoint(#[from] StoreError),
    /// The header is not a wharf snapshot of a version this build reads.
    #[error("not a wharf snapshot (or a newer version): {0}")]
    Header(&'static str),
    /// The snapshot file could not be written.
    #[error(transparent)]
    File(#[from] SnapshotFileError),
    /// The committed broker refused a record of the snapshot.
    #[error("the snapshot does not fit the broker")]
    Refused(#[from] wharf_broker::BrokerError),
}

/// Encodes the committed broker as snapshot bytes: the header, the sessions (`count u32`,
/// then `session u64`, `seq u64` each), then a checkpoint covering `index` (the checkpoint's
/// Lsn field holds the group's log index).
///
/// # Errors
/// The checkpoint encoder's errors.
pub fn encode(
    broker: &Broker,
    index: u64,
    now_ms: u64,
    sessions: &Sessions,
) -> Result<Vec<u8>, SnapshotError> {
    encode_taken(
        &broker.snapshot(),
        index,
        now_ms,
        sessions,
        broker.loader().as_deref(),
    )
}

/// As [`encode`], from the broker's `taken` snapshot (`Broker::snapshot`: one reference per
/// message, cheap to take), so the encoding (every body byte) can run without the broker.
///
/// # Errors
/// The checkpoint encoder's errors.
pub fn encode_taken(
    taken: &wharf_broker::Snapshot,
    index: u64,
    now_ms: u64,
    sessions: &Sessions,
    loader: Option<&dyn MessageLoader>,
) -> Result<Vec<u8>, SnapshotError> {
    let mut out = Vec::with_capacity(
        SNAPSHOT_HEADER_BYTES + 4 + 16 * sessions.len() + checkpoint_bytes_estimate(taken),
    );
    put_head(&mut out, now_ms, sessions)?;
    let parts = |s: &StoredMessage| read_back(loader, s);
    checkpoint::encode_into(taken, Lsn(index), &mut out, &parts, &carried)?;
    Ok(out)
}

/// As [`encode_taken`], written to the snapshot file being written (`stream`) as it is encoded:
/// the header and sessions, a place for the checkpoint's header, then its records a chunk at a
/// time. Returns the checkpoint's header, the reserved part's bytes. The bytes are
/// [`encode_taken`]'s; no buffer holds them all.
///
/// # Errors
/// The checkpoint encoder's errors, and the disk's.
pub fn encode_to_stream(
    taken: &wharf_broker::Snapshot,
    index: u64,
    now_ms: u64,
    sessions: &Sessions,
    loader: Option<&dyn MessageLoader>,
    stream: &mut Stream,
) -> Result<Vec<u8>, SnapshotError> {
    let mut head = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + 4 + 16 * sessions.len());
    put_head(&mut head, now_ms, sessions)?;
    stream.put(&head)?;
    stream.reserve(checkpoint::CHECKPOINT_HEADER_BYTES)?;
    // The disk's error is kept as it is; the encoder only needs to stop.
    let mut failed = None;
    let parts = |s: &StoredMessage| read_back(loader, s);
    let header = checkpoint::encode_streamed(
        taken,
        Lsn(index),
        &mut |bytes: &[u8]| {
            stream.put(bytes).map_err(|e| {
                let stop = StoreError::Log(e.to_string());
                failed = Some(e);
                stop
            })
        },
        &parts,
        &carried,
    );
    match (header, failed) {
        (_, Some(e)) => Err(e.into()),
        (header, None) => Ok(header?.to_vec()),
    }
}

/// A snapshot carries every message whole (S-CLU-4): where a member's own log wrote a message
/// routed to one of its classic queues too (the slot its store keeps in the shared message)
/// means nothing to another member, nor to this one's snapshot file once that log moved on.
fn carried(_: &MessageRef) -> Option<wharf_wal::Position> {
    None
}

/// The content of a message the committed broker left on disk (S-CLU-82), read back through
/// its `loader` and carried whole.
fn read_back(
    loader: Option<&dyn MessageLoader>,
    stored: &StoredMessage,
) -> Result<Vec<u8>, String> {
    let loader = loader.ok_or_else(|| format!("message {} is not in memory", stored.id.0))?;
    let message = loader.load(stored)?;
    wharf_store::codec::encode_message_part(&message).map_err(|e| e.to_string())
}

/// The snapshot's header (magic, version, highest applied `now`) and its sessions.
fn put_head(out: &mut Vec<u8>, now_ms: u64, sessions: &Sessions) -> Result<(), SnapshotError> {
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    le::put_u16(out, SNAPSHOT_VERSION);
    le::put_u64(out, now_ms);
    let count =
        u32::try_from(sessions.len()).map_err(|_| SnapshotError::Header("too many sessions"))?;
    le::put_u32(out, count);
    for (session, seq) in sessions {
        le::put_u64(out, *session);
        le::put_u64(out, *seq);
    }
    Ok(())
}

/// About what the checkpoint of `taken` takes: every body and a record's worth more per
/// message. Only sizes the buffer up front (a deep queue's snapshot is hundreds of megabytes,
/// and a buffer grown by doubling held up to twice that); the encoding grows it if it must.
fn checkpoint_bytes_estimate(taken: &wharf_broker::Snapshot) -> usize {
    const PER_MESSAGE: u64 = 128;
    let bytes: u64 = taken
        .queues
        .iter()
        .flat_map(|q| &q.messages)
        .map(|m| m.message.body_len() + PER_MESSAGE)
        .sum();
    usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .min(isize::MAX as usize / 2)
}

/// A snapshot decoded: a fresh broker holding its state (nothing fired: the replay state, as
/// after `Broker::apply`), and the highest `now` applied when it was taken.
pub struct Decoded {
    /// The broker.
    pub broker: Broker,
    /// Highest applied `now`.
    pub now_ms: u64,
    /// The highest `seq` applied of each proposer session (empty in a version-1 snapshot).
    pub sessions: Sessions,
}

/// Decodes snapshot bytes into a fresh broker, checking the header and every checkpoint
/// record.
///
/// # Errors
/// [`SnapshotError`] for a bad header, a damaged checkpoint, or a record the broker refuses.
pub fn decode(bytes: &[u8]) -> Result<Decoded, SnapshotError> {
    let (head, body) = bytes
        .split_at_checked(SNAPSHOT_HEADER_BYTES)
        .ok_or(SnapshotError::Header("shorter than its header"))?;
    if head.get(..8) != Some(&SNAPSHOT_MAGIC[..]) {
        return Err(SnapshotError::Header("bad magic"));
    }
    let version = le::u16_at(head, 8);
    if !matches!(version, Some(1 | SNAPSHOT_VERSION)) {
        return Err(SnapshotError::Header("unknown version"));
    }
    let now_ms = le::u64_at(head, 10).ok_or(SnapshotError::Header("no now"))?;
    let (sessions, body) = if version == Some(1) {
        (Sessions::new(), body)
    } else {
        decode_sessions(body)?
    };
    // The checkpoint reader reads through the `Storage` trait; an in-memory disk holding the
    // received bytes lets the same checked reader do it, with no second parser.
    let disk = SimStorage::new(0);
    let path = Path::new("snapshot.checkpoint");
    disk.set_file_bytes(path, body.to_vec());
    let mut broker = Broker::new();
    let mut refused: Option<wharf_broker::BrokerError> = None;
    let header = checkpoint::read(&disk, path, &mut |record, _, _| {
        let result = match record {
            CheckpointRecord::Event(event) => broker.apply(&event),
            CheckpointRecord::Carried(c) => broker.restore_message(
                &c.vhost,
                &MessageRef::Loaded(Arc::clone(&c.message)),
                &c.placements,
            ),
            // A snapshot carries every message it holds: a reference into some member's own
            // log means nothing on another member.
            CheckpointRecord::Referenced(_) => Err(wharf_broker::BrokerError::precondition(
                "a snapshot refers to a message in a log it does not carry",
            )),
        };
        if let Err(e) = result
            && refused.is_none()
        {
            refused = Some(e);
        }
        Ok(())
    })?;
    if let Some(e) = refused {
        return Err(e.into());
    }
    broker.restore_next_message_id(header.next_message_id);
    Ok(Decoded {
        broker,
        now_ms,
        sessions,
    })
}

/// The sessions at the start of `bytes`, and what follows them.
fn decode_sessions(bytes: &[u8]) -> Result<(Sessions, &[u8]), SnapshotError> {
    let short = SnapshotError::Header("sessions cut short");
    let count = le::u32_at(bytes, 0).ok_or(SnapshotError::Header("no session count"))?;
    let mut rest = bytes
        .get(4..)
        .ok_or(SnapshotError::Header("no session count"))?;
    let mut sessions = Sessions::new();
    for _ in 0..count {
        let (Some(session), Some(seq)) = (le::u64_at(rest, 0), le::u64_at(rest, 8)) else {
            return Err(short);
        };
        sessions.insert(session, seq);
        rest = rest
            .get(16..)
            .ok_or(SnapshotError::Header("sessions cut short"))?;
    }
    Ok((sessions, rest))
}
