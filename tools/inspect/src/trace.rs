//! `trace` (the life of one message, following its dead-lettered copies) and `export` (a
//! queue's live messages). Both read the log through `scan`; `trace` does not replay the
//! broker, so it costs one pass of checksums and decoding. Must not write files.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use serde_json::{Map, Value as Json, json};
use wharf_broker::{Event, Message, MessageId, SettleKind, Value};
use wharf_store::codec::StoreRecord;

use crate::commands::{Ctx, Exit};
use crate::render::{self, BodyMode};
use crate::scan::{self, Fatal, Scanned};
use crate::state::Replay;

/// How the message to trace is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The broker's message id.
    Id(u64),
    /// The `message-id` property.
    MessageId(String),
    /// The `correlation-id` property.
    CorrelationId(String),
    /// A header's value (strings as text, numbers in decimal).
    Header(String, String),
}

impl Selector {
    /// Parses `--by` (`message_id=..`, `correlation_id=..`, `header:NAME=VALUE`).
    ///
    /// # Errors
    /// A message naming the accepted forms.
    pub fn parse_by(spec: &str) -> Result<Selector, String> {
        let (key, value) = spec
            .split_once('=')
            .ok_or_else(|| format!("--by {spec}: expected KEY=VALUE"))?;
        match key {
            "message_id" => Ok(Selector::MessageId(value.to_owned())),
            "correlation_id" => Ok(Selector::CorrelationId(value.to_owned())),
            _ => match key.strip_prefix("header:") {
                Some(name) if !name.is_empty() => {
                    Ok(Selector::Header(name.to_owned(), value.to_owned()))
                }
                _ => Err(format!(
                    "--by {spec}: use message_id=.., correlation_id=.. or header:NAME=VALUE"
                )),
            },
        }
    }

    fn matches(&self, m: &Message) -> bool {
        let p = &m.properties;
        match self {
            Selector::Id(id) => m.id.0 == *id,
            Selector::MessageId(v) => p.message_id.as_deref() == Some(v.as_str()),
            Selector::CorrelationId(v) => p.correlation_id.as_deref() == Some(v.as_str()),
            Selector::Header(name, v) => p
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .is_some_and(|value| header_text(value).as_deref() == Some(v.as_str())),
        }
    }
}

