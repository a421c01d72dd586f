//! The dead-letter explorer (S-UI-9, S-UI-10): `GET /api/wharf/dead-letters/{vhost}/{queue}`
//! groups a queue's ready messages by the reason and source queue of their newest `x-death`,
//! and `POST /api/wharf/dead-letters/{vhost}/{queue}/move-back` moves selected (or all)
//! messages back to their original exchange and routing keys through the broker's
//! `Command::MoveBack`. Beyond RabbitMQ, whose UI has no such view.

use std::collections::BTreeMap;

use axum::extract::Path;
use serde_json::{Value as JsonValue, json};
use wharf_broker::{Command, Death, MessageId, Reply};

use super::api::{AdminBody, ApiError, ApiResult, Reader};
use super::reply::{body_object, ok_json};

/// The most messages the explorer examines, from the head of the queue: a bound on the
/// broker task's work per request (each paged-out message is read back from disk).
const EXAMINED_MAX: usize = 10_000;

/// Messages that died in one queue for one reason, on one original route.
#[derive(Default)]
struct Group {
    exchange: String,
    routing_keys: Vec<String>,
    ids: Vec<u64>,
}

pub(crate) async fn dead_letters(
    Path((vhost, queue)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    scope.check(&vhost)?;
    let (v, q) = (vhost.clone(), queue.clone());
    // Copy out only what grouping needs: the id and the newest death of each message.
    let (ready, seen) = api
        .query(move |view| {
            let page = view.broker.browse(&v, &q, 0, EXAMINED_MAX)?;
            let seen: Vec<(MessageId, Option<Death>)> = page
                .messages
                .iter()
                .map(|m| {
                    let death = m
                        .content
                        .as_ref()
                        .ok()
                        .and_then(|c| Death::newest(&c.properties));
                    (m.id, death)
                })
                .collect();
            Some((page.ready, seen))
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    let examined = seen.len();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    let mut never_died = Vec::new();
    for (id, death) in seen {
        let Some(d) = death else {
            never_died.push(id.0);
            continue;
        };
        let g = groups.entry((d.reason, d.queue)).or_default();
        if g.ids.is_empty() {
            g.exchange = d.exchange;
            g.routing_keys = d.routing_keys;
        }
        g.ids.push(id.0);
    }
    let groups: Vec<JsonValue> = groups
        .into_iter()
        .map(|((reason, source), g)| {
            json!({
                "reason": reason,
                "queue": source,
                "exchange": g.exchange,
                "routing_keys": g.routing_keys,
                "count": g.ids.len(),
                "messages": g.ids,
            })
        })
        .collect();
    Ok(ok_json(json!({
        "vhost": vhost,
        "queue": queue,
        "messages_ready": ready,
        "examined": examined,
        "groups": groups,
        "not_dead_lettered": never_died,
    })))
}

/// The messages a move-back body names: `{"messages": [id, ...]}` or `{"all": true}`, exactly
/// one of the two (S-UI-10); anything else is 400 naming what is wrong.
fn selection(body: &axum::body::Bytes) -> Result<Option<Vec<MessageId>>, ApiError> {
    let map = body_object(body)?;
    let all = match map.get("all") {
        None | Some(JsonValue::Bool(false)) => false,
        Some(JsonValue::Bool(true)) => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "'all' must be a boolean, got {other}"
            )));
        }
    };
    match (all, map.get("messages")) {
        (true, None) => Ok(None),
        (false, Some(JsonValue::Array(items))) if !items.is_empty() => items
            .iter()
            .map(|v| {
                v.as_u64().map(MessageId).ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "'messages' must hold message ids (non-negative integers), got {v}"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        (true, Some(_)) => Err(ApiError::BadRequest(
            "give either 'messages' or 'all', not both".to_owned(),
        )),
        _ => Err(ApiError::BadRequest(
            "give 'messages' (a non-empty array of message ids) or 'all': true".to_owned(),
        )),
    }
}

pub(crate) async fn move_back(
    Path((vhost, queue)): Path<(String, String)>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
    let ids = selection(&body)?;
    let reply = api
        .command(Command::MoveBack {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        })
        .await?;
    let Reply::MovedBack { moved, skipped } = reply else {
        return Err(ApiError::Unavailable);
    };
    let moved: Vec<u64> = moved.iter().map(|m| m.0).collect();
    let skipped: Vec<JsonValue> = skipped
        .iter()
        .map(|(id, reason)| json!({ "message": id.0, "reason": reason }))
        .collect();
    Ok(ok_json(json!({
        "vhost": vhost,
        "queue": queue,
        "moved": moved,
        "skipped": skipped,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<Vec<MessageId>>, ApiError> {
        selection(&axum::body::Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn s_ui_10_a_move_back_names_messages_or_all() {
        assert_eq!(parse(r#"{"all":true}"#).unwrap(), None);
        assert_eq!(
            parse(r#"{"messages":[3,4]}"#).unwrap(),
            Some(vec![MessageId(3), MessageId(4)])
        );
        for bad in [
            "",
            "[]",
            r#"{"messages":[]}"#,
            r#"{"messages":["3"]}"#,
            r#"{"messages":[-1]}"#,
            r#"{"all":"yes"}"#,
            r#"{"all":true,"messages":[1]}"#,
            r#"{"all":false}"#,
        ] {
            assert!(
                matches!(parse(bad), Err(ApiError::BadRequest(_))),
                "{bad} accepted"
            );
        }
    }
}
