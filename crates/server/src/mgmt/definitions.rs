//! `/api/definitions` and `/api/definitions/{vhost}`: export and import in RabbitMQ's
//! definitions JSON (`vhosts`, `policies`, `queues`, `exchanges`, `bindings`; operator
//! policies as `parameters` of component `operator_policy`, as RabbitMQ writes them; `users`
//! with RabbitMQ's `password_hash`, never a clear password; `permissions` and
//! `topic_permissions`). `/api/parameters` lists the operator policies the same way.
//!
//! Import applies each definition as the broker command a client would send, in dependency
//! order (vhosts, policies, exchanges, queues, bindings, users, permissions), stopping at the
//! first refusal. What a RabbitMQ export holds that wharf accepts without acting on it (S-DEFS)
//! is applied where it can be and named once per kind in the reply's `warnings` and the log.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value as JsonValue, json};

use super::api::{Admin, AdminBody, Api, ApiError, Authenticated};
use super::bindings::bind_command;
use super::json as j;
use super::policies::{noop_keys, policy_spec};
use super::reply::{list_answer, vhosts_of};
use super::users::{permission_json, topic_permission_json, user_json};
use crate::admin::AdminView;
use wharf_broker::{Command, DestName, ExchangeDeclare, QueueDeclare, Value};

/// The exchanges every vhost has: not exported, and ignored on import.
fn predeclared(name: &str) -> bool {
    name.is_empty() || name.starts_with("amq.")
}

/// Queue arguments of RabbitMQ's that wharf accepts and ignores (their policy-key twins are
/// the broker's `noop_policy_key`).
const NOOP_QUEUE_ARGS: [&str; 3] = ["x-queue-mode", "x-queue-version", "x-queue-master-locator"];

/// One vhost's definitions, as RabbitMQ exports them (with `vhost` fields when `with_vhost`).
fn vhost_defs(view: &AdminView<'_>, v: &str, with_vhost: bool, out: &mut Map<String, JsonValue>) {
    let b = view.broker;
    let mut push = |key: &str, mut item: JsonValue| {
        if !with_vhost
            && key != "policies"
            && key != "parameters"
            && let Some(map) = item.as_object_mut()
        {
            map.remove("vhost");
        }
        if let Some(JsonValue::Array(list)) = out.get_mut(key) {
            list.push(item);
        }
    };
    for p in b.policies(v) {
        let mut pj = j::policy(&p);
        if p.operator {
            if let Some(map) = pj.as_object_mut() {
                map.remove("vhost");
                map.remove("name");
            }
            push(
                "parameters",
                json!({ "vhost": v, "component": "operator_policy", "name": p.policy.name, "value": pj }),
            );
        } else {
            push("policies", pj);
        }
    }
    for q in b.queues(v) {
        if q.durable && q.exclusive_owner.is_none() {
            push(
                "queues",
                json!({ "name": q.name, "vhost": v, "durable": true, "auto_delete": q.auto_delete,
                    "arguments": j::table_to_json(&q.arguments) }),
            );
        }
    }
    for x in b.exchanges(v) {
        if x.durable && !predeclared(&x.name) {
            push(
                "exchanges",
                json!({ "name": x.name, "vhost": v, "type": x.kind.name(), "durable": true,
                    "auto_delete": x.auto_delete, "internal": x.internal,
                    "arguments": j::table_to_json(&x.arguments) }),
            );
        }
    }
    for bi in b.bindings(v) {
        let mut bj = j::binding(v, &bi);
        if let Some(map) = bj.as_object_mut() {
            map.remove("properties_key");
        }
        push("bindings", bj);
    }
}

fn empty_lists(keys: &[&str]) -> Map<String, JsonValue> {
    keys.iter()
        .map(|k| ((*k).to_owned(), JsonValue::Array(Vec::new())))
        .collect()
}

