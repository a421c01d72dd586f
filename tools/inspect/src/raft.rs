//! `wharf-inspect raft DIR`: a cluster member's Raft state under `DIR/raft` (storage-format.md,
//! "Raft records", "Raft snapshot file", "Member file"): the member file, then for each group
//! its log's records in Lsn order (format, votes, committed marks, truncations, purges, entries
//! with their term, index, proposing leader, `now` and decoded broker events), its snapshot
//! file's summary, and a summary line. Records are decoded by `wharf_cluster::record`, the
//! snapshot by `wharf_cluster::snapshot_file` and `snapshot`, the member file by
//! `wharf_cluster::incarnation`: no second parser. Which committed entries were voided
//! (S-CLU-60) is found as a member finds it: the snapshot's committed state, then the
//! committed entries after it applied by `QueueStateMachine::apply_entries`. Read-only.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use openraft::EntryPayload;
use serde_json::{Map, Value as Json, json};
use wharf_cluster::record::{self, RaftRecord};
use wharf_cluster::snapshot_file::{self, SNAPSHOT_FILE_NAME};
use wharf_cluster::{Entry, LogId, QueueStateMachine, incarnation, snapshot};
use wharf_wal::{FileStorage, RecoveryMode};

use crate::render::{self, BodyMode};
use crate::scan::{Fatal, Finding};

/// One group's directory, as found under `DIR/raft`.
struct GroupDir {
    id: u64,
    path: PathBuf,
}

fn groups(raft: &Path, only: Option<u64>) -> Result<Vec<GroupDir>, Fatal> {
    let entries = std::fs::read_dir(raft).map_err(|e| Fatal(format!("{}: {e}", raft.display())))?;
    let mut found: Vec<GroupDir> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_prefix("group-")?.parse().ok()?;
            Some(GroupDir { id, path: e.path() })
        })
        .filter(|g| only.is_none_or(|o| o == g.id))
        .collect();
    found.sort_by_key(|g| g.id);
    Ok(found)
}

fn log_id_json(l: Option<LogId>) -> Json {
    l.map_or(
        Json::Null,
        |l| json!({ "term": l.leader_id.term, "leader": l.leader_id.node_id, "index": l.index }),
    )
}

/// Prints `v` as a JSON line, or as `WHAT key=value ...` text.
fn emit(json: bool, out: &mut dyn Write, v: Map<String, Json>) -> Result<(), Fatal> {
    let written = if json {
        writeln!(out, "{}", Json::Object(v))
    } else {
        let what = v
            .get("what")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_owned();
        let mut rest = v;
        rest.remove("what");
        writeln!(out, "{what:<10} {}", render::human_pairs(&rest))
    };
    written.map_err(|e| Fatal::output(&e))
}

