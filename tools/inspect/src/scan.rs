//! Reads a data directory through the recovery scan (`wal::scan`, read-only, salvage mode so
//! that every problem is seen, not only the first) and the store's codec, starting, as
//! recovery does, with the newest checkpoint (`store::checkpoint::read`) and then only the log
//! records after it. Every command is built on [`scan`]; there is no second parser. Must not
//! write to the directory.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use wharf_broker::{Event, MessageRecord, Placement};
use wharf_store::checkpoint::{self, CheckpointRecord};
use wharf_store::codec::{self, DecodeError, STORE_FORMAT_VERSION, StoreRecord};
use wharf_wal::Storage as _;
use wharf_wal::{
    FRAME_HEADER_BYTES, FileStorage, RecordRef, RecoveryError, RecoveryMode, RecoveryReport,
    SegmentId, segment_file_name,
};

/// An error that stops the inspector with exit code 2: the directory is missing, is not a
/// wharf data directory, or is of a format this build does not read.
#[derive(Debug)]
pub struct Fatal(pub String);

impl std::error::Error for Fatal {}

impl Fatal {
    /// A failed write to the output. A closed pipe (`wharf-inspect dump DIR | head`) is no
    /// error: it becomes an empty message, which `run` ends on quietly.
    pub fn output(e: &std::io::Error) -> Fatal {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Fatal(String::new())
        } else {
            Fatal(format!("writing output: {e}"))
        }
    }
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A problem found in the log, named by file and offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The segment (for ordering).
    pub segment: u64,
    /// Byte offset in the segment file.
    pub offset: u64,
    /// The segment file, as given on the command line plus the file name.
    pub file: String,
    /// The record's Lsn, when its frame was intact.
    pub lsn: Option<u64>,
    /// `error` (recovery refuses it or it loses data) or `warning` (recovery handles it).
    pub severity: &'static str,
    /// What is wrong.
    pub what: String,
}

/// One segment file on disk.
#[derive(Debug, Clone)]
pub struct SegmentFile {
    /// Its id.
    pub id: SegmentId,
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes (preallocated zeros included).
    pub bytes: u64,
}

/// One intact record as the scan hands it to a command.
#[derive(Debug)]
pub struct Scanned<'a> {
    /// The segment file.
    pub file: &'a str,
    /// The segment id.
    pub segment: u64,
    /// Offset of the frame.
    pub offset: u64,
    /// Lsn.
    pub lsn: u64,
    /// The record kind byte.
    pub kind: u8,
    /// Frame bytes (header and payload).
    pub frame_bytes: u64,
    /// The decoded record. A message carried in a checkpoint reads as the `Published` that
    /// puts it in its queues, with `placements` giving its marks there.
    pub record: Result<StoreRecord, DecodeError>,
    /// The record is in the checkpoint in use (`file` names it; `lsn` is the checkpoint's).
    pub in_checkpoint: bool,
    /// For a carried message: its queues with delivery counts and redelivered flags.
    pub placements: Option<Vec<Placement>>,
}

/// The checkpoint recovery starts from: the newest one in the directory.
#[derive(Debug, Clone)]
pub struct CheckpointInUse {
    /// Its path.
    pub path: String,
    /// The Lsn it covers: log records up to it are not replayed.
    pub lsn: u64,
    /// Its size.
    pub bytes: u64,
    /// Its records.
    pub records: u64,
}

/// What a scan saw besides the records.
#[derive(Debug)]
pub struct ScanOutcome {
    /// The segment files, in order.
    pub segments: Vec<SegmentFile>,
    /// What the recovery scan reported (torn tail, salvage losses).
    pub report: RecoveryReport,
    /// Problems of the log itself: damaged frames, missing segments, a scan that stopped.
    pub findings: Vec<Finding>,
    /// The checkpoint in use, if any.
    pub checkpoint: Option<CheckpointInUse>,
    /// Log records still on disk but covered by the checkpoint (checked, not replayed).
    pub covered_records: u64,
}

