//! `GET /api/queues/{vhost}/{name}/browse`: a page of a queue's ready messages in delivery
//! order, read without consuming them (S-UI-1, S-UI-2), for the dashboard's browse view.
//! Beyond RabbitMQ, which can only "get" messages (taking and requeueing them). Open to any
//! reader of the vhost (S-UI-3); the page is read by the broker's own query
//! (`Broker::browse`), which takes nothing.

use std::collections::HashMap;

use axum::extract::{Path, Query};
use serde_json::{Value as JsonValue, json};

use super::api::{ApiError, ApiResult, Reader};
use super::json as j;
use super::reply::ok_json;
use wharf_broker::BrowsedMessage;

/// The most messages one page may hold (RabbitMQ's largest `page_size`).
const COUNT_MAX: usize = 500;
/// Messages in a page when `count` is not given.
const COUNT_DEFAULT: usize = 50;
/// Body bytes shown per message when `truncate` is not given: a preview.
const PREVIEW_BYTES: usize = 2048;

/// The checked query parameters of a browse request.
#[derive(Debug, PartialEq)]
pub(super) struct BrowseQuery {
    pub(super) offset: u64,
    pub(super) count: usize,
    encoding: String,
    truncate: usize,
}

/// A non-negative integer parameter, or 400 naming it (S-UI-4).
pub(super) fn number(
    q: &HashMap<String, String>,
    key: &str,
    default: u64,
) -> Result<u64, ApiError> {
    match q.get(key) {
        None => Ok(default),
        Some(v) => v.parse::<u64>().map_err(|_| {
            ApiError::BadRequest(format!("'{key}' must be a non-negative integer, got '{v}'"))
        }),
    }
}

impl BrowseQuery {
    /// Reads `offset` (default 0), `count` (1..=500, default 50), `encoding` (`auto` or
    /// `base64`, as RabbitMQ's get) and `truncate` (body bytes shown, default 2048).
    pub(super) fn parse(q: &HashMap<String, String>) -> Result<Self, ApiError> {
        let offset = number(q, "offset", 0)?;
        let count = number(q, "count", COUNT_DEFAULT as u64)?;
        let count = usize::try_from(count)
            .ok()
            .filter(|c| (1..=COUNT_MAX).contains(c))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("'count' must be between 1 and {COUNT_MAX}"))
            })?;
        let truncate = number(q, "truncate", PREVIEW_BYTES as u64)?;
        let encoding = q.get("encoding").map_or("auto", String::as_str).to_owned();
        if encoding != "auto" && encoding != "base64" {
            return Err(ApiError::BadRequest(format!(
                "'encoding' must be auto or base64, got '{encoding}'"
            )));
        }
        Ok(BrowseQuery {
            offset,
            count,
            encoding,
            truncate: usize::try_from(truncate).unwrap_or(usize::MAX),
        })
    }
}

/// One browsed message as JSON: `/get`'s fields (payload, properties, exchange, routing key)
/// and what the queue knows of it.
pub(super) fn browsed_json(b: &BrowsedMessage, q: &BrowseQuery) -> JsonValue {
    let mut out = json!({
        "position": b.position,
        "message": b.id.0,
        "payload_bytes": b.body_len,
        "enqueued_at": b.enqueued_at_ms,
        "deadline": b.deadline_ms,
        "delivery_count": b.delivery_count,
        "redelivered": b.redelivered,
        "paged_out": b.paged_out,
    });
    let Some(map) = out.as_object_mut() else {
        return out;
    };
    match &b.content {
        Ok(m) => {
            let (payload, encoding) = j::payload(&m.body, &q.encoding, Some(q.truncate));
            map.insert("payload".into(), json!(payload));
            map.insert("payload_encoding".into(), json!(encoding));
            map.insert("payload_truncated".into(), json!(m.body.len() > q.truncate));
            map.insert("exchange".into(), json!(m.exchange));
            map.insert("routing_key".into(), json!(m.routing_key));
            map.insert("priority".into(), json!(m.properties.priority.unwrap_or(0)));
            map.insert("properties".into(), j::properties(&m.properties));
        }
        Err(e) => {
            map.insert("error".into(), json!(e));
        }
    }
    out
}

pub(crate) async fn queue_browse(
    Path((vhost, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let query = BrowseQuery::parse(&q)?;
    // As `GET /api/queues/{vhost}/{name}`: a vhost the caller may not see is refused first.
    scope.check(&vhost)?;
    let (offset, count) = (query.offset, query.count);
    let (v, name) = (vhost.clone(), queue.clone());
    let (_, page) = api
        .read_queue(&vhost, &queue, move |broker, _| {
            broker.browse(&v, &name, offset, count)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    let messages: Vec<JsonValue> = page
        .messages
        .iter()
        .map(|b| browsed_json(b, &query))
        .collect();
    Ok(ok_json(json!({
        "vhost": vhost,
        "queue": queue,
        "offset": offset,
        "count": messages.len(),
        "messages_ready": page.ready,
        "messages": messages,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn s_ui_4_browse_parameters_default_and_refuse_bad_values() {
        let q = BrowseQuery::parse(&params(&[])).unwrap();
        assert_eq!((q.offset, q.count, q.truncate), (0, 50, 2048));
        let q = BrowseQuery::parse(&params(&[("offset", "7"), ("count", "500")])).unwrap();
        assert_eq!((q.offset, q.count), (7, 500));
        for bad in [
            [("offset", "-1")],
            [("offset", "x")],
            [("count", "0")],
            [("count", "501")],
            [("encoding", "hex")],
        ] {
            assert!(
                matches!(
                    BrowseQuery::parse(&params(&bad)),
                    Err(ApiError::BadRequest(_))
                ),
                "{bad:?} accepted"
            );
        }
    }
}