pub(crate) async fn export(Admin(api): Admin) -> Result<Response, ApiError> {
    let defs = api
        .query(|view| {
            let mut out = empty_lists(&[
                "vhosts",
                "policies",
                "parameters",
                "global_parameters",
                "queues",
                "exchanges",
                "bindings",
            ]);
            let b = view.broker;
            let vhosts: Vec<JsonValue> = b
                .vhost_names()
                .iter()
                .map(|v| json!({ "name": v, "description": "", "tags": [], "metadata": {} }))
                .collect();
            for v in b.vhost_names() {
                vhost_defs(view, &v, true, &mut out);
            }
            out.insert("vhosts".into(), JsonValue::Array(vhosts));
            let users = b.users().iter().map(user_json).collect();
            let permissions = b.permissions().iter().map(permission_json).collect();
            let topic = b
                .topic_permissions()
                .iter()
                .map(topic_permission_json)
                .collect();
            out.insert("users".into(), JsonValue::Array(users));
            out.insert("permissions".into(), JsonValue::Array(permissions));
            out.insert("topic_permissions".into(), JsonValue::Array(topic));
            out
        })
        .await?;
    Ok(Json(stamped(defs)).into_response())
}

fn stamped(mut defs: Map<String, JsonValue>) -> JsonValue {
    defs.insert("rabbitmq_version".into(), json!("3.13.0"));
    defs.insert("rabbit_version".into(), json!("3.13.0"));
    defs.insert("product_name".into(), json!("wharf"));
    defs.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
    JsonValue::Object(defs)
}

