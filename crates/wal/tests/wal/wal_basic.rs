//! The write-ahead log's everyday contract on real files and on `SimStorage`: append and
//! recover in order, Lsns continue after reopening, segments roll and are deleted, records are
//! read back by position, concurrent producers and the async durability future work, and bad
//! headers are refused with the file named.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts are on small test values"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use wharf_wal::{
    FileStorage, Lsn, Position, RecordRef, RecoveryError, RecoveryReport, SegmentId, SimStorage,
    Storage, Wal, WalConfig, WalError, segment_file_name,
};

/// A recovered record, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    lsn: Lsn,
    position: Position,
    kind: u8,
    payload: Vec<u8>,
}

fn open(
    dir: &Path,
    storage: Arc<dyn Storage>,
    config: &WalConfig,
) -> Result<(Wal, RecoveryReport, Vec<Rec>), RecoveryError> {
    let mut recs = Vec::new();
    let (wal, report) = Wal::open(dir, storage, config, &mut |r: RecordRef<'_>| {
        recs.push(Rec {
            lsn: r.lsn,
            position: r.position,
            kind: r.kind,
            payload: r.payload.to_vec(),
        });
        Ok(())
    })?;
    Ok((wal, report, recs))
}

fn small_segments() -> WalConfig {
    WalConfig {
        segment_bytes_max: 4096,
        ..WalConfig::default()
    }
}

/// 1 MiB segments, no zeros written ahead: every sync is a batch's.
fn unpreallocated() -> WalConfig {
    WalConfig {
        segment_bytes_max: 1 << 20,
        preallocate: false,
        ..WalConfig::default()
    }
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

#[test]
fn records_are_recovered_in_order_and_lsns_continue_after_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let storage: Arc<dyn Storage> = Arc::new(FileStorage);
    let (wal, report, recs) = open(&dir, Arc::clone(&storage), &small_segments()).unwrap();
    assert!(recs.is_empty());
    assert_eq!(report.next_lsn, Lsn(1));
    let app = wal.appender();
    let mut appended = Vec::new();
    for i in 0..50u64 {
        let a = app.append_durable((i % 5) as u8, &payload(i, 100)).unwrap();
        assert_eq!(a.lsn, Lsn(i + 1));
        appended.push(a);
    }
    assert_eq!(app.durable_lsn(), Lsn(50));
    wal.close().unwrap();

    let (wal, report, recs) = open(&dir, Arc::clone(&storage), &small_segments()).unwrap();
    assert_eq!(report.records, 50);
    assert!(report.torn_tail.is_none());
    assert!(report.segments.len() > 1, "4 KiB segments must have rolled");
    for (i, rec) in recs.iter().enumerate() {
        let i = i as u64;
        assert_eq!(rec.lsn, Lsn(i + 1));
        assert_eq!(rec.kind, (i % 5) as u8);
        assert_eq!(rec.payload, payload(i, 100));
        assert_eq!(rec.position, appended[i as usize].position);
    }
    let a = wal.appender().append_durable(9, b"after").unwrap();
    assert_eq!(a.lsn, Lsn(51), "Lsn continues after recovery");
    drop(wal);
    let (_wal, _, recs) = open(&dir, storage, &small_segments()).unwrap();
    assert_eq!(recs.len(), 51);
    assert_eq!(recs[50].payload, b"after");
}

#[test]
fn read_at_returns_records_from_sealed_and_active_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage);
    let (wal, _, _) = open(tmp.path(), storage, &small_segments()).unwrap();
    let app = wal.appender();
    let appended: Vec<_> = (0..40u64)
        .map(|i| app.append_durable(1, &payload(i, 300)).unwrap())
        .collect();
    let reader = wal.reader();
    let sealed = wal.sealed_segments().unwrap();
    assert!(!sealed.is_empty());
    for (i, a) in appended.iter().enumerate() {
        let rec = reader.read_at(a.position).unwrap();
        assert_eq!(rec.lsn, a.lsn);
        assert_eq!(rec.payload, payload(i as u64, 300));
    }
    // A position that is not a frame start is reported, never misread.
    let bad = Position {
        segment: appended[0].position.segment,
        offset: appended[0].position.offset + 1,
    };
    assert!(matches!(reader.read_at(bad), Err(WalError::Corrupt { .. })));
}