fn object(v: Json) -> Map<String, Json> {
    match v {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

/// The `raft` command: exit 0, or 1 when a record or file does not decode.
///
/// # Errors
/// `DIR/raft` is missing or unreadable, or the output failed.
pub fn raft(
    data: &Path,
    json: bool,
    only: Option<u64>,
    body: BodyMode,
    out: &mut dyn Write,
) -> Result<i32, Fatal> {
    let dir = data.join("raft");
    if !dir.is_dir() {
        return Err(Fatal(format!(
            "{}: no Raft directory (not a cluster member's data directory)",
            dir.display()
        )));
    }
    let mut problems = 0;
    let member = dir.join(incarnation::MEMBER_FILE_NAME);
    match std::fs::read(&member) {
        Ok(bytes) => match incarnation::decode(&bytes) {
            Ok((id, slot)) => emit(
                json,
                out,
                object(json!({ "what": "member", "id": id, "slot": slot })),
            )?,
            Err(e) => {
                problems += 1;
                emit(
                    json,
                    out,
                    object(
                        json!({ "what": "problem", "file": member.display().to_string(), "problem": e.to_string() }),
                    ),
                )?;
            }
        },
        Err(_) => emit(
            json,
            out,
            object(json!({ "what": "member", "id": null, "note": "no member file" })),
        )?,
    }
    for g in groups(&dir, only)? {
        problems += group(json, &g, body, out)?;
    }
    Ok(i32::from(problems > 0))
}

/// What replaying a group's records leaves, as the log store's reopening does.
#[derive(Default)]
struct Log {
    entries: BTreeMap<u64, Entry>,
    committed: Option<LogId>,
    vote: Json,
    last_purged: Option<LogId>,
}

fn group(json: bool, g: &GroupDir, body: BodyMode, out: &mut dyn Write) -> Result<u32, Fatal> {
    let mut bad: Vec<Finding> = Vec::new();
    let (lines, log) = read_log(g, &mut bad);
    let (machine, snapshot_line) = read_snapshot(g, &mut bad);

    // Voided entries: the committed entries after the snapshot, applied as a member does.
    let from = machine.with(|m| m.last_applied().map_or(0, |l| l.index + 1));
    let through = log.committed.map_or(0, |c| c.index + 1);
    let to_apply: Vec<Entry> = log
        .entries
        .range(from..through)
        .map(|(_, e)| e.clone())
        .collect();
    let mut voided: BTreeMap<u64, bool> = BTreeMap::new();
    match machine.apply_entries(to_apply) {
        Ok(applied) => voided.extend(applied.iter().map(|a| (a.index, a.voided))),
        Err(e) => bad.push(problem(
            &g.path,
            None,
            format!("replaying the committed entries: {e}"),
        )),
    }

    let errors = bad.iter().filter(|b| b.severity == "error").count();
    let problems = u32::try_from(errors).unwrap_or(u32::MAX);
    for (lsn, rec) in &lines {
        emit(json, out, record_line(g.id, *lsn, rec, &log, &voided, body))?;
    }
    for b in &bad {
        emit(json, out, problem_line(g.id, b))?;
    }
    if let Some(line) = snapshot_line {
        emit(json, out, line)?;
    }
    let voided_list: Vec<u64> = voided
        .iter()
        .filter(|(_, v)| **v)
        .map(|(i, _)| *i)
        .collect();
    let summary = json!({
        "what": "group", "group": g.id, "vote": log.vote,
        "committed": log_id_json(log.committed), "last_purged": log_id_json(log.last_purged),
        "entries": log.entries.len(),
        "first_index": log.entries.keys().next(), "last_index": log.entries.keys().next_back(),
        "voided": voided_list,
    });
    emit(json, out, object(summary))?;
    Ok(problems)
}

fn record_line(
    group: u64,
    lsn: u64,
    rec: &RaftRecord,
    log: &Log,
    voided: &BTreeMap<u64, bool>,
    body: BodyMode,
) -> Map<String, Json> {
    let mut m = object(json!({ "what": "record", "group": group, "lsn": lsn }));
    let fields = match rec {
        RaftRecord::Format { version, .. } => json!({ "record": "format", "version": version }),
        RaftRecord::Vote { vote, .. } => json!({
            "record": "vote", "term": vote.leader_id.term, "node": vote.leader_id.voted_for(),
            "committed": vote.committed,
        }),
        RaftRecord::Truncate { index, .. } => json!({ "record": "truncate", "from_index": index }),
        RaftRecord::Purge { log_id, .. } => {
            json!({ "record": "purge", "through": log_id_json(Some(*log_id)) })
        }
        RaftRecord::Committed { log_id, .. } => {
            json!({ "record": "committed", "log_id": log_id_json(*log_id) })
        }
        RaftRecord::Entry { entry, .. } => entry_json(entry, log, voided, body),
    };
    m.extend(object(fields));
    m
}

fn entry_json(entry: &Entry, log: &Log, voided: &BTreeMap<u64, bool>, body: BodyMode) -> Json {
    let id = entry.log_id;
    // Still in the log as written (not truncated away and written over later).
    let held = log.entries.get(&id.index).is_some_and(|e| e.log_id == id);
    let committed = log.committed.is_some_and(|c| c.index >= id.index) && held;
    let mut m = object(json!({
        "record": "entry", "term": id.leader_id.term, "leader": id.leader_id.node_id,
        "index": id.index, "committed": committed, "held": held,
    }));
    match &entry.payload {
        EntryPayload::Blank => {
            m.insert("payload".into(), json!("blank"));
        }
        EntryPayload::Membership(ms) => {
            let voters: Vec<u64> = ms.voter_ids().collect();
            m.insert("payload".into(), json!("membership"));
            m.insert("voters".into(), json!(voters));
        }
        EntryPayload::Normal(p) => {
            m.insert("payload".into(), json!("events"));
            m.insert("now_ms".into(), json!(p.now_ms));
            if held && let Some(v) = voided.get(&id.index) {
                m.insert("voided".into(), json!(v));
            }
            let events: Vec<Json> = p
                .events
                .iter()
                .map(|e| {
                    let mut m = Map::new();
                    m.insert("kind".into(), json!(event_name(e)));
                    m.extend(render::event_json(e, body));
                    Json::Object(m)
                })
                .collect();
            m.insert("events".into(), Json::Array(events));
        }
    }
    Json::Object(m)
}

/// An event's variant name (`Published`, `Bound`, ...), as the store's record kinds name them.
fn event_name(e: &wharf_broker::Event) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The group's log records of group `g` in Lsn order, and the log they leave; records that do
/// not decode go to `bad`.
fn read_log(g: &GroupDir, bad: &mut Vec<Finding>) -> (Vec<(u64, RaftRecord)>, Log) {
    let mut lines: Vec<(u64, RaftRecord)> = Vec::new();
    let log_dir = g.path.join("log");
    let mut undecoded = Vec::new();
    let mut visit =
        |r: wharf_wal::RecordRef<'_>| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            match record::decode(r.kind, r.payload) {
                Ok(rec) if rec.group() == g.id => lines.push((r.lsn.0, rec)),
                Ok(_) => {}
                Err(e) => undecoded.push(problem(&log_dir, Some(r.lsn.0), e.to_string())),
            }
            Ok(())
        };
    match wharf_wal::scan(&FileStorage, &log_dir, RecoveryMode::Salvage, &mut visit) {
        Ok(report) => {
            for loss in &report.salvaged {
                bad.push(Finding {
                    offset: loss.offset,
                    what: format!(
                        "{} damaged bytes skipped ({}); Lsns {}..{} lost",
                        loss.bytes, loss.reason, loss.lsns.start.0, loss.lsns.end.0
                    ),
                    ..problem(&loss.path, None, String::new())
                });
            }
            if let Some(t) = &report.torn_tail {
                bad.push(Finding {
                    offset: t.offset,
                    severity: "warning",
                    what: format!(
                        "a torn tail of {} bytes ({}): a member's restart cuts it",
                        t.bytes, t.reason
                    ),
                    ..problem(&t.path, None, String::new())
                });
            }
        }
        Err(e) => bad.push(problem(&log_dir, None, e.to_string())),
    }
    bad.append(&mut undecoded);
    let mut log = Log::default();
    for (_, rec) in &lines {
        match rec {
            RaftRecord::Vote { vote, .. } => {
                log.vote = json!({ "term": vote.leader_id.term, "node": vote.leader_id.voted_for(), "committed": vote.committed });
            }
            RaftRecord::Entry { entry, .. } => {
                let index = entry.log_id.index;
                log.entries.split_off(&index);
                log.entries.insert(index, entry.clone());
            }
            RaftRecord::Truncate { index, .. } => {
                log.entries.split_off(index);
            }
            RaftRecord::Purge { log_id, .. } => {
                log.entries = log.entries.split_off(&(log_id.index + 1));
                log.last_purged = log.last_purged.max(Some(*log_id));
            }
            RaftRecord::Committed { log_id, .. } => log.committed = log.committed.max(*log_id),
            RaftRecord::Format { .. } => {}
        }
    }

    (lines, log)
}

