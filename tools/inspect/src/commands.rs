//! The commands: each scans the log (read-only), builds its report as JSON values and prints
//! them as JSON lines (`--json`) or as aligned text. Must not write to the data directory.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value as Json, json};
use wharf_broker::{Broker, Event, Message, SettleKind};
use wharf_store::codec::StoreRecord;

use crate::render::{self, BodyMode};
use crate::scan::{self, Fatal, Finding, ScanOutcome, Scanned};
use crate::state::{self, Replay};

/// What every command needs.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The data directory.
    pub dir: &'a Path,
    /// JSON lines instead of text.
    pub json: bool,
    /// Progress on stderr.
    pub progress: bool,
}

/// A command's result: its exit code (0 fine, 1 problems found or nothing matched).
pub type Exit = Result<i32, Fatal>;

const LIVE_NOTE: &str = "read-only; on a running broker only records already on disk are read, and an unsynced tail shows as a torn tail";

pub(crate) fn io(e: &std::io::Error) -> Fatal {
    Fatal::output(e)
}

fn line(out: &mut dyn Write, v: &Json) -> Result<(), Fatal> {
    writeln!(out, "{v}").map_err(|e| io(&e))
}

fn text(out: &mut dyn Write, s: &str) -> Result<(), Fatal> {
    writeln!(out, "{s}").map_err(|e| io(&e))
}

/// Scans and replays the whole log.
fn replay(ctx: &Ctx<'_>) -> Result<(Replay, ScanOutcome), Fatal> {
    let mut replay = Replay::new();
    let outcome = scan::scan(ctx.dir, ctx.progress, &mut |s| replay.visit(s))?;
    Ok((replay, outcome))
}

fn finding_json(f: &Finding) -> Json {
    json!({ "file": f.file, "offset": f.offset, "lsn": f.lsn, "severity": f.severity, "problem": f.what })
}

fn finding_text(f: &Finding) -> String {
    let lsn = f.lsn.map(|l| format!(" (lsn {l})")).unwrap_or_default();
    format!(
        "{} offset {}{lsn}: {}: {}",
        f.file, f.offset, f.severity, f.what
    )
}

// ----- queues -----

/// The state recovery would rebuild, per queue, after `recovered(now)`: one JSON object per
/// queue, by vhost then name.
pub fn queue_rows(broker: &Broker) -> Vec<Json> {
    let state = broker.durable_state();
    let mut extra: HashMap<(String, String), (Option<u64>, Option<u64>)> = HashMap::new();
    for (info, msgs) in &state.queues {
        let oldest = msgs.iter().map(|m| m.enqueued_at_ms).min();
        let deadline = msgs.iter().filter_map(|m| m.deadline_ms).min();
        extra.insert((info.vhost.clone(), info.name.clone()), (oldest, deadline));
    }
    let mut rows = Vec::new();
    for vhost in broker.vhost_names() {
        let policies = broker.policies(&vhost);
        let policy = |name: &Option<String>, operator: bool| -> Json {
            name.as_ref().map_or(Json::Null, |n| {
                let def = policies
                    .iter()
                    .find(|p| p.operator == operator && &p.policy.name == n)
                    .map_or(Json::Null, |p| {
                        serde_json::from_str(&p.policy.definition).unwrap_or(Json::Null)
                    });
                json!({ "name": n, "definition": def })
            })
        };
        for q in broker.queues(&vhost) {
            let (oldest, deadline) = extra
                .get(&(q.vhost.clone(), q.name.clone()))
                .copied()
                .unwrap_or((None, None));
            rows.push(json!({
                "vhost": q.vhost, "queue": q.name,
                "ready": q.ready, "unacked": q.unacked, "bytes": q.ready_bytes,
                "oldest_enqueued_ms": oldest, "next_deadline_ms": deadline,
                "oldest_enqueued": render::rfc3339_json(oldest),
                "next_deadline": render::rfc3339_json(deadline),
                "auto_delete": q.auto_delete,
                "arguments": render::table_json(&q.arguments),
                "policy": policy(&q.policy, false),
                "operator_policy": policy(&q.operator_policy, true),
            }));
            // S-PRIO-1: only a priority queue has the field.
            if let (Some(p), Some(row)) = (q.max_priority, rows.last_mut()) {
                row["max_priority"] = json!(p);
            }
        }
    }
    rows
}