fn header_text(v: &Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_owned());
    }
    if let Some(n) = v.as_integer() {
        return Some(n.to_string());
    }
    match v {
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// What the trace keeps while scanning.
#[derive(Default)]
struct Tracer {
    /// Messages in the story (the matches and their dead-lettered copies).
    ids: HashSet<MessageId>,
    /// Queues holding each traced message.
    held: HashMap<MessageId, Vec<(String, String)>>,
    deliveries: HashMap<(MessageId, String), u32>,
    /// Declared `x-message-ttl` per queue, for the deadline shown at publish.
    queue_ttl_ms: HashMap<(String, String), u64>,
    steps: Vec<Json>,
}

impl Tracer {
    fn step(&mut self, s: &Scanned<'_>, id: MessageId, event: &str, fields: Json) {
        let mut m = Map::new();
        m.insert("message".to_owned(), json!(id.0));
        m.insert("event".to_owned(), json!(event));
        if let Json::Object(f) = fields {
            m.extend(f);
        }
        m.insert("lsn".to_owned(), json!(s.lsn));
        m.insert("file".to_owned(), json!(s.file));
        m.insert("offset".to_owned(), json!(s.offset));
        self.steps.push(Json::Object(m));
    }

    fn enter(
        &mut self,
        s: &Scanned<'_>,
        vhost: &str,
        m: &Message,
        queues: &[String],
        event: &str,
        body: BodyMode,
    ) {
        let deadlines: Map<String, Json> = queues
            .iter()
            .map(|q| {
                let queue_ttl = self
                    .queue_ttl_ms
                    .get(&(vhost.to_owned(), q.clone()))
                    .copied();
                let ttl = [m.ttl_ms.map(u64::from), queue_ttl]
                    .into_iter()
                    .flatten()
                    .min();
                (
                    q.clone(),
                    json!(ttl.map(|t| m.enqueued_at_ms.saturating_add(t))),
                )
            })
            .collect();
        let mut fields = render::message_json(m, body);
        fields["vhost"] = json!(vhost);
        fields["queues"] = json!(queues);
        let readable: Map<String, Json> = deadlines
            .iter()
            .map(|(q, ms)| (q.clone(), render::rfc3339_json(ms.as_u64())))
            .collect();
        fields["deadlines_ms"] = Json::Object(deadlines);
        fields["deadlines"] = Json::Object(readable);
        self.step(s, m.id, event, fields);
        self.held.insert(
            m.id,
            queues
                .iter()
                .map(|q| (vhost.to_owned(), q.clone()))
                .collect(),
        );
    }

    fn leave(&mut self, id: MessageId, vhost: &str, queue: &str) {
        if let Some(h) = self.held.get_mut(&id) {
            h.retain(|(v, q)| !(v == vhost && q == queue));
        }
    }

    #[expect(clippy::too_many_lines, reason = "one arm per event kind")]
    fn visit(&mut self, s: &Scanned<'_>, sel: &Selector, body: BodyMode) {
        let Ok(StoreRecord::Event(e)) = &s.record else {
            return;
        };
        match e {
            Event::QueueDeclared {
                vhost,
                queue,
                arguments,
                ..
            } => {
                if let Some(ttl) = arguments
                    .get("x-message-ttl")
                    .and_then(Value::as_integer)
                    .and_then(|t| u64::try_from(t).ok())
                {
                    self.queue_ttl_ms
                        .insert((vhost.clone(), queue.clone()), ttl);
                }
            }
            Event::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => {
                let m = &message.message;
                // A scheduled message routed when due gets a new id: follow it.
                let was_scheduled = scheduled.is_some_and(|id| self.ids.contains(&id));
                if was_scheduled || sel.matches(m) {
                    self.ids.insert(m.id);
                    let event = if s.in_checkpoint {
                        format!("carried in checkpoint at Lsn {}", s.lsn)
                    } else {
                        "published".to_owned()
                    };
                    self.enter(s, vhost, m, queues, &event, body);
                }
            }
            Event::Scheduled { vhost, message, .. } => {
                let m = &message.message;
                if sel.matches(m) {
                    self.ids.insert(m.id);
                    let event = if s.in_checkpoint {
                        format!("scheduled, carried in checkpoint at Lsn {}", s.lsn)
                    } else {
                        "scheduled".to_owned()
                    };
                    self.step(
                        s,
                        m.id,
                        &event,
                        json!({ "vhost": vhost, "due_ms": m.enqueued_at_ms }),
                    );
                }
            }
            Event::Delivered { vhost, queue, ids } => {
                for id in ids
                    .iter()
                    .filter(|i| self.ids.contains(i))
                    .copied()
                    .collect::<Vec<_>>()
                {
                    let n = self.deliveries.entry((id, queue.clone())).or_insert(0);
                    *n += 1;
                    let n = *n;
                    self.step(
                        s,
                        id,
                        "delivered",
                        json!({ "vhost": vhost, "queue": queue, "delivery": n }),
                    );
                }
            }
            Event::Returned { vhost, queue, ids } => {
                for id in ids
                    .iter()
                    .filter(|i| self.ids.contains(i))
                    .copied()
                    .collect::<Vec<_>>()
                {
                    self.step(s, id, "requeued", json!({ "vhost": vhost, "queue": queue }));
                }
            }
            Event::DeadLetterHeld {
                vhost,
                queue,
                reason,
                ids,
                ..
            } => {
                for id in ids
                    .iter()
                    .filter(|i| self.ids.contains(i))
                    .copied()
                    .collect::<Vec<_>>()
                {
                    self.step(
                        s,
                        id,
                        "held for dead-lettering",
                        json!({ "vhost": vhost, "queue": queue, "reason": reason.name() }),
                    );
                }
            }
            Event::Settled {
                vhost,
                queue,
                ids,
                kind,
            } => {
                let event = match kind {
                    SettleKind::Ack => "acked",
                    SettleKind::Expire => "expired",
                    SettleKind::Discard => "discarded",
                };
                for id in ids
                    .iter()
                    .filter(|i| self.ids.contains(i))
                    .copied()
                    .collect::<Vec<_>>()
                {
                    self.step(s, id, event, json!({ "vhost": vhost, "queue": queue }));
                    self.leave(id, vhost, queue);
                }
            }
            Event::Purged { vhost, queue, ids } => {
                for id in ids
                    .iter()
                    .filter(|i| self.ids.contains(i))
                    .copied()
                    .collect::<Vec<_>>()
                {
                    self.step(s, id, "purged", json!({ "vhost": vhost, "queue": queue }));
                    self.leave(id, vhost, queue);
                }
            }
            Event::QueueDeleted { vhost, queue } => {
                let held: Vec<MessageId> = self
                    .held
                    .iter()
                    .filter(|(_, qs)| qs.iter().any(|(v, q)| v == vhost && q == queue))
                    .map(|(id, _)| *id)
                    .collect();
                for id in held {
                    self.step(
                        s,
                        id,
                        "queue deleted",
                        json!({ "vhost": vhost, "queue": queue }),
                    );
                    self.leave(id, vhost, queue);
                }
            }
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => {
                if !self.ids.contains(id) {
                    return;
                }
                let reason = message
                    .as_ref()
                    .and_then(|m| render::death_reason(&m.message));
                let copy = message.as_ref().map(|m| m.message.id.0);
                self.step(
                    s,
                    *id,
                    "dead-lettered",
                    json!({ "vhost": vhost, "from": from,
                    "reason": reason, "copy": copy, "targets": targets }),
                );
                if let Some(from) = from {
                    self.leave(*id, vhost, from);
                }
                if let Some(m) = message {
                    self.ids.insert(m.message.id);
                    self.enter(s, vhost, &m.message, targets, "enqueued", body);
                }
            }
            _ => {}
        }
    }
}

/// `trace DIR MESSAGE`: every step of the selected messages and their dead-lettered copies.
/// Exit 1 when nothing matches.
///
/// # Errors
/// [`Fatal`] as [`scan::scan`].
pub fn trace(ctx: &Ctx<'_>, sel: &Selector, body: BodyMode, out: &mut dyn Write) -> Exit {
    let mut tracer = Tracer::default();
    let outcome = scan::scan(ctx.dir, ctx.progress, &mut |s| tracer.visit(s, sel, body))?;
    for f in &outcome.findings {
        eprintln!(
            "wharf-inspect: {} offset {}: {}: {}",
            f.file, f.offset, f.severity, f.what
        );
    }
    let mut finals: Vec<(MessageId, Vec<(String, String)>)> = tracer
        .held
        .iter()
        .filter(|(_, qs)| !qs.is_empty())
        .map(|(id, qs)| (*id, qs.clone()))
        .collect();
    finals.sort();
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
    for step in &tracer.steps {
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
