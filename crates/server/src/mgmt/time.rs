//! The dashboard's time views and browse search, beyond RabbitMQ's API (S-UI-20 to S-UI-23):
//!
//! - `GET /api/wharf/queues/{vhost}/{name}/expiry-horizon`: how many ready messages expire
//!   within a minute, an hour and a day of the broker's clock (`Broker::expiry_horizon`).
//! - `GET /api/wharf/queues/{vhost}/{name}/scheduled` and
//!   `GET /api/wharf/exchanges/{vhost}/{name}/scheduled`: scheduled (delayed) messages bound
//!   for a queue or waiting on an exchange, with their due times (`Broker::scheduled`).
//! - `GET /api/wharf/queues/{vhost}/{name}/search`: browse's page restricted to the messages
//!   whose message id, correlation id or a header equals a text (`Broker::search`).
//!
//! All are reads: any reader of the vhost (S-UI-3), answered by the broker task's queries.

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Path, Query};
use axum::routing::get;
use serde_json::{Value as JsonValue, json};

use super::api::{Api, ApiError, ApiResult, Reader};
use super::browse::{BrowseQuery, browsed_json, number};
use super::json as j;
use super::reply::ok_json;
use wharf_broker::{MessageMatch, ScheduledFor, ScheduledMessage};

/// This file's routes.
pub(crate) fn routes() -> Router<Api> {
    Router::new()
        .route(
            "/api/wharf/queues/{vhost}/{name}/expiry-horizon",
            get(expiry_horizon),
        )
        .route(
            "/api/wharf/queues/{vhost}/{name}/scheduled",
            get(queue_scheduled),
        )
        .route(
            "/api/wharf/exchanges/{vhost}/{name}/scheduled",
            get(exchange_scheduled),
        )
        .route("/api/wharf/queues/{vhost}/{name}/search", get(queue_search))
}

/// The horizons of `expiry-horizon`: name and length in ms.
const HORIZONS: [(&str, u64); 3] = [("minute", 60_000), ("hour", 3_600_000), ("day", 86_400_000)];

/// Messages a search step looks at when `scan` is not given, and at most.
const SCAN_DEFAULT: u64 = 10_000;
const SCAN_MAX: u64 = 100_000;

/// Scheduled messages a listing looks at beyond its page, at most (S-UI-21).
const SCHEDULED_SCAN: usize = 10_000;

/// Scheduled messages per page when `count` is not given, and at most.
const SCHEDULED_DEFAULT: u64 = 50;
const SCHEDULED_MAX: u64 = 500;