/// Lists the segment files of `dir`, or says why it is not a data directory.
///
/// # Errors
/// [`Fatal`] when `dir` is missing, not a directory, unreadable or holds no segment.
pub fn segments(dir: &Path) -> Result<Vec<SegmentFile>, Fatal> {
    let meta = std::fs::metadata(dir).map_err(|e| {
        Fatal(format!(
            "{}: cannot open the data directory: {e}",
            dir.display()
        ))
    })?;
    if !meta.is_dir() {
        return Err(Fatal(format!("{}: not a directory", dir.display())));
    }
    let ids = wharf_wal::list_segments(&FileStorage, dir)
        .map_err(|e| Fatal(format!("{}: {e}", dir.display())))?;
    if ids.is_empty() {
        return Err(Fatal(format!(
            "{}: not a wharf data directory (no segment files named {})",
            dir.display(),
            segment_file_name(SegmentId(0))
        )));
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let path = dir.join(segment_file_name(id));
        let bytes = std::fs::metadata(&path)
            .map_err(|e| Fatal(format!("{}: {e}", path.display())))?
            .len();
        out.push(SegmentFile { id, path, bytes });
    }
    Ok(out)
}

/// Scans the log in `dir`, calling `visit` for every intact record in Lsn order.
/// `progress` prints the segment being read on stderr.
///
/// # Errors
/// [`Fatal`] for a directory that is not a data directory, a newer format, or an I/O error.
pub fn scan(
    dir: &Path,
    progress: bool,
    visit: &mut dyn FnMut(&Scanned<'_>),
) -> Result<ScanOutcome, Fatal> {
    let segments = segments(dir)?;
    let names: Vec<String> = segments
        .iter()
        .map(|s| s.path.display().to_string())
        .collect();
    let total_bytes: u64 = segments.iter().map(|s| s.bytes).sum();
    let mut findings = missing_segments(&segments, &names);
    let checkpoint = read_checkpoint(dir, &mut findings, visit)?;
    let covered = checkpoint.as_ref().map_or(0, |c| c.lsn);
    let mut covered_records = 0u64;
    let mut fatal: Option<Fatal> = None;
    let mut current: Option<(u64, usize)> = None;
    let mut done_bytes = 0u64;
    let mut previous_lsn: Option<u64> = checkpoint.as_ref().map(|c| c.lsn);
    let mut gaps: Vec<Finding> = Vec::new();
    let mut visitor = |r: RecordRef<'_>| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if r.lsn.0 <= covered {
            covered_records += 1;
            return Ok(());
        }
        let seg = r.position.segment.0;
        let index = match current {
            Some((id, index)) if id == seg => index,
            _ => {
                let index = segments.iter().position(|s| s.id.0 == seg).unwrap_or(0);
                if progress {
                    show_progress(index, segments.len(), done_bytes, total_bytes);
                }
                done_bytes += segments.get(index).map_or(0, |s| s.bytes);
                current = Some((seg, index));
                index
            }
        };
        let record = codec::decode_shared(r.kind, &r.payload_shared());
        if let Ok(StoreRecord::Format { version }) = &record
            && *version > STORE_FORMAT_VERSION
        {
            fatal = Some(Fatal(format!(
                "{}: store format version {version} is newer than this build reads ({STORE_FORMAT_VERSION})",
                names.get(index).map_or("?", String::as_str)
            )));
            return Err(Box::new(Fatal("stopped".to_owned())));
        }
        let file = names.get(index).map_or("?", String::as_str);
        if let Some(p) = previous_lsn
            && p.checked_add(1) != Some(r.lsn.0)
        {
            gaps.push(Finding {
                segment: seg,
                offset: r.position.offset,
                file: file.to_owned(),
                lsn: Some(r.lsn.0),
                severity: "error",
                what: format!(
                    "the log jumps from Lsn {p} to {}: the records between are missing",
                    r.lsn.0
                ),
            });
        }
        previous_lsn = Some(r.lsn.0);
        let scanned = Scanned {
            file,
            segment: seg,
            offset: r.position.offset,
            lsn: r.lsn.0,
            kind: r.kind,
            frame_bytes: (FRAME_HEADER_BYTES + r.payload.len()) as u64,
            record,
            in_checkpoint: false,
            placements: None,
        };
        visit(&scanned);
        Ok(())
    };
    let result = wharf_wal::scan(&FileStorage, dir, RecoveryMode::Salvage, &mut visitor);
    if progress {
        eprintln!(
            "\rscanned {} segments, {} bytes{:20}",
            segments.len(),
            total_bytes,
            ""
        );
    }
    if let Some(f) = fatal {
        return Err(f);
    }
    findings.append(&mut gaps);
    let report = report_of(result, dir, &segments, &mut findings)?;
    findings.extend(report_findings(&segments, &report));
    findings.extend(behind_checkpoint(checkpoint.as_ref(), &report));
    Ok(ScanOutcome {
        segments,
        report,
        findings,
        checkpoint,
        covered_records,
    })
}

