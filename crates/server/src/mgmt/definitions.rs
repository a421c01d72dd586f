//! `/api/definitions`: export and import in RabbitMQ's definitions JSON (`vhosts`,
//! `policies`, `queues`, `exchanges`, `bindings`; operator policies as `parameters` of
//! component `operator_policy`, as RabbitMQ writes them). `users` (with RabbitMQ's
//! `password_hash`, never a clear password) and `permissions` too; `topic_permissions` are
//! accepted and reported as not applied.
//!
//! Import applies each definition as the broker command a client would send, in dependency
//! order (vhosts, policies, exchanges, queues, bindings, users, permissions), stopping at the
//! first refusal.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value as JsonValue, json};

use super::api::{Admin, AdminBody, ApiError};
use super::json as j;
use super::policies::policy_spec;
use super::users::{permission_json, user_json};
use wharf_broker::{Command, DestName, ExchangeDeclare, QueueDeclare};

/// The exchanges every vhost has: not exported, and ignored on import.
fn predeclared(name: &str) -> bool {
    name.is_empty() || name.starts_with("amq.")
}

pub(crate) async fn export(Admin(api): Admin) -> Result<Response, ApiError> {
    let mut defs = api
        .query(|view| {
            let b = view.broker;
            let mut vhosts = Vec::new();
            let mut policies = Vec::new();
            let mut parameters = Vec::new();
            let mut queues = Vec::new();
            let mut exchanges = Vec::new();
            let mut bindings = Vec::new();
            for v in b.vhost_names() {
                vhosts.push(json!({ "name": v, "description": "", "tags": [], "metadata": {} }));
                for p in b.policies(&v) {
                    let mut pj = j::policy(&p);
                    if p.operator {
                        if let Some(map) = pj.as_object_mut() {
                            map.remove("vhost");
                            map.remove("name");
                        }
                        parameters.push(json!({
                            "vhost": v, "component": "operator_policy",
                            "name": p.policy.name, "value": pj,
                        }));
                    } else {
                        policies.push(pj);
                    }
                }
                for q in b.queues(&v) {
                    if q.durable && q.exclusive_owner.is_none() {
                        queues.push(json!({
                            "name": q.name, "vhost": v, "durable": true,
                            "auto_delete": q.auto_delete,
                            "arguments": j::table_to_json(&q.arguments),
                        }));
                    }
                }
                for x in b.exchanges(&v) {
                    if x.durable && !predeclared(&x.name) {
                        exchanges.push(json!({
                            "name": x.name, "vhost": v, "type": x.kind.name(), "durable": true,
                            "auto_delete": x.auto_delete, "internal": x.internal,
                            "arguments": j::table_to_json(&x.arguments),
                        }));
                    }
                }
                for bi in b.bindings(&v) {
                    let mut bj = j::binding(&v, &bi);
                    if let Some(map) = bj.as_object_mut() {
                        map.remove("properties_key");
                    }
                    bindings.push(bj);
                }
            }
            json!({
                "vhosts": vhosts, "policies": policies, "parameters": parameters,
                "global_parameters": [], "queues": queues, "exchanges": exchanges,
                "bindings": bindings, "topic_permissions": [],
            })
        })
        .await?;
    let (users, permissions) = api
        .query(|v| {
            let users: Vec<JsonValue> = v.broker.users().iter().map(user_json).collect();
            let permissions: Vec<JsonValue> =
                v.broker.permissions().iter().map(permission_json).collect();
            (users, permissions)
        })
        .await?;
    if let Some(map) = defs.as_object_mut() {
        map.insert("rabbitmq_version".into(), json!("3.13.0"));
        map.insert("product_name".into(), json!("wharf"));
        map.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
        map.insert("users".into(), JsonValue::Array(users));
        map.insert("permissions".into(), JsonValue::Array(permissions));
    }
    Ok(Json(defs).into_response())
}

fn list<'a>(defs: &'a Map<String, JsonValue>, key: &str) -> Result<&'a [JsonValue], ApiError> {
    match defs.get(key) {
        None | Some(JsonValue::Null) => Ok(&[]),
        Some(JsonValue::Array(items)) => Ok(items),
        Some(other) => Err(ApiError::BadRequest(format!(
            "'{key}' must be a list, got {other}"
        ))),
    }
}

fn text<'a>(item: &'a JsonValue, key: &str, what: &str) -> Result<&'a str, ApiError> {
    item.get(key)
        .and_then(JsonValue::as_str)
        .ok_or_else(|| ApiError::BadRequest(format!("{what} without a string '{key}': {item}")))
}

fn flag(item: &JsonValue, key: &str, default: bool) -> bool {
    item.get(key)
        .and_then(JsonValue::as_bool)
        .unwrap_or(default)
}

fn object(item: &JsonValue) -> Map<String, JsonValue> {
    item.as_object().cloned().unwrap_or_default()
}