/// `GET /api/definitions/{vhost}`: that vhost's queues, exchanges, bindings, policies and
/// operator policies, without `vhost` fields on the first three (as RabbitMQ does).
pub(crate) async fn export_vhost(
    Path(vhost): Path<String>,
    Admin(api): Admin,
) -> Result<Response, ApiError> {
    let defs = api
        .query(move |view| {
            if !view.broker.vhost_names().contains(&vhost) {
                return None;
            }
            let mut out =
                empty_lists(&["policies", "parameters", "queues", "exchanges", "bindings"]);
            vhost_defs(view, &vhost, false, &mut out);
            Some(out)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(stamped(defs)).into_response())
}

/// `GET /api/parameters`: the runtime parameters; wharf's only ones are operator policies.
/// For administrators and `policymaker`s (S-MGMT-1), of the vhosts they may read.
pub(crate) async fn parameters(
    Query(q): Query<HashMap<String, String>>,
    Authenticated(api, who): Authenticated,
) -> Result<Response, ApiError> {
    api.policymaker(&who, None)?;
    let scope = api.scope_of(who);
    let vhosts = vhosts_of(&api, &scope, None).await?;
    let list = api
        .query(move |view| {
            let mut out =
                empty_lists(&["parameters", "policies", "queues", "exchanges", "bindings"]);
            for v in &vhosts {
                vhost_defs(view, v, true, &mut out);
            }
            out.remove("parameters")
        })
        .await?;
    let list = match list {
        Some(JsonValue::Array(list)) => list,
        _ => Vec::new(),
    };
    list_answer(list, &q)
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

fn text(item: &JsonValue, key: &str, what: &str) -> Result<String, ApiError> {
    item.get(key)
        .and_then(JsonValue::as_str)
        .map(str::to_owned)
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

fn arguments(item: &JsonValue) -> Result<wharf_broker::FieldTable, ApiError> {
    j::json_to_table(item.get("arguments").unwrap_or(&JsonValue::Null))
        .map_err(ApiError::BadRequest)
}

/// An import in progress: the commands, in order, and the warnings (one per kind of thing not
/// applied, S-DEFS-2).
struct Import<'a> {
    /// The vhost of a `/api/definitions/{vhost}` import: every item goes there.
    into: Option<&'a str>,
    cmds: Vec<Command>,
    warnings: BTreeMap<String, String>,
}

impl Import<'_> {
    fn warn(&mut self, key: &str, text: String) {
        self.warnings.entry(key.to_owned()).or_insert(text);
    }

    fn vhost(&self, item: &JsonValue, what: &str) -> Result<String, ApiError> {
        match self.into {
            Some(v) => Ok(v.to_owned()),
            None => text(item, "vhost", what),
        }
    }

    fn vhosts(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
        for v in list(defs, "vhosts")? {
            let vhost = text(v, "name", "a vhost")?;
            if v.get("limits")
                .is_some_and(|l| l.as_object().is_some_and(|m| !m.is_empty()))
            {
                self.warn(
                    "vhost limits",
                    "vhost limits are not applied: wharf has none".into(),
                );
            }
            self.cmds.push(Command::VhostAdd { vhost });
        }
        Ok(())
    }

    fn policy(
        &mut self,
        vhost: String,
        name: String,
        value: &JsonValue,
        operator: bool,
    ) -> Result<(), ApiError> {
        let policy = policy_spec(name, &object(value))?;
        for key in noop_keys(&policy) {
            self.warn(
                &format!("policy key {key}"),
                format!("policy key '{key}' accepted with no effect: wharf is a single node"),
            );
        }
        self.cmds.push(Command::PolicySet {
            vhost,
            policy,
            operator,
        });
        Ok(())
    }

    fn policies(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
        for p in list(defs, "policies")? {
            let name = text(p, "name", "a policy")?;
            let vhost = self.vhost(p, "a policy")?;
            self.policy(vhost, name, p, false)?;
        }
        for p in list(defs, "parameters")? {
            let component = text(p, "component", "a parameter")?;
            if component != "operator_policy" {
                self.warn(
                    &format!("parameter {component}"),
                    format!("parameters of component '{component}' are not applied: wharf has no {component}"),
                );
                continue;
            }
            let name = text(p, "name", "a parameter")?;
            let vhost = self.vhost(p, "a parameter")?;
            self.policy(
                vhost,
                name,
                p.get("value").unwrap_or(&JsonValue::Null),
                true,
            )?;
        }
        let globals: Vec<String> = list(defs, "global_parameters")?
            .iter()
            .filter_map(|g| g.get("name").and_then(JsonValue::as_str).map(str::to_owned))
            .collect();
        if !globals.is_empty() {
            self.warn(
                "global parameters",
                format!("global parameters are not applied: {}", globals.join(", ")),
            );
        }
        Ok(())
    }

    fn exchanges(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
        for x in list(defs, "exchanges")? {
            let name = text(x, "name", "an exchange")?;
            if predeclared(&name) {
                continue;
            }
            self.cmds.push(Command::ExchangeDeclare(ExchangeDeclare {
                vhost: self.vhost(x, "an exchange")?,
                exchange: name,
                kind: text(x, "type", "an exchange")?,
                passive: false,
                durable: flag(x, "durable", true),
                auto_delete: flag(x, "auto_delete", false),
                internal: flag(x, "internal", false),
                arguments: arguments(x)?,
            }));
        }
        Ok(())
    }

    fn queues(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
        for q in list(defs, "queues")? {
            let mut args = arguments(q)?;
            // RabbitMQ 4 exports carry the type beside the arguments.
            if let Some(kind) = q.get("type").and_then(JsonValue::as_str)
                && args.get("x-queue-type").is_none()
                && kind != "classic"
            {
                args.insert("x-queue-type", Value::long_str(kind));
            }
            for key in NOOP_QUEUE_ARGS {
                if args.get(key).is_some() {
                    self.warn(
                        &format!("queue argument {key}"),
                        format!(
                            "queue argument '{key}' accepted with no effect: wharf is a single node"
                        ),
                    );
                }
            }
            self.cmds.push(Command::QueueDeclare(QueueDeclare {
                vhost: self.vhost(q, "a queue")?,
                queue: text(q, "name", "a queue")?,
                passive: false,
                durable: flag(q, "durable", true),
                exclusive: false,
                auto_delete: flag(q, "auto_delete", false),
                arguments: args,
                owner: None,
            }));
        }
        Ok(())
    }

    fn bindings(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
        for b in list(defs, "bindings")? {
            let vhost = self.vhost(b, "a binding")?;
            let source = text(b, "source", "a binding")?;
            let destination = text(b, "destination", "a binding")?;
            let routing_key = b
                .get("routing_key")
                .and_then(JsonValue::as_str)
                .unwrap_or_default()
                .to_owned();
            let arguments = arguments(b)?;
            let dest = match b.get("destination_type").and_then(JsonValue::as_str) {
                Some("exchange") => DestName::Exchange(destination),
                _ => DestName::Queue(destination),
            };
            self.cmds.push(bind_command(
                vhost,
                source,
                dest,
                routing_key,
                arguments,
                true,
            ));
        }
        Ok(())
    }

    /// The `users`, `permissions` and `topic_permissions` as broker commands. A user needs a
    /// `password_hash` (RabbitMQ's export form; wharf never takes a clear password here).
    fn access(&mut self, defs: &Map<String, JsonValue>) -> Result<(), ApiError> {
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
            if u.get("limits")
                .is_some_and(|l| l.as_object().is_some_and(|m| !m.is_empty()))
            {
                self.warn(
                    "user limits",
                    "user limits are not applied: wharf has none".into(),
                );
            }
            self.cmds.push(Command::UserPut {
                name,
                password_hash,
                tags,
            });
        }
        for p in list(defs, "permissions")? {
            self.cmds.push(Command::PermissionSet {
                user: text(p, "user", "a permission")?,
                vhost: text(p, "vhost", "a permission")?,
                configure: text(p, "configure", "a permission")?,
                write: text(p, "write", "a permission")?,
                read: text(p, "read", "a permission")?,
            });
        }
        for p in list(defs, "topic_permissions")? {
            self.cmds.push(Command::TopicPermissionSet {
                user: text(p, "user", "a topic permission")?,
                vhost: text(p, "vhost", "a topic permission")?,
                exchange: text(p, "exchange", "a topic permission")?,
                write: text(p, "write", "a topic permission")?,
                read: text(p, "read", "a topic permission")?,
            });
        }
        Ok(())
    }
}

