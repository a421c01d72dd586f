//! `/api/exchanges`: list, show, declare and delete exchanges.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::{Path, Query};
use serde_json::Value as JsonValue;
use std::collections::HashMap;

use super::api::{Api, ApiError, ApiResult, Authenticated, AuthenticatedBody, Reader, Scope, Via};
use super::json as j;
use super::reply::{
    body_object, created_or_updated, field_bool, list_answer, no_content, ok_json, query_flag,
    vhosts_of,
};

use base64::Engine as _;
use wharf_broker::{Command, ErrorKind, ExchangeDeclare, ExchangeInfo, Publish};

async fn exchange_list(
    api: &Api,
    scope: &Scope,
    vhost: Option<String>,
    q: &HashMap<String, String>,
) -> ApiResult {
    let vhosts = vhosts_of(api, scope, vhost).await?;
    let (now_ms, exchanges) = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                list.extend(view.broker.exchanges(v));
            }
            (view.now_ms, list)
        })
        .await?;
    list_answer(exchanges_json(api, now_ms, &exchanges), q)
}

/// The exchanges as JSON, each with its sampled `message_stats` (S-MGMT-8).
fn exchanges_json(api: &Api, now_ms: u64, exchanges: &[ExchangeInfo]) -> Vec<JsonValue> {
    let mut list: Vec<JsonValue> = exchanges.iter().map(j::exchange).collect();
    let counts: Vec<_> = exchanges
        .iter()
        .map(|x| {
            let key = format!("x/{}/{}", x.vhost, x.name);
            let named = vec![
                ("publish_in", x.stats.publish_in.get()),
                ("publish_out", x.stats.publish_out.get()),
            ];
            (key, named)
        })
        .collect();
    api.rates.attach(now_ms, &mut list, &counts);
    list
}

pub(crate) async fn exchanges_all(
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    exchange_list(&api, &scope, None, &q).await
}

pub(crate) async fn exchanges_vhost(
    Path(vhost): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    exchange_list(&api, &scope, Some(vhost), &q).await
}

async fn find_exchange(api: &Api, vhost: String, name: String) -> Result<JsonValue, ApiError> {
    let (now_ms, found) = api
        .query(move |view| {
            let found = view
                .broker
                .exchanges(&vhost)
                .into_iter()
                .find(|x| x.name == name);
            (view.now_ms, found)
        })
        .await?;
    let found = found.ok_or(ApiError::NotFound)?;
    exchanges_json(api, now_ms, &[found])
        .pop()
        .ok_or(ApiError::NotFound)
}

pub(crate) async fn exchange_get(
    Path((vhost, name)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    scope.check(&vhost)?;
    Ok(ok_json(find_exchange(&api, vhost, name).await?))
}

pub(crate) async fn exchange_put(
    Path((vhost, name)): Path<(String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    let map = body_object(&body)?;
    let kind = map
        .get("type")
        .and_then(JsonValue::as_str)
        .ok_or_else(|| ApiError::BadRequest("'type' is required".to_owned()))?
        .to_owned();
    let arguments = j::json_to_table(map.get("arguments").unwrap_or(&JsonValue::Null))
        .map_err(ApiError::BadRequest)?;
    let declare = ExchangeDeclare {
        vhost: vhost.clone(),
        exchange: name.clone(),
        kind,
        passive: false,
        durable: field_bool(&map, "durable", true)?,
        auto_delete: field_bool(&map, "auto_delete", false)?,
        internal: field_bool(&map, "internal", false)?,
        arguments,
    };
    let declare = Command::ExchangeDeclare(declare);
    api.permit(&who, &vhost, &declare, Via::Method).await?;
    let existed = find_exchange(&api, vhost, name).await.is_ok();
    api.command(declare).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn exchange_delete(
    Path((vhost, exchange)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    let delete = Command::ExchangeDelete {
        vhost: vhost.clone(),
        exchange: exchange.clone(),
        if_unused: query_flag(&q, "if-unused"),
    };
    api.permit(&who, &vhost, &delete, Via::Method).await?;
    // exchange.delete of an unknown exchange succeeds in AMQP; the API says 404.
    find_exchange(&api, vhost, exchange).await?;
    api.command(delete).await?;
    Ok(no_content())
}

/// RabbitMQ's spelling of the default exchange in a path.
pub(crate) fn exchange_in_path(name: String) -> String {
    if name == "amq.default" {
        String::new()
    } else {
        name
    }
}

/// `POST /api/exchanges/{vhost}/{name}/publish`: publishes one message as the broker's own
/// `Publish` command and answers `{"routed": bool}` (S-MGMT-4). RabbitMQ's answers for a
/// body without its four keys, an unknown `payload_encoding` or a bad property, and for an
/// unknown exchange (400 with the AMQP text, not 404).
pub(crate) async fn exchange_publish(
    Path((vhost, name)): Path<(String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    let map = body_object(&body)?;
    let missing: Vec<String> = ["routing_key", "properties", "payload", "payload_encoding"]
        .iter()
        .filter(|k| !map.contains_key(**k))
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::BadRequest(format!("[{}]", missing.join(","))));
    }
    let text = |k: &str| map.get(k).and_then(JsonValue::as_str).unwrap_or_default();
    let payload = match text("payload_encoding") {
        "string" => text("payload").as_bytes().to_vec(),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(text("payload"))
            .map_err(|_| ApiError::BadRequest("[\"not_base64\",\"payload\"]".to_owned()))?,
        other => {
            return Err(ApiError::BadRequest(format!(
                "[\"unsupported_encoding\",\"{other}\"]"
            )));
        }
    };
    let properties = j::properties_from_json(map.get("properties").unwrap_or(&JsonValue::Null))
        .map_err(|key| ApiError::BadRequest(format!("[\"not_int\",\"{key}\"]")))?;
    let publish = Publish {
        vhost: vhost.clone(),
        exchange: exchange_in_path(name),
        routing_key: text("routing_key").to_owned(),
        mandatory: false,
        properties,
        body: payload.into(),
    };
    let publish = Command::Publish(publish);
    api.permit(&who, &vhost, &publish, Via::Channel).await?;
    let reply = api
        .command_as_broker(publish)
        .await?
        .map_err(|e| match e.kind {
            ErrorKind::NotFound => ApiError::BadRequest(format!("404 NOT_FOUND - {}", e.text)),
            _ => ApiError::from(e),
        })?;
    let routed = matches!(reply, wharf_broker::Reply::Published(p) if p.routed);
    Ok(ok_json(serde_json::json!({ "routed": routed })))
}
