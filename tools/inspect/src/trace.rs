//! `trace` (the life of one message, following its dead-lettered copies) and `export` (a
//! queue's live messages). Both read the log through `scan`; `trace` does not replay the
//! broker, so it costs one pass of checksums and decoding. The trace's state machine is
//! `wharf_store::trace`, shared with the management API's timeline; this file prints it.
//! Must not write files.

use std::io::Write;

use serde_json::{Map, Value as Json, json};
use wharf_store::codec::StoreRecord;
use wharf_store::trace::{At, Entry, Step, StepKind, Tracer};

use crate::commands::{Ctx, Exit};
use crate::render::{self, BodyMode};
use crate::scan::{self, Fatal, Scanned};
use crate::state::Replay;

pub use wharf_store::trace::Selector;

/// Feeds one scanned record to the shared tracer (`wharf_store::trace`).
fn visit(tracer: &mut Tracer, s: &Scanned<'_>) {
    let Ok(StoreRecord::Event(e)) = &s.record else {
        return;
    };
    let at = At {
        file: s.file.to_owned(),
        offset: s.offset,
        lsn: s.lsn,
        in_checkpoint: s.in_checkpoint,
    };
    tracer.visit(&at, e);
}

/// A step's event name and fields as the inspector prints them: the names of
/// `StepKind::event`, but for a message entering its queues (`published`, `carried in
/// checkpoint at Lsn N`, `enqueued`) and a carried schedule.
fn step_fields(step: &Step, body: BodyMode) -> (String, Json) {
    let vhost = step.vhost.as_str();
    let event = step.kind.event().to_owned();
    match &step.kind {
        StepKind::Entered {
            how,
            message,
            queues,
            deadlines_ms,
        } => {
            let event = match how {
                Entry::Published => event,
                Entry::Carried => format!("carried in checkpoint at Lsn {}", step.at.lsn),
                Entry::DeadLettered | Entry::MovedBack => "enqueued".to_owned(),
            };
            let mut fields = render::message_json(message, body);
            fields["vhost"] = json!(vhost);
            fields["queues"] = json!(queues);
            let ms: Map<String, Json> = deadlines_ms
                .iter()
                .map(|(q, d)| (q.clone(), json!(d)))
                .collect();
            let readable: Map<String, Json> = deadlines_ms
                .iter()
                .map(|(q, d)| (q.clone(), render::rfc3339_json(*d)))
                .collect();
            fields["deadlines_ms"] = Json::Object(ms);
            fields["deadlines"] = Json::Object(readable);
            (event, fields)
        }
        StepKind::Scheduled { due_ms, carried } => {
            let event = if *carried {
                format!("scheduled, carried in checkpoint at Lsn {}", step.at.lsn)
            } else {
                event
            };
            (event, json!({ "vhost": vhost, "due_ms": due_ms }))
        }
        StepKind::Delivered { queue, delivery } => (
            event,
            json!({ "vhost": vhost, "queue": queue, "delivery": delivery }),
        ),
        StepKind::Requeued { queue }
        | StepKind::Settled { queue, .. }
        | StepKind::Purged { queue }
        | StepKind::QueueDeleted { queue } => (event, json!({ "vhost": vhost, "queue": queue })),
        StepKind::HeldForDeadLettering { queue, reason } => (
            event,
            json!({ "vhost": vhost, "queue": queue, "reason": reason }),
        ),
        StepKind::DeadLettered {
            from,
            reason,
            copy,
            targets,
            ..
        } => (
            event,
            json!({ "vhost": vhost, "from": from,
            "reason": reason, "copy": copy.map(|c| c.0), "targets": targets }),
        ),
    }
}

/// A step as the inspector prints it: `message`, `event`, its fields, then where it is.
fn step_json(step: &Step, body: BodyMode) -> Json {
    let (event, fields) = step_fields(step, body);
    let mut m = Map::new();
    m.insert("message".to_owned(), json!(step.message.0));
    m.insert("event".to_owned(), json!(event));
    if let Json::Object(f) = fields {
        m.extend(f);
    }
    m.insert("lsn".to_owned(), json!(step.at.lsn));
    m.insert("file".to_owned(), json!(step.at.file));
    m.insert("offset".to_owned(), json!(step.at.offset));
    Json::Object(m)
}

