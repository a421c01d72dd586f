//! `/api/users`, `/api/permissions` and `/api/topic-permissions` (broker definitions in the
//! log, `broker::access`); the JSON of a user and of a (topic) permission, shared with
//! definitions export.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use std::collections::HashMap;

use axum::extract::{Path, Query};
use serde_json::{Value as JsonValue, json};

use super::api::{Admin, AdminBody, Api, ApiError, ApiResult};
use super::reply::{body_object, created_or_updated, no_content, ok_json};

use wharf_broker::Command;

/// A user as RabbitMQ's API and definitions show it (the hash, never a password).
pub(crate) fn user_json(u: &wharf_broker::UserInfo) -> JsonValue {
    json!({
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": u.tags,
        "limits": {},
    })
}

/// A topic permission as RabbitMQ's API and definitions show it.
pub(crate) fn topic_permission_json(p: &wharf_broker::TopicPermissionInfo) -> JsonValue {
    json!({
        "user": p.user, "vhost": p.vhost, "exchange": p.exchange,
        "write": p.write, "read": p.read,
    })
}

/// A permission as RabbitMQ's API and definitions show it.
pub(crate) fn permission_json(p: &wharf_broker::PermissionInfo) -> JsonValue {
    json!({
        "user": p.user, "vhost": p.vhost,
        "configure": p.configure, "write": p.write, "read": p.read,
    })
}

