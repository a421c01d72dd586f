//! `/api/policies` and `/api/operator-policies`: one handler family for both kinds, and a
//! policy read from a PUT body (shared with definitions import).
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::body::Bytes;
use axum::extract::Path;
use serde_json::Value as JsonValue;

use super::api::{
    Api, ApiError, ApiResult, Authenticated, AuthenticatedBody, Principal, Reader, Scope,
};
use super::json as j;
use super::reply::{body_object, created_or_updated, known_vhost, no_content, ok_json, vhosts_of};

use wharf_broker::{Command, PolicySpec};

async fn policy_list(api: &Api, scope: &Scope, vhost: Option<String>, operator: bool) -> ApiResult {
    let vhosts = vhosts_of(api, scope, vhost).await?;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                list.extend(
                    view.broker
                        .policies(v)
                        .iter()
                        .filter(|p| p.operator == operator)
                        .map(j::policy),
                );
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

async fn find_policy(
    api: &Api,
    vhost: String,
    name: String,
    operator: bool,
) -> Result<JsonValue, ApiError> {
    api.query(move |view| {
        view.broker
            .policies(&vhost)
            .iter()
            .find(|p| p.operator == operator && p.policy.name == name)
            .map(j::policy)
    })
    .await?
    .ok_or(ApiError::NotFound)
}

/// A policy from a PUT body (`pattern`, `definition`, `priority`, `apply-to`). The
/// definition goes to the broker as JSON text: a string is passed as it is, so the broker's
/// own validation names what is wrong with it.
pub(crate) fn policy_spec(
    name: String,
    map: &serde_json::Map<String, JsonValue>,
) -> Result<PolicySpec, ApiError> {
    let bad = |text: String| ApiError::BadRequest(format!("invalid policy '{name}': {text}"));
    let pattern = match map.get("pattern") {
        Some(JsonValue::String(p)) => p.clone(),
        Some(other) => return Err(bad(format!("'pattern' must be a string, got {other}"))),
        None => return Err(bad("'pattern' is required".to_owned())),
    };
    let definition = match map.get("definition") {
        Some(JsonValue::String(text)) => text.clone(),
        // `rabbitmqctl export_definitions` writes an operator policy's definition as a list
        // of [key, value] pairs.
        Some(JsonValue::Array(pairs)) => pairs_to_object(pairs)
            .ok_or_else(|| bad("'definition' must be an object or [key, value] pairs".into()))?
            .to_string(),
        Some(other) => other.to_string(),
        None => return Err(bad("'definition' is required".to_owned())),
    };
    let priority = match map.get("priority") {
        None | Some(JsonValue::Null) => 0,
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| bad(format!("'priority' must be an integer, got {v}")))?,
    };
    let apply_to = match map.get("apply-to") {
        None | Some(JsonValue::Null) => wharf_broker::ApplyTo::All,
        Some(JsonValue::String(s)) => j::apply_to_parse(s).ok_or_else(|| {
            bad(format!(
                "'apply-to' must be one of queues, exchanges, all, got '{s}'"
            ))
        })?,
        Some(other) => return Err(bad(format!("'apply-to' must be a string, got {other}"))),
    };
    Ok(PolicySpec {
        name,
        pattern,
        apply_to,
        priority,
        definition,
    })
}

fn pairs_to_object(pairs: &[JsonValue]) -> Option<JsonValue> {
    let mut map = serde_json::Map::new();
    for pair in pairs {
        let [JsonValue::String(k), v] = pair.as_array()?.as_slice() else {
            return None;
        };
        map.insert(k.clone(), v.clone());
    }
    Some(JsonValue::Object(map))
}

/// The keys of a policy definition that wharf accepts and ignores (the broker's
/// `noop_policy_key`, S-DEFS-1).
pub(crate) fn noop_keys(policy: &PolicySpec) -> Vec<String> {
    match serde_json::from_str::<JsonValue>(&policy.definition) {
        Ok(JsonValue::Object(map)) => map
            .keys()
            .filter(|k| wharf_broker::noop_policy_key(k))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

async fn policy_put_inner(
    api: &Api,
    vhost: String,
    name: String,
    body: &Bytes,
    operator: bool,
) -> ApiResult {
    let map = body_object(body)?;
    let policy = policy_spec(name.clone(), &map)?;
    for key in noop_keys(&policy) {
        tracing::warn!(policy = %name, %vhost, key = %key, "policy key accepted with no effect: wharf is a single node");
    }
    let existed = find_policy(api, vhost.clone(), name, operator)
        .await
        .is_ok();
    let v = vhost.clone();
    if !api.query(move |view| known_vhost(view, &v)).await? {
        return Err(ApiError::NotFound);
    }
    api.command(Command::PolicySet {
        vhost,
        policy,
        operator,
    })
    .await?;
    Ok(created_or_updated(!existed))
}

async fn policy_delete_inner(api: &Api, vhost: String, name: String, operator: bool) -> ApiResult {
    find_policy(api, vhost.clone(), name.clone(), operator).await?;
    api.command(Command::PolicyClear {
        vhost,
        name,
        operator,
    })
    .await?;
    Ok(no_content())
}

// One handler family serves both kinds of policy: `OPERATOR` picks operator policies
// (`/api/operator-policies`) or user policies (`/api/policies`); the routes, answers and
// checks are otherwise the same.

/// `OPERATOR` for `/api/operator-policies`.
pub(crate) const OPERATOR: bool = true;
/// `OPERATOR` for `/api/policies`.
pub(crate) const USER: bool = false;

/// `GET /api/policies` (or operator policies): every vhost's.
pub(crate) async fn list_all<const OPERATOR: bool>(Reader(api, scope): Reader) -> ApiResult {
    policy_list(&api, &scope, None, OPERATOR).await
}

/// `GET /api/policies/{vhost}` (or operator policies).
pub(crate) async fn list_vhost<const OPERATOR: bool>(
    Path(vhost): Path<String>,
    Reader(api, scope): Reader,
) -> ApiResult {
    policy_list(&api, &scope, Some(vhost), OPERATOR).await
}

/// S-MGMT-1: who may read or change one policy: for a user policy an administrator or a
/// `policymaker` with access to its vhost (RabbitMQ's `is_authorized_policies`), for an
/// operator policy an administrator.
fn may_manage(api: &Api, who: &Principal, vhost: &str, operator: bool) -> Result<(), ApiError> {
    if operator {
        Api::administrator(who)
    } else {
        api.policymaker(who, Some(vhost))
    }
}

/// `GET /api/policies/{vhost}/{name}` (or an operator policy).
pub(crate) async fn get<const OPERATOR: bool>(
    Path((vhost, name)): Path<(String, String)>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    may_manage(&api, &who, &vhost, OPERATOR)?;
    Ok(ok_json(find_policy(&api, vhost, name, OPERATOR).await?))
}

/// `PUT /api/policies/{vhost}/{name}` (or an operator policy).
pub(crate) async fn put<const OPERATOR: bool>(
    Path((vhost, name)): Path<(String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    may_manage(&api, &who, &vhost, OPERATOR)?;
    policy_put_inner(&api, vhost, name, &body, OPERATOR).await
}

/// `DELETE /api/policies/{vhost}/{name}` (or an operator policy).
pub(crate) async fn delete<const OPERATOR: bool>(
    Path((vhost, name)): Path<(String, String)>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    may_manage(&api, &who, &vhost, OPERATOR)?;
    policy_delete_inner(&api, vhost, name, OPERATOR).await
}