/// The log must reach the checkpoint's Lsn (recovery refuses otherwise).
fn behind_checkpoint(c: Option<&CheckpointInUse>, report: &RecoveryReport) -> Option<Finding> {
    let c = c.filter(|c| report.next_lsn.0 <= c.lsn)?;
    Some(Finding {
        segment: 0,
        offset: 0,
        file: c.path.clone(),
        lsn: None,
        severity: "error",
        what: format!(
            "the log ends at Lsn {}, before the checkpoint's Lsn {}",
            report.next_lsn.0.saturating_sub(1),
            c.lsn
        ),
    })
}

/// The message a checkpoint refers to, read from its log record (format 4) and checked (the
/// frame's CRC, and the record must hold that message).
fn referenced_message(dir: &Path, r: &codec::Referenced) -> Result<wharf_broker::Message, String> {
    let f = &r.message;
    let path = dir.join(segment_file_name(SegmentId(f.segment)));
    let at = |why: String| format!("{} at offset {}: {why}", path.display(), f.offset);
    let file = FileStorage
        .open(&path, false)
        .map_err(|e| at(e.to_string()))?;
    let rec = wharf_wal::read_frame_at(&*file, f.offset)
        .map_err(|e| at(e.to_string()))?
        .map_err(|e| at(e.to_string()))?;
    let part = codec::message_part(rec.kind, &rec.payload).map_err(|e| at(e.to_string()))?;
    if codec::message_part_id(part) != Some(f.id) {
        return Err(at(format!("the record does not hold message {}", f.id.0)));
    }
    codec::decode_message_part(rec.kind, part).map_err(|e| at(e.to_string()))
}

/// Reads the newest checkpoint (temporary files are a write cut short and are ignored, as
/// recovery does) and hands its records to `visit` as [`Scanned`] records of that file. A
/// damaged checkpoint is a finding (recovery refuses it) and the log is then read whole.
fn read_checkpoint(
    dir: &Path,
    findings: &mut Vec<Finding>,
    visit: &mut dyn FnMut(&Scanned<'_>),
) -> Result<Option<CheckpointInUse>, Fatal> {
    let listed = checkpoint::list(&FileStorage, dir).map_err(|e| Fatal(e.to_string()))?;
    let Some((lsn, path)) = listed.into_iter().next() else {
        return Ok(None);
    };
    let file = path.display().to_string();
    // Checked whole first, so a damaged checkpoint feeds nothing half-way.
    let result = checkpoint::read(&FileStorage, &path, &mut |_, _, _| Ok(())).and_then(|_| {
        checkpoint::read(&FileStorage, &path, &mut |rec, offset, frame_bytes| {
            let (kind, record, placements) = match rec {
                CheckpointRecord::Event(e) => (codec::RecordKind::of(&e).byte(), e, None),
                CheckpointRecord::Carried(c) => {
                    let queues = c.placements.iter().map(|p| p.queue.clone()).collect();
                    let published = Event::Published {
                        vhost: c.vhost,
                        message: MessageRecord { message: c.message },
                        queues,
                        scheduled: None,
                    };
                    (codec::CARRIED_KIND, published, Some(c.placements))
                }
                CheckpointRecord::Referenced(r) => {
                    let message =
                        referenced_message(dir, &r).map_err(wharf_store::StoreError::Log)?;
                    let queues = r.placements.iter().map(|p| p.queue.clone()).collect();
                    let published = Event::Published {
                        vhost: r.vhost,
                        message: MessageRecord {
                            message: std::sync::Arc::new(message),
                        },
                        queues,
                        scheduled: None,
                    };
                    (codec::REFERENCED_KIND, published, Some(r.placements))
                }
            };
            visit(&Scanned {
                file: &file,
                segment: 0,
                offset,
                lsn: lsn.0,
                kind,
                frame_bytes,
                record: Ok(StoreRecord::Event(record)),
                in_checkpoint: true,
                placements,
            });
            Ok(())
        })
    });
    match result {
        Ok(header) => Ok(Some(CheckpointInUse {
            bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
            path: file,
            lsn: header.lsn.0,
            records: header.records,
        })),
        Err(err @ wharf_store::StoreError::UnsupportedVersion { .. }) => {
            Err(Fatal(err.to_string()))
        }
        Err(err) => {
            findings.push(Finding {
                segment: 0,
                offset: 0,
                file,
                lsn: None,
                severity: "error",
                what: format!(
                    "{err}; recovery refuses to start (`wharf --salvage` skips it for an older \
                     checkpoint or the log alone)"
                ),
            });
            Ok(None)
        }
    }
}

/// The scan's report; a scan stopped by corruption (a header naming another segment, which
/// recovery never accepts) becomes a finding and an empty report.
fn report_of(
    result: Result<RecoveryReport, RecoveryError>,
    dir: &Path,
    segments: &[SegmentFile],
    findings: &mut Vec<Finding>,
) -> Result<RecoveryReport, Fatal> {
    match result {
        Ok(report) => Ok(report),
        Err(RecoveryError::Corrupt {
            path,
            offset,
            reason,
        }) => {
            let what = format!(
                "{reason}; the scan stops here (recovery refuses to start, even with `wharf --salvage`)"
            );
            findings.push(finding_at(segments, &path, offset, None, "error", what));
            Ok(RecoveryReport::default())
        }
        Err(err @ RecoveryError::UnsupportedVersion { .. }) => Err(Fatal(err.to_string())),
        Err(err) => Err(Fatal(format!("{}: {err}", dir.display()))),
    }
}

fn show_progress(index: usize, count: usize, done: u64, total: u64) {
    let pct = done.saturating_mul(100).checked_div(total).unwrap_or(0);
    eprint!("\rscanning segment {}/{count} ({pct}%)", index + 1);
    let _ = std::io::stderr().flush();
}

/// Gaps between segment ids: garbage collection only deletes the oldest segments (those a
/// checkpoint covers), so a gap in the middle is a file lost by hand or by the file system.
fn missing_segments(segments: &[SegmentFile], names: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, pair) in segments.windows(2).enumerate() {
        let [a, b] = pair else { continue };
        if a.id.0.checked_add(1) != Some(b.id.0) {
            out.push(Finding {
                segment: b.id.0,
                offset: 0,
                file: names.get(i + 1).cloned().unwrap_or_default(),
                lsn: None,
                severity: "error",
                what: format!(
                    "segment files {} to {} are missing (the records they held are lost)",
                    segment_file_name(a.id.next()),
                    segment_file_name(SegmentId(b.id.0.saturating_sub(1)))
                ),
            });
        }
    }
    out
}