/// `queues DIR`: what recovery would rebuild at `now_ms`.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn queues(ctx: &Ctx<'_>, now_ms: u64, out: &mut dyn Write) -> Exit {
    let (mut replay, _) = replay(ctx)?;
    let _ = replay.broker.recovered(now_ms);
    let rows = queue_rows(&replay.broker);
    if ctx.json {
        for r in &rows {
            line(out, r)?;
        }
        return Ok(0);
    }
    let mut table = vec![vec![
        "VHOST".to_owned(),
        "QUEUE".to_owned(),
        "READY".to_owned(),
        "UNACKED".to_owned(),
        "BYTES".to_owned(),
        "OLDEST_MS".to_owned(),
        "OLDEST".to_owned(),
        "NEXT_DEADLINE_MS".to_owned(),
        "NEXT_DEADLINE".to_owned(),
        "ARGUMENTS".to_owned(),
        "POLICY".to_owned(),
    ]];
    for r in &rows {
        let s = |k: &str| match &r[k] {
            Json::Null => "-".to_owned(),
            v => render::human_value(v),
        };
        let pol = |k: &str| match &r[k] {
            Json::Null => None,
            p => Some(format!(
                "{}={}",
                render::human_value(&p["name"]),
                p["definition"]
            )),
        };
        let policy = [pol("policy"), pol("operator_policy")]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        table.push(vec![
            s("vhost"),
            s("queue"),
            s("ready"),
            s("unacked"),
            s("bytes"),
            s("oldest_enqueued_ms"),
            s("oldest_enqueued"),
            s("next_deadline_ms"),
            s("next_deadline"),
            s("arguments"),
            if policy.is_empty() {
                "-".to_owned()
            } else {
                policy
            },
        ]);
    }
    text(out, &aligned(&table))?;
    Ok(0)
}

/// Columns padded to their widest cell (the last column is not padded).
fn aligned(rows: &[Vec<String>]) -> String {
    use std::fmt::Write as _;
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut lines = Vec::with_capacity(rows.len());
    for r in rows {
        let mut l = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        lines.push(l.trim_end().to_owned());
    }
    lines.join("\n")
}

// ----- summary -----

