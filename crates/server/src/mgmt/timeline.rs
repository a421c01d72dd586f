//! `GET /api/wharf/messages/{vhost}/{id}/timeline`: the life of one message, read from the log
//! (S-UI-7, S-UI-8): what the offline inspector's `trace` shows, through the same state
//! machine (`wharf_store::trace`), on a running broker. Beyond RabbitMQ, which keeps no
//! history of a message.
//!
//! The log is read on a blocking thread, never on the broker task: the broker task only
//! answers whether the vhost exists. One timeline is read at a time (a second request waits),
//! so the reads cost the broker at most one core's worth of I/O and checksums.

use std::path::PathBuf;

use axum::extract::Path;
use serde_json::{Map, Value as JsonValue, json};
use tokio::sync::Semaphore;
use tracing::debug;
use wharf_broker::MessageId;
use wharf_store::trace::{Selector, Step, StepKind, Tracer, trace_dir};
use wharf_wal::FileStorage;

use super::api::{ApiError, ApiResult, Reader};
use super::json as j;
use super::reply::{known_vhost, ok_json};

/// Timelines read at once: one, so that reading the log never takes more than a core.
static READERS: Semaphore = Semaphore::const_new(1);

/// Times a read that failed (a checkpoint deleted the segments under it) is tried again.
const READ_ATTEMPTS: usize = 3;

/// Body bytes shown with a step that carries the message.
const PREVIEW_BYTES: usize = 2048;

/// The broker's message id in the path: a decimal `u64`, or 400 naming it (S-UI-8).
fn message_id(text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>().map_err(|_| {
        ApiError::BadRequest(format!(
            "message id must be a non-negative integer (the broker's id), got '{text}'"
        ))
    })
}

/// Reads the trace of `id` in `dir`, trying again when a checkpoint removed a file under it.
fn read_trace(dir: &std::path::Path, id: u64) -> Result<Tracer, String> {
    let mut last = String::new();
    for _ in 0..READ_ATTEMPTS {
        match trace_dir(&FileStorage, dir, Selector::Id(id)) {
            Ok(t) => return Ok(t),
            Err(e) => {
                debug!(error = %e, "timeline read failed; trying again");
                last = e.to_string();
            }
        }
    }
    Err(last)
}

/// The fields of one step besides its name.
fn step_fields(step: &Step) -> JsonValue {
    match &step.kind {
        StepKind::Entered {
            message,
            queues,
            deadlines_ms,
            ..
        } => {
            let (payload, encoding) = j::payload(&message.body, "auto", Some(PREVIEW_BYTES));
            let deadlines: Map<String, JsonValue> = deadlines_ms
                .iter()
                .map(|(q, d)| (q.clone(), json!(d)))
                .collect();
            json!({
                "queues": queues,
                "deadlines": deadlines,
                "enqueued_at": message.enqueued_at_ms,
                "exchange": message.exchange,
                "routing_key": message.routing_key,
                "properties": j::properties(&message.properties),
                "payload": payload,
                "payload_encoding": encoding,
                "payload_bytes": message.body.len(),
                "payload_truncated": message.body.len() > PREVIEW_BYTES,
            })
        }
        StepKind::Scheduled { due_ms, .. } => json!({ "due_at": due_ms }),
        StepKind::Delivered { queue, delivery } => {
            json!({ "queue": queue, "delivery": delivery })
        }
        StepKind::Requeued { queue }
        | StepKind::Settled { queue, .. }
        | StepKind::Purged { queue }
        | StepKind::QueueDeleted { queue } => json!({ "queue": queue }),
        StepKind::HeldForDeadLettering { queue, reason } => {
            json!({ "queue": queue, "reason": reason })
        }
        StepKind::DeadLettered {
            from,
            reason,
            copy,
            targets,
            ..
        } => json!({ "queue": from, "reason": reason, "copy": copy.map(|c| c.0),
                     "targets": targets }),
    }
}

/// One step as JSON: `message`, `event`, its fields, and where its record is.
fn step_json(step: &Step) -> JsonValue {
    let fields = step_fields(step);
    let mut out = json!({
        "message": step.message.0,
        "event": step.kind.event(),
        "lsn": step.at.lsn,
        "file": step.at.file,
        "offset": step.at.offset,
        "in_checkpoint": step.at.in_checkpoint,
    });
    if let (Some(map), JsonValue::Object(f)) = (out.as_object_mut(), fields) {
        map.extend(f);
    }
    out
}

/// The answer: the steps of `vhost`, and where the story's messages still are.
fn timeline_json(vhost: &str, id: u64, tracer: &Tracer) -> Option<JsonValue> {
    let steps: Vec<JsonValue> = tracer
        .steps
        .iter()
        .filter(|s| s.vhost == vhost)
        .map(step_json)
        .collect();
    if steps.is_empty() {
        return None;
    }
    let queued: Vec<JsonValue> = tracer
        .still_queued()
        .into_iter()
        .map(|(m, qs): (MessageId, _)| {
            let names: Vec<&str> = qs
                .iter()
                .filter(|(v, _)| v == vhost)
                .map(|(_, q)| q.as_str())
                .collect();
            json!({ "message": m.0, "queues": names })
        })
        .collect();
    Some(json!({
        "vhost": vhost,
        "message": id,
        "steps": steps,
        "still_queued": queued,
    }))
}

pub(crate) async fn message_timeline(
    Path((vhost, id)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let id = message_id(&id)?;
    scope.check(&vhost)?;
    let v = vhost.clone();
    if !api.query(move |view| known_vhost(view, &v)).await? {
        return Err(ApiError::NotFound);
    }
    let dir: PathBuf = api.config().data_dir.clone().ok_or(ApiError::NotFound)?;
    let _permit = READERS.acquire().await.map_err(|_| ApiError::Unavailable)?;
    let tracer = tokio::task::spawn_blocking(move || read_trace(&dir, id))
        .await
        .map_err(|_| ApiError::Unavailable)?
        .map_err(|reason| ApiError::Coded(500, "internal_error", reason))?;
    // S-UI-8: a message never logged (transient, or only in transient queues) has no story.
    let answer = timeline_json(&vhost, id, &tracer).ok_or(ApiError::NotFound)?;
    Ok(ok_json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_ui_8_message_ids_are_decimal_integers() {
        assert_eq!(message_id("42").unwrap(), 42);
        for bad in ["", "-1", "x", "1.5", "18446744073709551616"] {
            assert!(
                matches!(message_id(bad), Err(ApiError::BadRequest(_))),
                "{bad} accepted"
            );
        }
    }
}