#[test]
fn sealed_segments_are_deleted_durably_and_the_active_one_is_refused() {
    let sim = SimStorage::new(7);
    let dir = PathBuf::from("/wal");
    let (wal, _, _) = open(&dir, Arc::new(sim.clone()), &small_segments()).unwrap();
    let app = wal.appender();
    let appended: Vec<_> = (0..60u64)
        .map(|i| app.append_durable(0, &payload(i, 200)).unwrap())
        .collect();
    let sealed = wal.sealed_segments().unwrap();
    assert!(sealed.len() >= 2, "{sealed:?}");
    let active = appended.last().unwrap().position.segment;
    assert!(matches!(
        wal.delete_segment(active),
        Err(WalError::SegmentNotSealed { .. })
    ));
    // A segment in the middle: recovery must accept the gap in ids and Lsns.
    let victim = sealed[1];
    wal.delete_segment(victim).unwrap();
    assert!(
        sim.file_bytes(&dir.join(segment_file_name(victim)))
            .is_none()
    );
    drop(wal);
    // The deletion survives a power loss (directory fsynced), and so does everything else.
    let sim = sim.power_loss();
    let (wal, report, recs) = open(&dir, Arc::new(sim), &small_segments()).unwrap();
    assert!(!report.segments.contains(&victim));
    let expected: Vec<_> = appended
        .iter()
        .filter(|a| a.position.segment != victim)
        .map(|a| a.lsn)
        .collect();
    assert_eq!(recs.iter().map(|r| r.lsn).collect::<Vec<_>>(), expected);
    assert_eq!(wal.appender().append(0, b"x").unwrap().lsn, Lsn(61));
    // Reading from the deleted segment is an error, not a panic or stale bytes.
    let gone = appended
        .iter()
        .find(|a| a.position.segment == victim)
        .unwrap();
    assert!(wal.reader().read_at(gone.position).is_err());
}