/// `summary DIR`: segments, records by kind, live and reclaimable bytes, queues, and what
/// recovery would do at `now_ms`.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn summary(ctx: &Ctx<'_>, now_ms: u64, out: &mut dyn Write) -> Exit {
    let (mut replay, outcome) = replay(ctx)?;
    let file_bytes: u64 = outcome.segments.iter().map(|s| s.bytes).sum();
    let live = replay.definition_bytes + replay.live_message_bytes;
    let mut kinds = Map::new();
    for (kind, k) in &replay.kinds {
        kinds.insert(
            state::kind_name(*kind),
            json!({ "records": k.records, "bytes": k.bytes }),
        );
    }
    let torn = outcome.report.torn_tail.as_ref().map(
        |t| json!({ "file": t.path.display().to_string(), "offset": t.offset, "bytes": t.bytes }),
    );
    let at_recovery = replay.broker.recovered(now_ms);
    let (expired, dead_lettered) = recovery_deaths(&at_recovery.events);
    let queues: Vec<Json> = queue_rows(&replay.broker)
        .into_iter()
        .map(|r| json!({ "vhost": r["vhost"], "queue": r["queue"], "messages": r["ready"], "bytes": r["bytes"] }))
        .collect();
    let problems = outcome.findings.len() + replay.findings.len();
    let checkpoint = outcome.checkpoint.as_ref().map(|c| {
        json!({ "file": c.path, "lsn": c.lsn, "records": c.records, "bytes": c.bytes,
            "covered_log_records": outcome.covered_records })
    });
    let report = json!({
        "directory": ctx.dir.display().to_string(),
        "note": LIVE_NOTE,
        "checkpoint": checkpoint,
        "segments": { "count": outcome.segments.len(), "bytes": file_bytes,
            "oldest_record_ms": replay.time_range_ms.map(|t| t.0),
            "newest_record_ms": replay.time_range_ms.map(|t| t.1),
            "oldest_record": render::rfc3339_json(replay.time_range_ms.map(|t| t.0)),
            "newest_record": render::rfc3339_json(replay.time_range_ms.map(|t| t.1)) },
        "records": { "count": replay.records, "bytes": replay.record_bytes, "by_kind": kinds },
        "live_bytes": live,
        "live_definition_bytes": replay.definition_bytes,
        "live_message_bytes": replay.live_message_bytes,
        "live_messages": replay.live_messages(),
        "reclaimable_bytes": replay.record_bytes.saturating_sub(live),
        "queues": queues,
        "recovery": { "now_ms": now_ms, "torn_tail": torn,
            "messages_expiring": expired, "messages_dead_lettered": dead_lettered },
        "problems": problems,
    });
    if ctx.json {
        line(out, &report)?;
    } else {
        text(out, &summary_text(&report))?;
    }
    Ok(0)
}

/// Messages that recovery's expiry removes: (expired and dropped, dead-lettered).
fn recovery_deaths(events: &[Event]) -> (usize, usize) {
    let mut expired = 0;
    let mut dead = 0;
    for e in events {
        match e {
            Event::Settled {
                ids,
                kind: SettleKind::Expire,
                ..
            } => expired += ids.len(),
            Event::DeadLettered { .. } => dead += 1,
            _ => {}
        }
    }
    (expired, dead)
}

fn summary_text(r: &Json) -> String {
    let v = |j: &Json| match j {
        Json::Null => "-".to_owned(),
        other => render::human_value(other),
    };
    let mut s = Vec::new();
    s.push(format!(
        "directory    {} ({})",
        v(&r["directory"]),
        r["note"].as_str().unwrap_or_default()
    ));
    s.push(match &r["checkpoint"] {
        Json::Null => "checkpoint   none: recovery replays the whole log".to_owned(),
        c => format!(
            "checkpoint   {} in use: covers the log through Lsn {} ({} records, {} bytes); {} log records it covers are still on disk",
            v(&c["file"]),
            c["lsn"],
            c["records"],
            c["bytes"],
            c["covered_log_records"]
        ),
    });
    let seg = &r["segments"];
    s.push(format!(
        "segments     {} files, {} bytes; record times {} ({}) .. {} ({}) (ms since the epoch)",
        seg["count"],
        seg["bytes"],
        v(&seg["oldest_record_ms"]),
        v(&seg["oldest_record"]),
        v(&seg["newest_record_ms"]),
        v(&seg["newest_record"])
    ));
    s.push(format!(
        "records      {} ({} bytes)",
        r["records"]["count"], r["records"]["bytes"]
    ));
    let mut kinds = vec![vec![
        "  KIND".to_owned(),
        "RECORDS".to_owned(),
        "BYTES".to_owned(),
    ]];
    if let Some(m) = r["records"]["by_kind"].as_object() {
        for (k, c) in m {
            kinds.push(vec![
                format!("  {k}"),
                c["records"].to_string(),
                c["bytes"].to_string(),
            ]);
        }
    }
    s.push(aligned(&kinds));
    s.push(format!(
        "live         {} bytes (definitions {}, {} messages in {} bytes)",
        r["live_bytes"], r["live_definition_bytes"], r["live_messages"], r["live_message_bytes"]
    ));
    s.push(format!("reclaimable  {} bytes", r["reclaimable_bytes"]));
    let mut qs = vec![vec![
        "  VHOST".to_owned(),
        "QUEUE".to_owned(),
        "MESSAGES".to_owned(),
        "BYTES".to_owned(),
    ]];
    if let Some(rows) = r["queues"].as_array() {
        for q in rows {
            qs.push(vec![
                format!("  {}", v(&q["vhost"])),
                v(&q["queue"]),
                q["messages"].to_string(),
                q["bytes"].to_string(),
            ]);
        }
    }
    s.push("queues (after recovery)".to_owned());
    s.push(aligned(&qs));
    let rec = &r["recovery"];
    let torn = match &rec["torn_tail"] {
        Json::Null => "no torn tail".to_owned(),
        t => format!(
            "cut a torn tail of {} bytes at {} offset {}",
            t["bytes"],
            v(&t["file"]),
            t["offset"]
        ),
    };
    s.push(format!(
        "recovery     at now={}: {torn}; {} messages expire, {} are dead-lettered",
        rec["now_ms"], rec["messages_expiring"], rec["messages_dead_lettered"]
    ));
    s.push(format!("problems     {} (run verify)", r["problems"]));
    s.join("\n")
}

