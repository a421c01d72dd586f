//! Spooled bodies (S-BIG-3): a large body written to a spool file as it arrives, appended as
//! a record's tail, is copied into the log from its file (the record reads back and recovers
//! byte for byte, its CRC taken from the spool); a spool file is removed when its body is let
//! go or its spool dropped unfinished, and every one a crash left is removed at open, never
//! read as log data.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts are on small test values"
)]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use wharf_wal::{
    FileStorage, RecordRef, SPOOL_COPY_BYTES, SimStorage, Storage, Wal, WalConfig,
    is_spool_file_name,
};

/// Recovered records as (kind, payload).
fn open(dir: &Path, storage: Arc<dyn Storage>) -> (Wal, Vec<(u8, Vec<u8>)>) {
    let mut recs = Vec::new();
    let config = WalConfig {
        segment_bytes_max: 1024 * 1024,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(dir, storage, &config, &mut |r: RecordRef<'_>| {
        recs.push((r.kind, r.payload.to_vec()));
        Ok(())
    })
    .unwrap();
    (wal, recs)
}

fn spool_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| is_spool_file_name(n))
        .collect();
    names.sort();
    names
}

/// A body longer than the writer's copy buffer and than a segment, of an odd length.
fn big_body() -> Vec<u8> {
    (0..3 * SPOOL_COPY_BYTES + 17)
        .map(|i| (i % 251) as u8)
        .collect()
}

/// Spools `body` in frame-sized pieces through `wal`'s spooler.
fn spool(wal: &Wal, body: &[u8]) -> Bytes {
    let mut spool = wal.appender().spooler().open(body.len() as u64).unwrap();
    for piece in body.chunks(128 * 1024 - 8) {
        spool.write(piece).unwrap();
    }
    assert_eq!(spool.written(), body.len() as u64);
    spool.finish().unwrap()
}

#[test]
fn s_big_3_a_spooled_body_is_copied_into_its_record_and_recovered_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let storage: Arc<dyn Storage> = Arc::new(FileStorage);
    let (wal, _) = open(&dir, Arc::clone(&storage));
    let body = big_body();
    let spooled = spool(&wal, &body);
    assert_eq!(
        &spooled[..],
        &body[..],
        "the finished body is the spooled bytes"
    );
    assert_eq!(spool_files(&dir).len(), 1, "held while its body is");

    let app = wal.appender();
    app.append(3, b"small before").unwrap();
    let big = app.append_parts(7, b"head", &spooled).unwrap();
    let after = app.append(3, b"small after").unwrap();
    app.wait_durable(after.lsn).unwrap();
    let mut want = b"head".to_vec();
    want.extend_from_slice(&body);
    let read = wal.reader().read_at(big.position).unwrap();
    assert_eq!((read.kind, read.payload.len()), (7, want.len()));
    assert!(
        read.payload == want,
        "the record is head and body, byte for byte"
    );
    assert_eq!(
        app.stats().spooled_bytes,
        body.len() as u64,
        "copied from its file, not from memory"
    );

    // The log let go of it once written; the last holder lets go: the file goes.
    drop(spooled);
    assert!(spool_files(&dir).is_empty(), "{:?}", spool_files(&dir));
    wal.close().unwrap();

    // Recovery checks every frame's CRC: the spool's CRC, combined, is the record's.
    let (wal, recs) = open(&dir, storage);
    let kinds: Vec<u8> = recs.iter().map(|r| r.0).collect();
    assert_eq!(kinds, [3, 7, 3]);
    assert!(recs[1].1 == want, "recovered intact");
    wal.close().unwrap();
}

#[test]
fn s_big_3_a_body_dropped_before_its_record_is_written_is_still_written() {
    // The pending record holds the spool file: the body's last holder may let go first.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (wal, _) = open(&dir, Arc::new(FileStorage));
    let body = big_body();
    let spooled = spool(&wal, &body);
    let app = wal.appender();
    let big = app.append_parts(7, b"", &spooled).unwrap();
    drop(spooled);
    app.wait_durable(big.lsn).unwrap();
    assert!(wal.reader().read_at(big.position).unwrap().payload == body);
    assert!(spool_files(&dir).is_empty());
    wal.close().unwrap();
}

#[test]
fn s_big_3_an_unfinished_or_given_up_spool_leaves_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (wal, _) = open(&dir, Arc::new(FileStorage));
    let spooler = wal.appender().spooler();

    let mut spool = spooler.open(1000).unwrap();
    spool.write(&[1; 600]).unwrap();
    assert_eq!(spool_files(&dir).len(), 1);
    // More than announced is refused, and so is finishing short.
    assert!(spool.write(&[2; 401]).is_err());
    drop(spool);
    assert!(spool_files(&dir).is_empty(), "dropped unfinished: removed");

    let spool = spooler.open(1000).unwrap();
    assert!(spool.finish().is_err(), "nothing written: not a body");
    assert!(spool_files(&dir).is_empty());

    let mut spool = spooler.open(1000).unwrap();
    spool.write(&[5; 300]).unwrap();
    spool.write(&[6; 300]).unwrap();
    let back = spool.read_back().unwrap();
    assert_eq!(back.len(), 600);
    assert_eq!((back[0], back[599]), (5, 6));
    assert!(spool_files(&dir).is_empty(), "read back: removed");
    wal.close().unwrap();
}