#[test]
fn concurrent_producers_each_get_their_own_durable_record() {
    let sim = SimStorage::new(3);
    let dir = PathBuf::from("/wal");
    let config = WalConfig {
        segment_bytes_max: 64 * 1024,
        ..WalConfig::default()
    };
    let (wal, _, _) = open(&dir, Arc::new(sim.clone()), &config).unwrap();
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let app = wal.appender();
            std::thread::spawn(move || {
                (0..100u32)
                    .map(|i| {
                        let body = format!("{t}-{i}").into_bytes();
                        let a = app.append_durable(t, &body).unwrap();
                        assert!(app.durable_lsn() >= a.lsn);
                        (a.lsn, body)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut sent: Vec<_> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    sent.sort();
    drop(wal);
    let (_wal, _, recs) = open(&dir, Arc::new(sim.power_loss()), &config).unwrap();
    let got: Vec<_> = recs.into_iter().map(|r| (r.lsn, r.payload)).collect();
    assert_eq!(got, sent);
}

/// Wakes by unparking the polling thread: the smallest executor, to show `Durable` needs none.
struct Unpark(std::thread::Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn durable_future_resolves_without_an_async_runtime() {
    let sim = SimStorage::new(4);
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim), &unpreallocated()).unwrap();
    let app = wal.appender();
    let lsns: Vec<_> = (0..20).map(|i| app.append(0, &[i]).unwrap().lsn).collect();
    for lsn in lsns {
        block_on(app.durable(lsn)).unwrap();
        assert!(app.durable_lsn() >= lsn);
    }
    // A future for an Lsn that will never be written resolves with Closed, never Ok.
    let never = app.durable(Lsn(1000));
    drop(wal);
    assert!(matches!(block_on(never), Err(WalError::Closed)));
    assert!(matches!(app.append(0, b"late"), Err(WalError::Closed)));
}

#[test]
fn oversized_records_are_refused_and_nothing_is_appended() {
    let sim = SimStorage::new(5);
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim), &small_segments()).unwrap();
    let app = wal.appender();
    let len = wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX + 1;
    let err = app
        .append_parts(0, b"", &bytes::Bytes::from(vec![0u8; len]))
        .unwrap_err();
    assert!(matches!(err, WalError::RecordTooLarge { len: l, .. } if l == len));
    assert_eq!(app.append_durable(0, b"ok").unwrap().lsn, Lsn(1));
}

#[test]
fn a_newer_format_version_is_refused_with_the_file_named() {
    let sim = SimStorage::new(6);
    let dir = PathBuf::from("/wal");
    let (wal, _, _) = open(&dir, Arc::new(sim.clone()), &small_segments()).unwrap();
    wal.appender().append_durable(0, b"x").unwrap();
    drop(wal);
    let path = dir.join(segment_file_name(SegmentId(0)));
    let mut bytes = sim.file_bytes(&path).unwrap();
    bytes[8] = 4; // format version, little-endian u16 at offset 8
    // A newer build's header has its CRC right (bytes 0..28, CRC at 28).
    let crc = crc32fast::hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    sim.set_file_bytes(&path, bytes);
    let err = open(&dir, Arc::new(sim), &small_segments()).unwrap_err();
    match err {
        RecoveryError::UnsupportedVersion { path: p, found, .. } => {
            assert_eq!((p, found), (path, 4));
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// S-DISK-6 (found by the store simulation's seeds 52487, 57828 and 66762 of a 100,000-seed
/// run): a power loss garbled the header of a segment whose creation was never synced, its
/// version field included, and recovery refused the whole log as a newer format. A header
/// whose CRC is wrong is damage whatever its version says: with nothing after it, a creation
/// cut short (a torn tail); with records after it, damage that stops the start.
#[test]
fn a_garbled_version_in_a_header_is_damage_not_a_newer_format() {
    let dir = PathBuf::from("/wal");
    let garble = |sim: &SimStorage, id: u64| {
        let path = dir.join(segment_file_name(SegmentId(id)));
        let mut bytes = sim.file_bytes(&path).unwrap();
        bytes[8] = 0x03;
        bytes[9] = 0x1d; // version 7427, the CRC left as it was
        sim.set_file_bytes(&path, bytes);
    };
    // A last segment holding only its (garbled) header: cut as a torn creation.
    let sim = SimStorage::new(7);
    let (wal, _, _) = open(&dir, Arc::new(sim.clone()), &small_segments()).unwrap();
    let kept = wal.appender().append_durable(0, b"kept").unwrap();
    drop(wal);
    // A roll: segment 0 ends after its last record, segment 1 is created with its header,
    // and the power fails before that header is synced.
    let first = dir.join(segment_file_name(SegmentId(0)));
    let mut bytes = sim.file_bytes(&first).unwrap();
    bytes.truncate(
        usize::try_from(kept.position.offset).unwrap() + wharf_wal::FRAME_HEADER_BYTES + 4,
    );
    sim.set_file_bytes(&first, bytes);
    let header = wharf_wal::encode_segment_header(wharf_wal::SegmentHeader {
        segment_id: SegmentId(1),
        first_lsn: Lsn(2),
    });
    sim.set_file_bytes(&dir.join(segment_file_name(SegmentId(1))), header.to_vec());
    garble(&sim, 1);
    let (_, report, recs) = open(&dir, Arc::new(sim.clone()), &small_segments()).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].payload, b"kept");
    let torn = report
        .torn_tail
        .expect("the garbled creation is reported as a torn tail");
    assert_eq!(torn.path, dir.join(segment_file_name(SegmentId(1))));
    // The same garbling in front of records an fsync covered stops the start.
    let sim = SimStorage::new(8);
    let (wal, _, _) = open(&dir, Arc::new(sim.clone()), &small_segments()).unwrap();
    wal.appender().append_durable(0, b"confirmed").unwrap();
    drop(wal);
    garble(&sim, 0);
    match open(&dir, Arc::new(sim), &small_segments()) {
        Err(RecoveryError::UnsupportedVersion { .. }) => {
            panic!("a garbled version was taken for a newer format")
        }
        Err(_) => {}
        Ok((_, report, recs)) => panic!("opened: {recs:?} records, {report:?}", recs = recs.len()),
    }
}

#[test]
fn torn_tail_on_a_real_file_is_truncated_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let config = unpreallocated();
    let (wal, _, _) = open(tmp.path(), Arc::new(FileStorage), &config).unwrap();
    let mut last = None;
    for i in 0..10u64 {
        last = Some(wal.appender().append_durable(0, &payload(i, 50)).unwrap());
    }
    let last = last.unwrap();
    drop(wal);
    let path = tmp.path().join(segment_file_name(SegmentId(0)));
    let good_len = std::fs::metadata(&path).unwrap().len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &[0x5a; 37]).unwrap();
    drop(f);
    let (wal, report, recs) = open(tmp.path(), Arc::new(FileStorage), &config).unwrap();
    assert_eq!(recs.len(), 10);
    let torn = report.torn_tail.expect("torn tail reported");
    assert_eq!(
        (torn.path, torn.offset, torn.bytes),
        (path.clone(), good_len, 37)
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        good_len,
        "truncated on open"
    );
    assert_eq!(
        wal.appender().append_durable(0, b"next").unwrap().lsn,
        last.lsn.next()
    );
}