/// Group `g`'s snapshot file: the committed state it holds (a fresh one without a file) and
/// its summary line; a damaged file goes to `bad`.
fn read_snapshot(
    g: &GroupDir,
    bad: &mut Vec<Finding>,
) -> (QueueStateMachine, Option<Map<String, Json>>) {
    let snap_path = g.path.join("snapshot").join(SNAPSHOT_FILE_NAME);
    let mut machine = QueueStateMachine::new();
    let mut snapshot_line = None;
    if let Ok(file) = std::fs::read(&snap_path) {
        match snapshot_file::decode(&file) {
            Ok((meta, bytes)) => {
                let decoded = snapshot::decode(&bytes).map(|d| {
                    let state = d.broker.durable_state();
                    let messages: usize = state.queues.iter().map(|(_, m)| m.len()).sum();
                    (state.queues.len(), messages, d.now_ms)
                });
                let voters: Vec<u64> = meta.last_membership.membership().voter_ids().collect();
                let mut line = object(json!({
                    "what": "snapshot", "group": g.id, "id": meta.snapshot_id,
                    "last_log_id": log_id_json(meta.last_log_id), "voters": voters,
                    "bytes": bytes.len(),
                }));
                match decoded {
                    Ok((queues, messages, now_ms)) => {
                        line.insert("queues".into(), json!(queues));
                        line.insert("messages".into(), json!(messages));
                        line.insert("now_ms".into(), json!(now_ms));
                    }
                    Err(e) => {
                        bad.push(problem(&snap_path, None, e.to_string()));
                    }
                }
                if let Ok(m) = QueueStateMachine::restored(meta, bytes) {
                    machine = m;
                }
                snapshot_line = Some(line);
            }
            Err(e) => {
                bad.push(problem(&snap_path, None, e.to_string()));
            }
        }
    }

    (machine, snapshot_line)
}

/// An error found in file `file` (at Lsn `lsn` when its frame was intact).
fn problem(file: &Path, lsn: Option<u64>, what: String) -> Finding {
    Finding {
        segment: 0,
        offset: 0,
        file: file.display().to_string(),
        lsn,
        severity: "error",
        what,
    }
}

/// A problem as an output line of group `group`.
fn problem_line(group: u64, f: &Finding) -> Map<String, Json> {
    object(json!({
        "what": "problem", "group": group, "file": f.file, "offset": f.offset, "lsn": f.lsn,
        "severity": f.severity, "problem": f.what,
    }))
}

/// What `verify` adds for a cluster member (nothing for a directory without `DIR/raft`):
/// every damaged frame, undecodable record and damaged snapshot or member file of its groups.
///
/// # Errors
/// `DIR/raft` cannot be listed.
pub fn findings(dir: &Path) -> Result<Vec<Finding>, Fatal> {
    let raft = dir.join("raft");
    if !raft.is_dir() {
        return Ok(Vec::new());
    }
    let mut bad = Vec::new();
    let member = raft.join(incarnation::MEMBER_FILE_NAME);
    if let Ok(bytes) = std::fs::read(&member)
        && let Err(e) = incarnation::decode(&bytes)
    {
        bad.push(problem(&member, None, e.to_string()));
    }
    for g in groups(&raft, None)? {
        let _ = read_log(&g, &mut bad);
        let _ = read_snapshot(&g, &mut bad);
    }
    Ok(bad)
}
