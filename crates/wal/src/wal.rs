//! The open log, [`Wal`]: recovery, then the writer thread started; handles for producers,
//! readers and reclamation; closing (draining what is pending).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crate::config::WalConfig;
use crate::error::{RecoveryError, WalError};
use crate::ids::{Lsn, SegmentId};
use crate::mark::{self, DurableMark, MarkFile};
use crate::reader::Reader;
use crate::reclaimer::Reclaimer;
use crate::recovery::{self, RecoveryReport, Visitor, scan_after};
use crate::storage::Storage;
use crate::writer::{Appender, Shared, Start, Writer, prepare_active};

/// An open write-ahead log: owns the writer thread (or, with `WalConfig::inline_writer`, the
/// writer run by whoever waits for durability). Dropping it closes it (draining what is
/// pending); [`Wal::close`] does the same and reports a latched failure.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    reader: Reader,
    writer: Option<JoinHandle<()>>,
}

impl Wal {
    /// Opens (or creates) the log in `dir`: recovery first, every intact record handed to
    /// `visit` in order; then the torn tail, if any, is truncated and the writer starts.
    ///
    /// # Errors
    /// Everything [`scan`] returns, an invalid config, and I/O errors preparing the segment to
    /// append to.
    pub fn open(
        dir: &Path,
        storage: Arc<dyn Storage>,
        config: &WalConfig,
        visit: &mut Visitor<'_>,
    ) -> Result<(Wal, RecoveryReport), RecoveryError> {
        config.validate()?;
        storage
            .create_dir_all(dir)
            .map_err(|source| RecoveryError::Io {
                path: dir.to_owned(),
                source,
            })?;
        // A spooled body is never log data, and none is in use before the log is open: what
        // a crash left goes (S-BIG-3).
        crate::writer::remove_stale_spools(&*storage, dir).map_err(|source| RecoveryError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let report = scan_after(
            &*storage,
            dir,
            config.recovery_mode,
            config.covered_through,
            visit,
        )?;
        let mark_io = |source| RecoveryError::Io {
            path: mark::mark_path(dir),
            source,
        };
        // Created (durably, saying nothing) before any segment of this format can exist.
        let nothing = DurableMark {
            lsn: Lsn(0),
            segment: SegmentId(0),
            end: 0,
            clean: false,
        };
        let mut mark = MarkFile::open(&*storage, dir, nothing).map_err(mark_io)?;
        let (active, active_unreserved) =
            prepare_active(&*storage, dir, config, &report).map_err(into_recovery)?;
        // prepare_active synced what recovery handed out: that is durable now.
        let recovered = DurableMark {
            lsn: Lsn(report.next_lsn.0 - 1),
            segment: active.id,
            end: active.end,
            clean: false,
        };
        mark.write_durably(recovered).map_err(mark_io)?;
        let start = Start {
            mark,
            recovered,
            active,
            active_unreserved,
            next_lsn: report.next_lsn,
            segment_bytes_max: config.segment_bytes_max,
            pending_bytes_max: config.pending_bytes_max,
            preallocate: config.preallocate,
        };
        let inline = config.inline_writer;
        let shared = Arc::new(Shared::new(dir.to_owned(), storage, &start, inline));
        let writer = Writer::new(Arc::clone(&shared), start);
        let handle = if inline {
            shared.set_inline_writer(writer);
            None
        } else {
            let spawned = std::thread::Builder::new()
                .name("wharf-wal-writer".to_owned())
                .spawn(move || writer.run())
                .map_err(|source| RecoveryError::Io {
                    path: dir.to_owned(),
                    source,
                })?;
            Some(spawned)
        };
        let reader = Reader::new(Arc::clone(&shared));
        let wal = Wal {
            shared,
            reader,
            writer: handle,
        };
        Ok((wal, report))
    }

    /// A handle for producers.
    pub fn appender(&self) -> Appender {
        Appender {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A handle for reading records back by position.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Segments that are sealed (and so may be deleted), in order.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn sealed_segments(&self) -> Result<Vec<SegmentId>, RecoveryError> {
        let below = self.shared.sealed_below.load(Ordering::Acquire);
        let mut ids = recovery::list_segments(&*self.shared.storage, &self.shared.dir)?;
        ids.retain(|id| id.0 < below);
        Ok(ids)
    }

    /// Deletes a whole sealed segment, durably (file removed, directory fsynced). The layer
    /// above calls it when nothing in the segment is live any more; the active segment (and
    /// one not yet durably followed by a newer one) is refused.
    ///
    /// # Errors
    /// [`WalError::SegmentNotSealed`], or [`WalError::Remove`] when the removal or the
    /// directory sync fails (the log keeps running; the file may come back after a crash,
    /// which recovery accepts).
    pub fn delete_segment(&self, id: SegmentId) -> Result<(), WalError> {
        self.reclaimer().delete_segment(id)
    }

    /// A handle that finds and deletes segments a checkpoint made redundant, usable from
    /// another thread while the log runs.
    pub fn reclaimer(&self) -> Reclaimer {
        Reclaimer::new(Arc::clone(&self.shared), self.reader.clone())
    }

    /// Drains what is pending, stops the writer and returns the latched failure, if any.
    ///
    /// # Errors
    /// The [`WalError::Failed`] the log latched.
    pub fn close(mut self) -> Result<(), WalError> {
        self.stop();
        match self.appender().failure() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn stop(&mut self) {
        self.shared.close();
        self.shared.close_inline();
        if let Some(handle) = self.writer.take() {
            // A panic in the writer is a bug that has already been reported by the panic
            // hook; waiters were not told "durable", which is what matters here.
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A failure readying the segment to append to, as an error of opening: an I/O error keeps
/// its path and the operating system's error.
fn into_recovery(err: WalError) -> RecoveryError {
    match err {
        WalError::Failed { path, op, source } => match Arc::try_unwrap(source) {
            Ok(source) => RecoveryError::Io { path, source },
            Err(source) => RecoveryError::Prepare(WalError::Failed { path, op, source }),
        },
        other => RecoveryError::Prepare(other),
    }
}