#[test]
fn a_single_waiting_producer_costs_one_fsync_per_record_and_many_share_one() {
    let sim = SimStorage::new(8);
    let config = unpreallocated();
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim), &config).unwrap();
    let app = wal.appender();
    for i in 0..100u64 {
        app.append_durable(0, &payload(i, 100)).unwrap();
    }
    let stats = app.stats();
    assert_eq!(stats.records, 100);
    assert_eq!(stats.syncs, 100, "one fdatasync per record, not more");
    assert_eq!(stats.writes, 100, "one write per batch");
    // Appends that do not wait are batched: far fewer syncs than records.
    let last = (0..1000u64)
        .map(|i| app.append(0, &payload(i, 100)).unwrap().lsn)
        .max()
        .unwrap();
    app.wait_durable(last).unwrap();
    let more = app.stats();
    assert_eq!(more.records, 1100);
    assert!(more.syncs - stats.syncs < 1000, "{more:?}");
    assert_eq!(more.writes - stats.writes, more.syncs - stats.syncs);
}

/// A lazy record never costs a sync of its own: it is written and synced with the next
/// append's batch, and a clean close keeps it too.
#[test]
fn a_lazy_record_rides_on_the_next_batch_and_is_kept_at_close() {
    let sim = SimStorage::new(9);
    let config = unpreallocated();
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim.clone()), &config).unwrap();
    let app = wal.appender();
    let before = app.stats();
    let mut lsns = Vec::new();
    for i in 0..10u64 {
        lsns.push(app.append_lazy(1, &payload(i, 20)).unwrap().lsn);
        lsns.push(app.append_durable(0, &payload(i, 100)).unwrap().lsn);
    }
    let after = app.stats();
    assert_eq!(after.records - before.records, 20);
    assert_eq!(
        after.syncs - before.syncs,
        10,
        "one sync per waited record: {after:?}"
    );
    let lazy_last = app.append_lazy(1, b"last").unwrap().lsn;
    wal.close().unwrap();
    let (_, _, recs) = open(Path::new("/wal"), Arc::new(sim), &config).unwrap();
    let kept: Vec<Lsn> = recs.iter().map(|r| r.lsn).collect();
    for lsn in lsns.iter().chain([&lazy_last]) {
        assert!(kept.contains(lsn), "record {lsn:?} kept");
    }
}

/// Holds syncs while set: a test knows the writer is inside a sync (and what it took) and
/// chooses when the sync ends.
#[derive(Debug, Default)]
struct Gate {
    /// (held, syncs waiting at the gate)
    state: std::sync::Mutex<(bool, usize)>,
    changed: std::sync::Condvar,
}

impl Gate {
    fn set(&self, held: bool) {
        self.state.lock().unwrap().0 = held;
        self.changed.notify_all();
    }
    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        state.1 += 1;
        self.changed.notify_all();
        while state.0 {
            state = self.changed.wait(state).unwrap();
        }
        state.1 -= 1;
    }
    fn wait_for_a_sync(&self) {
        let mut state = self.state.lock().unwrap();
        while state.1 == 0 {
            state = self.changed.wait(state).unwrap();
        }
    }
}

