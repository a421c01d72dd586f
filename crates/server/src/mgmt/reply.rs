//! Small pieces the management handlers share: JSON and status answers, reading a request
//! body, and checking a vhost exists.

use axum::Json;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value as JsonValue;
use std::collections::HashMap;

use super::api::{Api, ApiError, Scope};
use super::page::ListQuery;
use crate::admin::AdminView;

pub(super) fn ok_json(value: JsonValue) -> Response {
    Json(value).into_response()
}

pub(super) fn created_or_updated(created: bool) -> Response {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
    .into_response()
}

pub(super) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// A request body as a JSON object (an empty body is an empty object).
pub(super) fn body_object(body: &Bytes) -> Result<serde_json::Map<String, JsonValue>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<JsonValue>(body) {
        Ok(JsonValue::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::BadRequest(format!(
            "the body must be a JSON object, got {other}"
        ))),
        Err(e) => Err(ApiError::BadRequest(format!("the body is not JSON: {e}"))),
    }
}

pub(super) fn field_bool(
    map: &serde_json::Map<String, JsonValue>,
    key: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match map.get(key) {
        None | Some(JsonValue::Null) => Ok(default),
        Some(JsonValue::Bool(b)) => Ok(*b),
        // Some clients send "true"/"false" as strings.
        Some(JsonValue::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(other) => Err(ApiError::BadRequest(format!(
            "'{key}' must be a boolean, got {other}"
        ))),
    }
}

pub(super) fn query_flag(q: &HashMap<String, String>, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true")
}

pub(super) fn known_vhost(view: &AdminView<'_>, vhost: &str) -> bool {
    view.broker.vhost_names().iter().any(|v| v == vhost)
}

/// The vhosts a listing covers: one (404 if it does not exist, 401 if the caller may not
/// see it) or all the caller may see.
pub(super) async fn vhosts_of(
    api: &Api,
    scope: &Scope,
    vhost: Option<String>,
) -> Result<Vec<String>, ApiError> {
    let names = api.query(|v| v.broker.vhost_names()).await?;
    match vhost {
        None => Ok(names.into_iter().filter(|v| scope.sees(v)).collect()),
        Some(v) if names.contains(&v) => {
            scope.check(&v)?;
            Ok(vec![v])
        }
        Some(_) => Err(ApiError::NotFound),
    }
}

/// A listing answered with RabbitMQ's list parameters applied (S-MGMT-2).
pub(super) fn list_answer(
    items: Vec<JsonValue>,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    Ok(ok_json(ListQuery::parse(q)?.apply(items)?))
}