/// Refuses any query parameter not in `known` (400 naming it): nothing is silently ignored.
fn only(q: &HashMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match q.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ApiError::BadRequest(format!(
            "unknown parameter '{k}'; known: {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// `GET /api/wharf/queues/{vhost}/{name}/expiry-horizon` (S-UI-20).
pub(crate) async fn expiry_horizon(
    Path((vhost, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    only(&q, &[])?;
    scope.check(&vhost)?;
    let (v, name) = (vhost.clone(), queue.clone());
    let (now, h) = api
        .read_queue(&vhost, &queue, move |broker, now| {
            let lengths = HORIZONS.map(|(_, ms)| ms);
            broker.expiry_horizon(&v, &name, now, &lengths)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    let expiring: Vec<JsonValue> = HORIZONS
        .iter()
        .zip(&h.within)
        .map(|(&(label, ms), &(_, count))| json!({ "within": label, "within_ms": ms, "count": count }))
        .collect();
    Ok(ok_json(json!({
        "vhost": vhost,
        "queue": queue,
        "now": now,
        "messages_ready": h.ready,
        "with_deadline": h.with_deadline,
        "overdue": h.overdue,
        "next_deadline": h.next_deadline_ms,
        "expiring": expiring,
    })))
}

/// `offset` and `count` of a scheduled page (400 naming a bad one).
fn scheduled_page(q: &HashMap<String, String>) -> Result<(usize, usize), ApiError> {
    only(q, &["offset", "count"])?;
    let offset = number(q, "offset", 0)?;
    let count = number(q, "count", SCHEDULED_DEFAULT)?;
    if !(1..=SCHEDULED_MAX).contains(&count) {
        return Err(ApiError::BadRequest(format!(
            "'count' must be between 1 and {SCHEDULED_MAX}"
        )));
    }
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok((size(offset), size(count)))
}

fn scheduled_json(m: &ScheduledMessage, now: u64) -> JsonValue {
    let (payload, encoding) = j::payload(&m.message.body, "auto", Some(2048));
    json!({
        "id": m.id.0,
        "due": m.due_ms,
        "due_in_ms": m.due_ms.saturating_sub(now),
        "exchange": m.message.exchange,
        "routing_key": m.message.routing_key,
        "properties": j::properties(&m.message.properties),
        "payload": payload,
        "payload_encoding": encoding,
        "payload_bytes": m.message.body.len(),
        "durable": m.durable,
    })
}

/// Both scheduled listings: `of` is `"queue"` or `"exchange"` (S-UI-21).
async fn scheduled(
    of: &'static str,
    (vhost, name): (String, String),
    q: &HashMap<String, String>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let (offset, count) = scheduled_page(q)?;
    scope.check(&vhost)?;
    let (v, n) = (vhost.clone(), name.clone());
    // A queue may be a quorum queue a follower reads from the group's committed state.
    let found = if of == "queue" {
        api.read_queue(&vhost, &name, move |broker, _| {
            broker.scheduled(&v, ScheduledFor::Queue(&n), offset, count, SCHEDULED_SCAN)
        })
        .await?
    } else {
        let (now, page) = api
            .query(move |view| {
                let target = ScheduledFor::Exchange(&n);
                let page = view
                    .broker
                    .scheduled(&v, target, offset, count, SCHEDULED_SCAN);
                (view.now_ms, page)
            })
            .await?;
        page.map(|page| (now, page))
    };
    let (now, page) = found.ok_or(ApiError::NotFound)?;
    let messages: Vec<JsonValue> = page
        .messages
        .iter()
        .map(|m| scheduled_json(m, now))
        .collect();
    let mut out = json!({
        "vhost": vhost,
        "now": now,
        "total": page.total,
        "total_complete": page.complete,
        "offset": offset,
        "count": messages.len(),
        "messages": messages,
    });
    if let Some(map) = out.as_object_mut() {
        map.insert(of.to_owned(), json!(name));
    }
    Ok(ok_json(out))
}

/// `GET /api/wharf/queues/{vhost}/{name}/scheduled`.
pub(crate) async fn queue_scheduled(
    Path(path): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult {
    scheduled("queue", path, &q, reader).await
}

/// `GET /api/wharf/exchanges/{vhost}/{name}/scheduled`.
pub(crate) async fn exchange_scheduled(
    Path(path): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult {
    scheduled("exchange", path, &q, reader).await
}

/// The one criterion of a search: exactly one of `message_id`, `correlation_id`, `header`
/// (with `value`).
fn criterion(q: &HashMap<String, String>) -> Result<MessageMatch, ApiError> {
    let given: Vec<&str> = ["message_id", "correlation_id", "header"]
        .into_iter()
        .filter(|k| q.contains_key(*k))
        .collect();
    let text = |k: &str| q.get(k).cloned().unwrap_or_default();
    match given.as_slice() {
        ["message_id"] => Ok(MessageMatch::MessageId(text("message_id"))),
        ["correlation_id"] => Ok(MessageMatch::CorrelationId(text("correlation_id"))),
        ["header"] if !text("header").is_empty() && q.contains_key("value") => {
            Ok(MessageMatch::Header {
                name: text("header"),
                value: text("value"),
            })
        }
        ["header"] => Err(ApiError::BadRequest(
            "'header' needs a non-empty name and a 'value'".to_owned(),
        )),
        _ => Err(ApiError::BadRequest(
            "give exactly one of 'message_id', 'correlation_id' or 'header' (with 'value')"
                .to_owned(),
        )),
    }
}

/// `GET /api/wharf/queues/{vhost}/{name}/search` (S-UI-22, S-UI-23).
pub(crate) async fn queue_search(
    Path((vhost, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    only(
        &q,
        &[
            "offset",
            "count",
            "encoding",
            "truncate",
            "scan",
            "message_id",
            "correlation_id",
            "header",
            "value",
        ],
    )?;
    let page = BrowseQuery::parse(&q)?;
    let what = criterion(&q)?;
    let scan = number(&q, "scan", SCAN_DEFAULT)?;
    if !(1..=SCAN_MAX).contains(&scan) {
        return Err(ApiError::BadRequest(format!(
            "'scan' must be between 1 and {SCAN_MAX}"
        )));
    }
    scope.check(&vhost)?;
    let (from, count) = (page.offset, page.count);
    let scan = usize::try_from(scan).unwrap_or(usize::MAX);
    let (v, name) = (vhost.clone(), queue.clone());
    let found = api
        .query(move |view| view.broker.search(&v, &name, from, count, scan, &what))
        .await?
        .ok_or(ApiError::NotFound)?;
    let messages: Vec<JsonValue> = found
        .messages
        .iter()
        .map(|b| browsed_json(b, &page))
        .collect();
    Ok(ok_json(json!({
        "vhost": vhost,
        "queue": queue,
        "offset": from,
        "count": messages.len(),
        "messages_ready": found.ready,
        "next_offset": found.next,
        "done": found.done,
        "messages": messages,
    })))
}