/// A lazy record appended while the writer syncs a batch is left for the next batch someone
/// wants, not synced on its own once that sync ends (the Raft log's commit records cost
/// followers an fsync each that way, delaying the entry behind them).
#[test]
fn a_lazy_record_appended_during_a_sync_waits_for_the_next_batch() {
    let gate = Arc::new(Gate::default());
    let held = Arc::clone(&gate);
    let storage = crate::hooked::SyncHooked {
        inner: SimStorage::new(11),
        hook: Arc::new(move || held.pass()),
    };
    let config = unpreallocated();
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(storage), &config).unwrap();
    let app = wal.appender();
    gate.set(true);
    let first = app.append(0, &payload(1, 100)).unwrap().lsn;
    gate.wait_for_a_sync();
    let syncs = app.stats().syncs;
    let lazy = app.append_lazy(1, &payload(2, 20)).unwrap().lsn;
    gate.set(false);
    app.wait_durable(first).unwrap();
    let next = app.append_durable(0, &payload(3, 100)).unwrap().lsn;
    assert!(app.durable_lsn() >= next && next > lazy);
    assert_eq!(
        app.stats().syncs - syncs,
        2,
        "the first batch's sync, then the lazy record's with the next one"
    );
    wal.close().unwrap();
}

/// Whoever waits for a lazy record gets it synced, blocking or through the future, though
/// nothing else is appended after it.
#[test]
fn a_waiter_of_a_lazy_record_gets_it_synced() {
    let config = unpreallocated();
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(SimStorage::new(12)), &config).unwrap();
    let app = wal.appender();
    let lazy = app.append_lazy(1, &payload(1, 20)).unwrap().lsn;
    app.wait_durable(lazy).unwrap();
    let lazy = app.append_lazy(1, &payload(2, 20)).unwrap().lsn;
    block_on(app.durable(lazy)).unwrap();
    assert_eq!(app.durable_lsn(), lazy);
    wal.close().unwrap();
}

/// Lazy records that fill the pending buffer are written to make room: an appender waiting
/// for room wants them taken, so appending lazily alone never blocks for good.
#[test]
fn lazy_records_that_fill_the_pending_buffer_make_room() {
    let config = WalConfig {
        pending_bytes_max: 512,
        ..unpreallocated()
    };
    let sim = SimStorage::new(13);
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim.clone()), &config).unwrap();
    let app = wal.appender();
    let lsns: Vec<Lsn> = (0..40)
        .map(|i| app.append_lazy(1, &payload(i, 100)).unwrap().lsn)
        .collect();
    assert!(
        app.stats().syncs > 0,
        "room was made by syncing lazy records"
    );
    wal.close().unwrap();
    let (_, _, recs) = open(Path::new("/wal"), Arc::new(sim), &config).unwrap();
    let kept: Vec<Lsn> = recs.iter().map(|r| r.lsn).collect();
    assert_eq!(kept, lsns, "every one kept, in order");
}

#[test]
fn handles_can_be_shared_across_threads_and_tasks() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    fn sendable<T: Send + 'static>() {}
    shareable::<wharf_wal::Appender>();
    shareable::<wharf_wal::Reader>();
    sendable::<wharf_wal::Durable>();
    sendable::<Wal>();
}

/// Writes `n` synced records of `len` bytes over 4 KiB segments on a fresh simulated disk.
fn sim_log(n: u64, len: usize, preallocate: bool) -> (SimStorage, Vec<wharf_wal::Appended>) {
    let sim = SimStorage::new(n);
    let config = WalConfig {
        preallocate,
        ..small_segments()
    };
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim.clone()), &config).unwrap();
    let app = wal.appender();
    let appended = (0..n)
        .map(|i| app.append_durable(0, &payload(i, len)).unwrap())
        .collect();
    wal.close().unwrap();
    (sim, appended)
}