// ----- verify -----

/// `verify DIR`: every frame, checksum and record; exit 0 only when clean.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn verify(ctx: &Ctx<'_>, all: bool, out: &mut dyn Write) -> Exit {
    let (replay, outcome) = replay(ctx)?;
    let mut findings = outcome.findings;
    findings.extend(replay.findings.iter().cloned());
    findings.sort();
    // A cluster member's Raft logs and files after its own log's (`raft`).
    findings.extend(crate::raft::findings(ctx.dir)?);
    let shown: Vec<&Finding> = if all {
        findings.iter().collect()
    } else {
        findings.iter().take(1).collect()
    };
    if ctx.json {
        line(
            out,
            &json!({
                "clean": findings.is_empty(),
                "segments": outcome.segments.len(),
                "records": replay.records,
                "problems": findings.len(),
                "findings": shown.iter().map(|f| finding_json(f)).collect::<Vec<_>>(),
            }),
        )?;
    } else if findings.is_empty() {
        text(
            out,
            &format!(
                "clean: {} records in {} segments; every frame, checksum and record checked",
                replay.records,
                outcome.segments.len()
            ),
        )?;
    } else {
        for f in &shown {
            text(out, &finding_text(f))?;
        }
        let more = if all || findings.len() == 1 {
            String::new()
        } else {
            "; --all lists every one".to_owned()
        };
        text(
            out,
            &format!(
                "{} problem(s) in {} records, {} segments{more}",
                findings.len(),
                replay.records,
                outcome.segments.len()
            ),
        )?;
    }
    Ok(i32::from(!findings.is_empty()))
}

// ----- dump -----

/// Which records `dump` prints.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Record kind names (case-insensitive: `published`, `settled`, ...); any when empty.
    pub kinds: Vec<String>,
    /// Virtual host.
    pub vhost: Option<String>,
    /// Queue (as a publish's queue, a settle's queue, a dead-letter's source or target, a
    /// binding's destination).
    pub queue: Option<String>,
    /// Exchange (a message's exchange, a declared exchange, a binding's source).
    pub exchange: Option<String>,
    /// Broker message id.
    pub message: Option<u64>,
    /// Routing key (of a message or a binding).
    pub routing_key: Option<String>,
    /// Earliest record time (ms, inclusive); records without a time are left out.
    pub since_ms: Option<u64>,
    /// Latest record time (ms, inclusive); records without a time are left out.
    pub until_ms: Option<u64>,
}