/// `trace DIR MESSAGE`: every step of the selected messages and their dead-lettered copies.
/// Exit 1 when nothing matches.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn trace(ctx: &Ctx<'_>, sel: &Selector, body: BodyMode, out: &mut dyn Write) -> Exit {
    let mut tracer = Tracer::new(sel.clone());
    let outcome = scan::scan(ctx.dir, ctx.progress, &mut |s| visit(&mut tracer, s))?;
    for f in &outcome.findings {
        eprintln!(
            "wharf-inspect: {} offset {}: {}: {}",
            f.file, f.offset, f.severity, f.what
        );
    }
    let finals = tracer.still_queued();
    let write =
        |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(|e| Fatal::output(&e));
    if tracer.steps.is_empty() {
        if ctx.json {
            write(out, json!({ "found": false }).to_string())?;
        } else {
            write(out, "no message in the log matches".to_owned())?;
        }
        return Ok(1);
    }
    for step in tracer.steps.iter().map(|s| step_json(s, body)) {
        if ctx.json {
            write(out, step.to_string())?;
        } else if let Json::Object(m) = step {
            let mut m = m.clone();
            let head = format!(
                "{}@{} #{} message {} {}",
                render::human_value(&m["file"]),
                m["offset"],
                m["lsn"],
                m["message"],
                render::human_value(&m["event"])
            );
            for k in ["file", "offset", "lsn", "message", "event"] {
                m.remove(k);
            }
            write(out, format!("{head}: {}", render::human_pairs(&m)))?;
        }
    }
    for (id, queues) in finals {
        let qs: Vec<Json> = queues
            .iter()
            .map(|(v, q)| json!({ "vhost": v, "queue": q }))
            .collect();
        if ctx.json {
            write(out, json!({ "message": id.0, "event": "still queued at the end of the log", "queues": qs }).to_string())?;
        } else {
            let names: Vec<&str> = queues.iter().map(|(_, q)| q.as_str()).collect();
            write(
                out,
                format!(
                    "end of log: message {} still queued in {}",
                    id.0,
                    names.join(", ")
                ),
            )?;
        }
    }
    Ok(0)
}

/// `export DIR --queue Q`: the queue's live messages (after recovery at `now_ms`) in queue
/// order, one JSON line each, bodies in base64; in a priority queue each with the
/// `priority` the queue files it under (delivery order: by priority, then oldest first).
///
/// # Errors
/// [`Fatal`] as [`scan::scan`], and when the queue does not exist.
pub fn export(ctx: &Ctx<'_>, vhost: &str, queue: &str, now_ms: u64, out: &mut dyn Write) -> Exit {
    let mut replay = Replay::new();
    scan::scan(ctx.dir, ctx.progress, &mut |s| replay.visit(s))?;
    let _ = replay.broker.recovered(now_ms);
    let queues = replay.broker.queues(vhost);
    let Some(info) = queues.iter().find(|q| q.name == queue) else {
        return Err(Fatal(format!(
            "no queue '{queue}' in vhost '{vhost}' after recovery"
        )));
    };
    for (msg, redelivered) in replay.broker.ready_messages(vhost, queue) {
        let mut m = render::message_json(&msg, BodyMode::Base64);
        m["redelivered"] = json!(redelivered);
        // S-PRIO-2: the priority the queue files it under (its property may be missing or
        // above the queue's maximum).
        if let Some(p) = info.priority_of(&msg) {
            m["priority"] = json!(p);
        }
        writeln!(out, "{m}").map_err(|e| Fatal::output(&e))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_accepts_the_three_forms_and_names_them_on_error() {
        assert_eq!(
            Selector::parse_by("message_id=a=b"),
            Ok(Selector::MessageId("a=b".to_owned()))
        );
        assert_eq!(
            Selector::parse_by("correlation_id=c"),
            Ok(Selector::CorrelationId("c".to_owned()))
        );
        assert_eq!(
            Selector::parse_by("header:tenant=acme"),
            Ok(Selector::Header("tenant".to_owned(), "acme".to_owned()))
        );
        for bad in ["header:=x", "nope=1", "message_id"] {
            assert!(Selector::parse_by(bad).is_err(), "{bad}");
        }
    }
}