#[test]
fn preallocated_segments_have_zeros_ahead_and_are_trimmed_when_sealed() {
    let (sim, appended) = sim_log(30, 300, true);
    let last = appended.last().unwrap().position.segment;
    for id in 0..=last.0 {
        let bytes = sim
            .file_bytes(&Path::new("/wal").join(segment_file_name(SegmentId(id))))
            .unwrap();
        if id == last.0 {
            // 4 KiB segments are smaller than a preallocation step: filled to the end.
            assert_eq!(bytes.len(), 4096, "the active segment is preallocated");
        } else {
            let end = appended
                .iter()
                .filter(|a| a.position.segment == SegmentId(id))
                .map(|a| a.position.offset + 21 + 300)
                .max()
                .unwrap();
            assert_eq!(
                bytes.len() as u64,
                end,
                "sealed segment {id} trimmed to its data"
            );
        }
    }
}

#[test]
fn s_dur_7_a_huge_length_in_a_sealed_segment_is_refused_before_use() {
    let (sim, appended) = sim_log(30, 300, false);
    let victim = appended[1];
    let path = Path::new("/wal").join(segment_file_name(victim.position.segment));
    let mut bytes = sim.file_bytes(&path).unwrap();
    let at = victim.position.offset as usize;
    bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    sim.set_file_bytes(&path, bytes);
    match open(Path::new("/wal"), Arc::new(sim), &small_segments()) {
        Err(RecoveryError::Corrupt {
            path: p,
            offset,
            reason,
        }) => {
            assert_eq!((p, offset), (path, victim.position.offset));
            assert_eq!(
                reason,
                wharf_wal::CorruptReason::LengthTooLarge(u64::from(u32::MAX))
            );
        }
        other => panic!("expected corruption, got {:?}", other.map(|r| r.1)),
    }
}

#[test]
fn a_segment_renamed_to_another_id_is_corruption() {
    let (sim, _) = sim_log(30, 300, false);
    let from = Path::new("/wal").join(segment_file_name(SegmentId(0)));
    let to = Path::new("/wal").join(segment_file_name(SegmentId(100)));
    sim.set_file_bytes(&to, sim.file_bytes(&from).unwrap());
    let err = open(Path::new("/wal"), Arc::new(sim), &small_segments()).unwrap_err();
    assert!(
        matches!(
            &err,
            RecoveryError::Corrupt { path, offset: 0, reason: wharf_wal::CorruptReason::SegmentIdMismatch { .. } } if *path == to
        ),
        "{err}"
    );
}

#[test]
fn read_only_scan_reports_a_torn_tail_without_cutting_it() {
    let (sim, appended) = sim_log(5, 50, false);
    let path = Path::new("/wal").join(segment_file_name(SegmentId(0)));
    let mut bytes = sim.file_bytes(&path).unwrap();
    let good = bytes.len();
    bytes.extend_from_slice(&[0xab; 10]);
    sim.set_file_bytes(&path, bytes.clone());
    let mut n = 0;
    let report = wharf_wal::scan(
        &sim,
        Path::new("/wal"),
        wharf_wal::RecoveryMode::Strict,
        &mut |_| {
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, appended.len());
    let torn = report.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes), (good as u64, 10));
    assert_eq!(
        sim.file_bytes(&path).unwrap(),
        bytes,
        "scan must not modify"
    );
}

#[test]
fn preallocation_stays_a_step_ahead_of_the_write_position() {
    let sim = SimStorage::new(21);
    let config = WalConfig {
        segment_bytes_max: 16 << 20,
        ..WalConfig::default()
    };
    let (wal, _, _) = open(Path::new("/wal"), Arc::new(sim.clone()), &config).unwrap();
    let app = wal.appender();
    let path = Path::new("/wal").join(segment_file_name(SegmentId(0)));
    let step = 4u64 << 20;
    for i in 0..150u64 {
        let a = app.append_durable(0, &payload(i, 64 * 1024)).unwrap();
        let end = a.position.offset + 21 + 64 * 1024;
        let len = sim.file_bytes(&path).unwrap().len() as u64;
        assert!(
            len >= end + step / 2 || len == 16 << 20,
            "record {i}: {len} too close to {end}"
        );
        assert!(
            len <= end + step,
            "record {i}: {len} preallocated too far past {end}"
        );
    }
    drop(wal);
    let (_, report, recs) = open(Path::new("/wal"), Arc::new(sim), &config).unwrap();
    assert_eq!(recs.len(), 150);
    assert!(
        report.torn_tail.is_none(),
        "preallocated zeros are the clean end"
    );
}