impl Filter {
    fn accepts(&self, kind: u8, e: &Event) -> bool {
        if !self.kinds.is_empty() {
            let name = state::kind_name(kind);
            if !self.kinds.iter().any(|k| k.eq_ignore_ascii_case(&name)) {
                return false;
            }
        }
        if let Some(v) = &self.vhost
            && event_vhost(e) != v
        {
            return false;
        }
        if self.since_ms.is_some() || self.until_ms.is_some() {
            let Some(t) = state::event_time_ms(e) else {
                return false;
            };
            if self.since_ms.is_some_and(|s| t < s) || self.until_ms.is_some_and(|u| t > u) {
                return false;
            }
        }
        let f = facts(e);
        self.queue
            .as_ref()
            .is_none_or(|q| f.queues.contains(&q.as_str()))
            && self
                .exchange
                .as_ref()
                .is_none_or(|x| f.exchanges.contains(&x.as_str()))
            && self
                .routing_key
                .as_ref()
                .is_none_or(|k| f.keys.contains(&k.as_str()))
            && self.message.is_none_or(|m| f.ids.contains(&m))
    }
}

/// The names and ids an event mentions, for filtering.
#[derive(Default)]
struct Facts<'e> {
    queues: Vec<&'e str>,
    exchanges: Vec<&'e str>,
    keys: Vec<&'e str>,
    ids: Vec<u64>,
}

fn message_facts<'e>(f: &mut Facts<'e>, m: &'e Message) {
    f.exchanges.push(&m.exchange);
    f.keys.push(&m.routing_key);
    f.ids.push(m.id.0);
}

fn facts(e: &Event) -> Facts<'_> {
    let mut f = Facts::default();
    match e {
        Event::ExchangeDeclared { exchange, .. } | Event::ExchangeDeleted { exchange, .. } => {
            f.exchanges.push(exchange);
        }
        Event::QueueDeclared { queue, .. } | Event::QueueDeleted { queue, .. } => {
            f.queues.push(queue);
        }
        Event::Bound {
            source,
            destination,
            routing_key,
            ..
        }
        | Event::Unbound {
            source,
            destination,
            routing_key,
            ..
        } => {
            f.exchanges.push(source);
            f.keys.push(routing_key);
            match destination {
                wharf_broker::DestName::Queue(q) => f.queues.push(q),
                wharf_broker::DestName::Exchange(x) => f.exchanges.push(x),
            }
        }
        Event::Published {
            message, queues, ..
        } => {
            message_facts(&mut f, &message.message);
            f.queues.extend(queues.iter().map(String::as_str));
        }
        Event::Scheduled {
            exchange, message, ..
        } => {
            message_facts(&mut f, &message.message);
            f.exchanges.push(exchange);
        }
        Event::Unscheduled { id, .. } => f.ids.push(id.0),
        Event::Settled { queue, ids, .. }
        | Event::Delivered { queue, ids, .. }
        | Event::Returned { queue, ids, .. }
        | Event::Purged { queue, ids, .. }
        | Event::DeadLetterHeld { queue, ids, .. } => {
            f.queues.push(queue);
            f.ids.extend(ids.iter().map(|i| i.0));
        }
        Event::DeadLettered {
            from,
            id,
            message,
            targets,
            ..
        } => {
            f.queues.extend(from.as_deref());
            f.queues.extend(targets.iter().map(String::as_str));
            f.ids.push(id.0);
            if let Some(m) = message {
                message_facts(&mut f, &m.message);
            }
        }
        Event::VhostAdded { .. }
        | Event::VhostDeleted { .. }
        | Event::PolicySet { .. }
        | Event::PolicyCleared { .. }
        | Event::UserPut { .. }
        | Event::UserDeleted { .. }
        | Event::PermissionSet { .. }
        | Event::PermissionCleared { .. }
        | Event::TopicPermissionSet { .. }
        | Event::TopicPermissionCleared { .. } => {}
    }
    f
}