#[test]
fn s_big_3_spool_files_a_crash_left_are_removed_at_open_and_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (wal, _) = open(&dir, Arc::new(FileStorage));
    wal.appender().append_durable(3, b"kept").unwrap();
    wal.close().unwrap();
    // What a crash leaves: a spool, whatever its bytes (here a valid-looking frame too).
    let left = dir.join("00000000000000000004.body");
    std::fs::write(&left, vec![0xAB; 4096]).unwrap();
    let other = dir.join("notes.body");
    std::fs::write(&other, b"not ours").unwrap();
    let (wal, recs) = open(&dir, Arc::new(FileStorage));
    assert_eq!(recs, vec![(3, b"kept".to_vec())]);
    assert!(!left.exists(), "a spool file is never log data");
    assert!(other.exists(), "only spool file names are removed");
    // Spools opened now do not collide with anything left.
    let body = big_body();
    let spooled = spool(&wal, &body);
    assert_eq!(&spooled[..], &body[..]);
    drop(spooled);
    wal.close().unwrap();
}

#[test]
fn s_big_3_without_maps_a_spooled_body_comes_back_in_memory() {
    // The simulated disk cannot map: the finished body is read into memory, its file removed,
    // and the record is written from memory as any other.
    let storage = SimStorage::new(1);
    let dir = Path::new("/sim/log");
    let (wal, _) = open(dir, Arc::new(storage.clone()));
    let body = big_body();
    let spooled = spool(&wal, &body);
    assert_eq!(&spooled[..], &body[..]);
    let names = storage.list(dir).unwrap();
    assert!(!names.iter().any(|n| is_spool_file_name(n)), "{names:?}");
    let app = wal.appender();
    let big = app.append_parts(7, b"h", &spooled).unwrap();
    app.wait_durable(big.lsn).unwrap();
    assert_eq!(
        wal.reader().read_at(big.position).unwrap().payload.len(),
        body.len() + 1
    );
    assert_eq!(app.stats().spooled_bytes, 0, "written from memory");
    wal.close().unwrap();
}

#[test]
fn s_big_3_a_spooled_record_is_byte_for_byte_the_record_written_from_memory() {
    // Spooling changes no byte of the log (format 3 as it was): the same records appended
    // with the body spooled and with it in memory make identical segment files.
    let body = big_body();
    let mut logs = Vec::new();
    for spooled in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (wal, _) = open(&dir, Arc::new(FileStorage));
        let tail = if spooled {
            spool(&wal, &body)
        } else {
            Bytes::from(body.clone())
        };
        let app = wal.appender();
        app.append(3, b"before").unwrap();
        app.append_parts(7, b"head", &tail).unwrap();
        let last = app.append(3, b"after").unwrap();
        app.wait_durable(last.lsn).unwrap();
        let copied = if spooled { body.len() as u64 } else { 0 };
        assert_eq!(app.stats().spooled_bytes, copied);
        drop(tail);
        wal.close().unwrap();
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| {
                wharf_wal::parse_segment_file_name(e.file_name().to_str().unwrap()).is_some()
            })
            .map(|e| {
                let name = e.file_name().into_string().unwrap();
                let mut bytes = std::fs::read(e.path()).unwrap();
                // The last segment's preallocated zeros follow batch sizes, not records.
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
                (name, bytes)
            })
            .collect();
        files.sort();
        logs.push(files);
    }
    assert_eq!(logs[0].len(), logs[1].len());
    for (a, b) in logs[0].iter().zip(&logs[1]) {
        assert_eq!(a.0, b.0);
        assert!(a.1 == b.1, "segment {} differs", a.0);
    }
}

#[test]
fn s_big_3_s_disk_a_spool_reserves_its_size_and_a_full_disk_refuses_it_leaving_nothing() {
    // The reservation is disk space taken (what the disk alarm sees); a disk without room
    // for it refuses the spool before any octet is written, and no file is left behind.
    let storage = SimStorage::new(2);
    let dir = Path::new("/sim/log");
    let (wal, _) = open(dir, Arc::new(storage.clone()));
    let spooler = wal.appender().spooler();
    let before = storage.used_bytes();
    let spool = spooler.open(2 * 1024 * 1024).unwrap();
    assert!(
        storage.used_bytes() >= before + 2 * 1024 * 1024,
        "the announced size is reserved at once"
    );
    drop(spool);
    assert_eq!(
        storage.used_bytes(),
        before,
        "and given back with the spool"
    );

    storage.set_capacity(Some(before + 1024 * 1024));
    let err = spooler.open(2 * 1024 * 1024).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
    let names = storage.list(dir).unwrap();
    assert!(!names.iter().any(|n| is_spool_file_name(n)), "{names:?}");
    storage.set_capacity(None);
    wal.close().unwrap();
}