pub(crate) async fn users(Admin(api): Admin) -> ApiResult {
    let list = api
        .query(|v| v.broker.users().iter().map(user_json).collect::<Vec<_>>())
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn permissions(Admin(api): Admin) -> ApiResult {
    let list = api
        .query(|v| {
            v.broker
                .permissions()
                .iter()
                .map(permission_json)
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

/// The tags of a user body: RabbitMQ takes a comma-separated string or (newer) a list.
fn tags_of(body: &serde_json::Map<String, JsonValue>) -> Result<Vec<String>, ApiError> {
    match body.get("tags") {
        None | Some(JsonValue::Null) => Ok(Vec::new()),
        Some(JsonValue::String(s)) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()),
        Some(JsonValue::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::BadRequest("tags must be strings".to_owned()))
            })
            .collect(),
        Some(other) => Err(ApiError::BadRequest(format!(
            "tags must be a string or a list, got {other}"
        ))),
    }
}

/// `PUT /api/users/{name}` with `password` (hashed here, never stored in clear) or
/// `password_hash` (RabbitMQ's `rabbit_password_hashing_sha256` form), and `tags`.
pub(crate) async fn user_put(
    Path(name): Path<String>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
    let body = body_object(&body)?;
    let tags = tags_of(&body)?;
    let password_hash = match (body.get("password"), body.get("password_hash")) {
        (Some(JsonValue::String(p)), _) => {
            crate::auth::hash_password(p).map_err(ApiError::BadRequest)?
        }
        (None, Some(JsonValue::String(h))) => h.clone(),
        _ => {
            return Err(ApiError::BadRequest(
                "a user needs a password or a password_hash (a string)".to_owned(),
            ));
        }
    };
    let n = name.clone();
    let existed = api.query(move |v| v.broker.user(&n).is_some()).await?;
    api.command(Command::UserPut {
        name,
        password_hash,
        tags,
    })
    .await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn user_delete(Path(name): Path<String>, Admin(api): Admin) -> ApiResult {
    let n = name.clone();
    if !api.query(move |v| v.broker.user(&n).is_some()).await? {
        return Err(ApiError::NotFound);
    }
    api.command(Command::UserDelete { name }).await?;
    Ok(no_content())
}

/// `PUT /api/permissions/{vhost}/{user}` with `configure`, `write`, `read` regexes.
pub(crate) async fn permission_put(
    Path((vhost, user)): Path<(String, String)>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
    let body = body_object(&body)?;
    let regex = |key: &str| match body.get(key) {
        Some(JsonValue::String(s)) => Ok(s.clone()),
        _ => Err(ApiError::BadRequest(format!(
            "'{key}' must be a string (a regex)"
        ))),
    };
    let (configure, write, read) = (regex("configure")?, regex("write")?, regex("read")?);
    api.command(Command::PermissionSet {
        user,
        vhost,
        configure,
        write,
        read,
    })
    .await?;
    Ok(created_or_updated(true))
}

pub(crate) async fn permission_delete(
    Path((vhost, user)): Path<(String, String)>,
    Admin(api): Admin,
) -> ApiResult {
    api.command(Command::PermissionClear { user, vhost })
        .await?;
    Ok(no_content())
}

/// `GET /api/users/{name}` (S-MGMT-4).
pub(crate) async fn user_get(Path(name): Path<String>, Admin(api): Admin) -> ApiResult {
    let found = api
        .query(move |v| v.broker.user(&name).map(user_json))
        .await?;
    Ok(ok_json(found.ok_or(ApiError::NotFound)?))
}

/// `GET /api/permissions/{vhost}/{user}` (S-MGMT-4).
pub(crate) async fn permission_get(
    Path((vhost, user)): Path<(String, String)>,
    Admin(api): Admin,
) -> ApiResult {
    let found = api
        .query(move |v| {
            v.broker
                .permissions()
                .iter()
                .find(|p| p.vhost == vhost && p.user == user)
                .map(permission_json)
        })
        .await?;
    Ok(ok_json(found.ok_or(ApiError::NotFound)?))
}

/// The topic permissions `keep` selects, as RabbitMQ lists them.
async fn topic_list(
    api: &Api,
    keep: impl Fn(&wharf_broker::TopicPermissionInfo) -> bool + Send + 'static,
) -> Result<Vec<JsonValue>, ApiError> {
    api.query(move |v| {
        v.broker
            .topic_permissions()
            .iter()
            .filter(|p| keep(p))
            .map(topic_permission_json)
            .collect::<Vec<_>>()
    })
    .await
}

/// `GET /api/topic-permissions` (S-TPERM-1).
pub(crate) async fn topic_permissions(Admin(api): Admin) -> ApiResult {
    Ok(ok_json(JsonValue::Array(topic_list(&api, |_| true).await?)))
}

/// `GET /api/topic-permissions/{vhost}/{user}`: that user's, one per exchange (404 when
/// none).
pub(crate) async fn topic_permission_get(
    Path((vhost, user)): Path<(String, String)>,
    Admin(api): Admin,
) -> ApiResult {
    let list = topic_list(&api, move |p| p.vhost == vhost && p.user == user).await?;
    if list.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(ok_json(JsonValue::Array(list)))
}

/// `GET /api/vhosts/{vhost}/topic-permissions` and `/api/users/{user}/topic-permissions`.
pub(crate) async fn topic_permissions_of_vhost(
    Path(vhost): Path<String>,
    Admin(api): Admin,
) -> ApiResult {
    Ok(ok_json(JsonValue::Array(
        topic_list(&api, move |p| p.vhost == vhost).await?,
    )))
}

pub(crate) async fn topic_permissions_of_user(
    Path(user): Path<String>,
    Admin(api): Admin,
) -> ApiResult {
    Ok(ok_json(JsonValue::Array(
        topic_list(&api, move |p| p.user == user).await?,
    )))
}

/// `PUT /api/topic-permissions/{vhost}/{user}` with `exchange`, `write` and `read`
/// (RabbitMQ's `set_topic_permissions`, S-TPERM-1).
pub(crate) async fn topic_permission_put(
    Path((vhost, user)): Path<(String, String)>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
    let body = body_object(&body)?;
    let field = |key: &str| match body.get(key) {
        Some(JsonValue::String(s)) => Ok(s.clone()),
        _ => Err(ApiError::BadRequest(format!("'{key}' must be a string"))),
    };
    let (exchange, write, read) = (field("exchange")?, field("write")?, field("read")?);
    let (v, u, x) = (vhost.clone(), user.clone(), exchange.clone());
    let existed = !topic_list(&api, move |p| {
        p.vhost == v && p.user == u && p.exchange == x
    })
    .await?
    .is_empty();
    api.command(Command::TopicPermissionSet {
        user,
        vhost,
        exchange,
        write,
        read,
    })
    .await?;
    Ok(created_or_updated(!existed))
}

/// `DELETE /api/topic-permissions/{vhost}/{user}`: all of the user's in the vhost, or one
/// exchange's with `?exchange=` (`clear_topic_permissions`).
pub(crate) async fn topic_permission_delete(
    Path((vhost, user)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Admin(api): Admin,
) -> ApiResult {
    api.command(Command::TopicPermissionClear {
        user,
        vhost,
        exchange: q.get("exchange").cloned(),
    })
    .await?;
    Ok(no_content())
}