/// Everything the import would do, as broker commands in order.
fn commands(defs: &Map<String, JsonValue>) -> Result<Vec<Command>, ApiError> {
    let mut out = Vec::new();
    for v in list(defs, "vhosts")? {
        out.push(Command::VhostAdd {
            vhost: text(v, "name", "a vhost")?.to_owned(),
        });
    }
    for p in list(defs, "policies")? {
        let name = text(p, "name", "a policy")?.to_owned();
        out.push(Command::PolicySet {
            vhost: text(p, "vhost", "a policy")?.to_owned(),
            policy: policy_spec(name, &object(p))?,
            operator: false,
        });
    }
    for p in list(defs, "parameters")? {
        if p.get("component").and_then(JsonValue::as_str) != Some("operator_policy") {
            continue;
        }
        let name = text(p, "name", "a parameter")?.to_owned();
        let value = object(p.get("value").unwrap_or(&JsonValue::Null));
        out.push(Command::PolicySet {
            vhost: text(p, "vhost", "a parameter")?.to_owned(),
            policy: policy_spec(name, &value)?,
            operator: true,
        });
    }
    for x in list(defs, "exchanges")? {
        let name = text(x, "name", "an exchange")?;
        if predeclared(name) {
            continue;
        }
        out.push(Command::ExchangeDeclare(ExchangeDeclare {
            vhost: text(x, "vhost", "an exchange")?.to_owned(),
            exchange: name.to_owned(),
            kind: text(x, "type", "an exchange")?.to_owned(),
            passive: false,
            durable: flag(x, "durable", true),
            auto_delete: flag(x, "auto_delete", false),
            internal: flag(x, "internal", false),
            arguments: j::json_to_table(x.get("arguments").unwrap_or(&JsonValue::Null))
                .map_err(ApiError::BadRequest)?,
        }));
    }
    for q in list(defs, "queues")? {
        out.push(Command::QueueDeclare(QueueDeclare {
            vhost: text(q, "vhost", "a queue")?.to_owned(),
            queue: text(q, "name", "a queue")?.to_owned(),
            passive: false,
            durable: flag(q, "durable", true),
            exclusive: false,
            auto_delete: flag(q, "auto_delete", false),
            arguments: j::json_to_table(q.get("arguments").unwrap_or(&JsonValue::Null))
                .map_err(ApiError::BadRequest)?,
            owner: None,
        }));
    }
    for b in list(defs, "bindings")? {
        let vhost = text(b, "vhost", "a binding")?.to_owned();
        let source = text(b, "source", "a binding")?.to_owned();
        let destination = text(b, "destination", "a binding")?.to_owned();
        let routing_key = b
            .get("routing_key")
            .and_then(JsonValue::as_str)
            .unwrap_or_default()
            .to_owned();
        let arguments = j::json_to_table(b.get("arguments").unwrap_or(&JsonValue::Null))
            .map_err(ApiError::BadRequest)?;
        let dest = match b.get("destination_type").and_then(JsonValue::as_str) {
            Some("exchange") => DestName::Exchange(destination),
            _ => DestName::Queue(destination),
        };
        out.push(match dest {
            DestName::Queue(queue) => Command::QueueBind {
                vhost,
                queue,
                exchange: source,
                routing_key,
                arguments,
                bind: true,
                owner: None,
            },
            DestName::Exchange(destination) => Command::ExchangeBind {
                vhost,
                destination,
                source,
                routing_key,
                arguments,
                bind: true,
            },
        });
    }
    Ok(out)
}

pub(crate) async fn import(AdminBody(api, body): AdminBody) -> Result<Response, ApiError> {
    let defs = match serde_json::from_slice::<JsonValue>(&body) {
        Ok(JsonValue::Object(map)) => map,
        Ok(_) => {
            return Err(ApiError::BadRequest(
                "definitions must be a JSON object".to_owned(),
            ));
        }
        Err(e) => {
            return Err(ApiError::BadRequest(format!(
                "definitions are not JSON: {e}"
            )));
        }
    };
    // Everything is checked for shape before anything is applied.
    let mut cmds = commands(&defs)?;
    cmds.extend(access_commands(&defs)?);
    for cmd in cmds {
        api.command(cmd).await?;
    }
    let mut not_applied = Vec::new();
    let n = list(&defs, "topic_permissions")?.len();
    if n > 0 {
        not_applied.push(format!(
            "{n} topic_permissions not applied: wharf has no topic permissions"
        ));
    }
    if not_applied.is_empty() {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Ok(Json(json!({ "warnings": not_applied })).into_response())
    }
}

/// The `users` and `permissions` of a definitions document as broker commands. A user needs
/// a `password_hash` (RabbitMQ's export form; wharf never takes a clear password here).
fn access_commands(defs: &Map<String, JsonValue>) -> Result<Vec<Command>, ApiError> {
    let text = |o: &JsonValue, key: &str, what: &str| {
        o.get(key)
            .and_then(JsonValue::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::BadRequest(format!("{what} without a string '{key}'")))
    };
    let mut out = Vec::new();
    for u in list(defs, "users")? {
        let name = text(u, "name", "a user")?;
        let password_hash = text(u, "password_hash", &format!("user '{name}'"))?;
        let tags = match u.get("tags") {
            Some(JsonValue::Array(a)) => a
                .iter()
                .filter_map(JsonValue::as_str)
                .map(str::to_owned)
                .collect(),
            Some(JsonValue::String(s)) => s
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        out.push(Command::UserPut {
            name,
            password_hash,
            tags,
        });
    }
    for p in list(defs, "permissions")? {
        out.push(Command::PermissionSet {
            user: text(p, "user", "a permission")?,
            vhost: text(p, "vhost", "a permission")?,
            configure: text(p, "configure", "a permission")?,
            write: text(p, "write", "a permission")?,
            read: text(p, "read", "a permission")?,
        });
    }
    Ok(out)
}