/// Everything an import would do, as broker commands in order, and its warnings.
fn plan<'a>(defs: &Map<String, JsonValue>, into: Option<&'a str>) -> Result<Import<'a>, ApiError> {
    let mut import = Import {
        into,
        cmds: Vec::new(),
        warnings: BTreeMap::new(),
    };
    if into.is_none() {
        import.vhosts(defs)?;
    }
    import.policies(defs)?;
    import.exchanges(defs)?;
    import.queues(defs)?;
    import.bindings(defs)?;
    if into.is_none() {
        import.access(defs)?;
    }
    Ok(import)
}

async fn apply(api: &Api, import: Import<'_>) -> Result<Response, ApiError> {
    let warnings = import.warnings;
    for cmd in import.cmds {
        api.command(cmd).await?;
    }
    for text in warnings.values() {
        tracing::warn!("definitions import: {text}");
    }
    if warnings.is_empty() {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        let list: Vec<&String> = warnings.values().collect();
        Ok(Json(json!({ "warnings": list })).into_response())
    }
}

fn parse_body(body: &[u8]) -> Result<Map<String, JsonValue>, ApiError> {
    match serde_json::from_slice::<JsonValue>(body) {
        Ok(JsonValue::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::BadRequest(
            "definitions must be a JSON object".to_owned(),
        )),
        Err(e) => Err(ApiError::BadRequest(format!(
            "definitions are not JSON: {e}"
        ))),
    }
}

pub(crate) async fn import(AdminBody(api, body): AdminBody) -> Result<Response, ApiError> {
    let defs = parse_body(&body)?;
    // Everything is checked for shape before anything is applied.
    let import = plan(&defs, None)?;
    apply(&api, import).await
}

/// `POST /api/definitions/{vhost}`: a vhost's definitions (RabbitMQ's vhost export) into
/// that vhost, which must exist.
pub(crate) async fn import_vhost(
    Path(vhost): Path<String>,
    AdminBody(api, body): AdminBody,
) -> Result<Response, ApiError> {
    let defs = parse_body(&body)?;
    let v = vhost.clone();
    if !api
        .query(move |view| view.broker.vhost_names().contains(&v))
        .await?
    {
        return Err(ApiError::NotFound);
    }
    let import = plan(&defs, Some(&vhost))?;
    apply(&api, import).await
}