fn event_vhost(e: &Event) -> &str {
    match e {
        Event::VhostAdded { vhost }
        | Event::VhostDeleted { vhost }
        | Event::ExchangeDeclared { vhost, .. }
        | Event::ExchangeDeleted { vhost, .. }
        | Event::QueueDeclared { vhost, .. }
        | Event::QueueDeleted { vhost, .. }
        | Event::Bound { vhost, .. }
        | Event::Unbound { vhost, .. }
        | Event::PolicySet { vhost, .. }
        | Event::PolicyCleared { vhost, .. }
        | Event::Published { vhost, .. }
        | Event::Scheduled { vhost, .. }
        | Event::Unscheduled { vhost, .. }
        | Event::Settled { vhost, .. }
        | Event::Delivered { vhost, .. }
        | Event::Returned { vhost, .. }
        | Event::DeadLettered { vhost, .. }
        | Event::Purged { vhost, .. }
        | Event::DeadLetterHeld { vhost, .. }
        | Event::PermissionSet { vhost, .. }
        | Event::PermissionCleared { vhost, .. }
        | Event::TopicPermissionSet { vhost, .. }
        | Event::TopicPermissionCleared { vhost, .. } => vhost,
        // A user belongs to no vhost: a vhost filter never selects it.
        Event::UserPut { .. } | Event::UserDeleted { .. } => "",
    }
}

fn position(s: &Scanned<'_>) -> Map<String, Json> {
    let mut m = Map::new();
    m.insert("file".to_owned(), json!(s.file));
    m.insert("offset".to_owned(), json!(s.offset));
    m.insert("lsn".to_owned(), json!(s.lsn));
    m.insert("kind".to_owned(), json!(state::kind_name(s.kind)));
    m
}

/// `dump DIR`: the records that pass `filter`, one per line.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn dump(ctx: &Ctx<'_>, filter: &Filter, body: BodyMode, out: &mut dyn Write) -> Exit {
    let mut failed: Option<Fatal> = None;
    let json = ctx.json;
    let mut visit = |s: &Scanned<'_>| {
        if failed.is_some() {
            return;
        }
        let mut m = position(s);
        match &s.record {
            Ok(StoreRecord::Format { version }) => {
                if !filter.kinds.is_empty()
                    && !filter
                        .kinds
                        .iter()
                        .any(|k| k.eq_ignore_ascii_case("format"))
                {
                    return;
                }
                if filter.vhost.is_some()
                    || filter.queue.is_some()
                    || filter.exchange.is_some()
                    || filter.message.is_some()
                    || filter.routing_key.is_some()
                    || filter.since_ms.is_some()
                    || filter.until_ms.is_some()
                {
                    return;
                }
                m.insert("version".to_owned(), json!(version));
            }
            Ok(StoreRecord::Event(e)) => {
                if !filter.accepts(s.kind, e) {
                    return;
                }
                m.extend(render::event_json(e, body));
            }
            Ok(StoreRecord::Copied { vhost, message }) => {
                // Shown only unfiltered, or when its kind is asked for by name.
                let asked = filter
                    .kinds
                    .iter()
                    .any(|k| k.eq_ignore_ascii_case("copied"));
                if !asked && (!filter.kinds.is_empty() || filter.message.is_some()) {
                    return;
                }
                m.insert("vhost".to_owned(), json!(vhost));
                m.insert("message".to_owned(), json!(message.id.0));
            }
            Err(err) => {
                m.insert("error".to_owned(), json!(err.to_string()));
            }
        }
        let r = if json {
            line(out, &Json::Object(m))
        } else {
            let head = format!(
                "{}@{} #{} {}",
                s.file,
                s.offset,
                s.lsn,
                state::kind_name(s.kind)
            );
            m.remove("file");
            m.remove("offset");
            m.remove("lsn");
            m.remove("kind");
            text(out, &format!("{head} {}", render::human_pairs(&m)))
        };
        if let Err(e) = r {
            failed = Some(e);
        }
    };
    let outcome = scan::scan(ctx.dir, ctx.progress, &mut visit)?;
    if let Some(f) = failed {
        return Err(f);
    }
    for f in &outcome.findings {
        eprintln!("wharf-inspect: {}", finding_text(f));
    }
    Ok(0)
}