fn finding_at(
    segments: &[SegmentFile],
    path: &Path,
    offset: u64,
    lsn: Option<u64>,
    severity: &'static str,
    what: String,
) -> Finding {
    let segment = segments
        .iter()
        .find(|s| s.path == path)
        .map_or(u64::MAX, |s| s.id.0);
    Finding {
        segment,
        offset,
        file: path.display().to_string(),
        lsn,
        severity,
        what,
    }
}

fn report_findings(segments: &[SegmentFile], report: &RecoveryReport) -> Vec<Finding> {
    let mut out = Vec::new();
    if report.mark_missing {
        let what = format!(
            "{} is missing but the log was written with it: recovery refuses to start \
             (`wharf --salvage` starts on whatever the log holds)",
            wharf_wal::MARK_FILE_NAME
        );
        out.push(Finding {
            segment: u64::MAX,
            offset: 0,
            file: wharf_wal::MARK_FILE_NAME.to_owned(),
            lsn: None,
            severity: "error",
            what,
        });
    }
    let mut durable_lost = false;
    for loss in &report.salvaged {
        let what = if loss.lsns.start >= report.next_lsn {
            // S-DISK-6: the log ends before what an fsync covered (the durable mark).
            durable_lost = true;
            format!(
                "{}: the log ends before lsn {} but an fsync covered it through lsn {}, so {} \
                 durable (confirmed) record(s) are damaged or missing; this is not a torn \
                 tail: recovery refuses to start (`wharf --salvage` cuts the log here and \
                 accepts the loss)",
                loss.reason,
                loss.lsns.start,
                loss.lsns.end.0.saturating_sub(1),
                loss.lsns.end.0.saturating_sub(loss.lsns.start.0),
            )
        } else if loss.lsns.start < loss.lsns.end {
            let (reason, bytes, lsns) = (&loss.reason, loss.bytes, &loss.lsns);
            format!(
                "{reason}: {bytes} bytes unreadable, Lsns {}..{} lost",
                lsns.start, lsns.end
            )
        } else {
            format!("{}: {} bytes unreadable", loss.reason, loss.bytes)
        };
        out.push(finding_at(
            segments,
            &loss.path,
            loss.offset,
            None,
            "error",
            what,
        ));
    }
    if let Some(torn) = report.torn_tail.as_ref().filter(|_| !durable_lost) {
        out.push(finding_at(
            segments,
            &torn.path,
            torn.offset,
            None,
            "warning",
            format!(
                "torn tail of {} bytes ({}): recovery cuts it; it was never durable",
                torn.bytes, torn.reason
            ),
        ));
    }
    out
}
