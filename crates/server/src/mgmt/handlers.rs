//! One function per management endpoint: authenticate, map the request to a broker command
//! or query, map the answer to RabbitMQ's JSON. No business rules (STYLE 2.2): validation of
//! arguments and policies is the broker's, and its texts are passed through.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as JsonValue, json};

use super::json::{self as j, NODE};
use super::{Api, ApiError};
use crate::admin::AdminView;
use crate::clock_control::{self, ClockControlError};
use wharf_broker::{Command, ExchangeDeclare, PolicyInfo, PolicySpec, QueueDeclare, QueueInfo};
use wharf_broker::{QueueSettings, parse_policy, parse_queue_args};

type Peer = ConnectInfo<SocketAddr>;
type ApiResult = Result<Response, ApiError>;

fn ok_json(value: JsonValue) -> Response {
    Json(value).into_response()
}

fn created_or_updated(created: bool) -> Response {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
    .into_response()
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// A request body as a JSON object (an empty body is an empty object).
fn body_object(body: &Bytes) -> Result<serde_json::Map<String, JsonValue>, ApiError> {
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

fn field_bool(
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

fn query_flag(q: &HashMap<String, String>, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true")
}

fn known_vhost(view: &AdminView<'_>, vhost: &str) -> bool {
    view.broker.vhost_names().iter().any(|v| v == vhost)
}

/// The vhosts a listing covers: one (404 if it does not exist) or all.
async fn vhosts_of(api: &Api, vhost: Option<String>) -> Result<Vec<String>, ApiError> {
    let names = api.query(|v| v.broker.vhost_names()).await?;
    match vhost {
        None => Ok(names),
        Some(v) if names.contains(&v) => Ok(vec![v]),
        Some(_) => Err(ApiError::NotFound),
    }
}

// ----- overview, health -----

pub(crate) async fn overview(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.user(&headers, peer)?;
    let amqp = api.config().amqp_addr;
    let totals = api
        .query(|view| {
            let mut queues = 0usize;
            let mut exchanges = 0usize;
            let mut consumers = 0usize;
            let (mut ready, mut unacked) = (0u64, 0u64);
            for vhost in view.broker.vhost_names() {
                let qs = view.broker.queues(&vhost);
                queues += qs.len();
                ready += qs.iter().map(|q| q.ready).sum::<u64>();
                unacked += qs.iter().map(|q| q.unacked).sum::<u64>();
                exchanges += view.broker.exchanges(&vhost).len();
                consumers += view.broker.consumers(&vhost).len();
            }
            let channels: usize = view.connections.iter().map(|c| c.channels.len()).sum();
            json!({
                "object_totals": {
                    "connections": view.connections.len(),
                    "channels": channels,
                    "consumers": consumers,
                    "exchanges": exchanges,
                    "queues": queues,
                },
                "queue_totals": {
                    "messages": ready.saturating_add(unacked),
                    "messages_ready": ready,
                    "messages_unacknowledged": unacked,
                },
                "message_stats": {
                    "publish": view.counters.published,
                    "deliver_get": view.counters.delivered,
                    "ack": view.counters.acked,
                },
            })
        })
        .await?;
    let mut out = json!({
        // The management API level wharf follows, for tools that check it.
        "management_version": "3.13.0",
        "rabbitmq_version": "3.13.0",
        "product_name": "wharf",
        "product_version": env!("CARGO_PKG_VERSION"),
        "cluster_name": NODE,
        "node": NODE,
        "listeners": [{
            "node": NODE,
            "protocol": "amqp",
            "ip_address": amqp.ip().to_string(),
            "port": amqp.port(),
        }],
    });
    if let (Some(out), JsonValue::Object(t)) = (out.as_object_mut(), totals) {
        out.extend(t);
    }
    Ok(ok_json(out))
}

pub(crate) async fn healthcheck(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.user(&headers, peer)?;
    // Answered by the broker task itself: a stuck or stopped task fails the check.
    api.query(|_| ()).await?;
    Ok(ok_json(json!({ "status": "ok" })))
}

// ----- clock control (`--test-clock` only; not part of RabbitMQ's API) -----

fn clock_refused(e: &ClockControlError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

/// `GET /api/test/clock`: `{"now_ms": N}`.
pub(crate) async fn clock_show(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let clock = api.config().clock.as_ref();
    let now_ms = clock
        .map(wharf_clock::Clock::now_ms)
        .ok_or_else(|| clock_refused(&ClockControlError::NotEnabled))?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}

/// `POST /api/test/clock/advance` with `{"by": "30m"}` (or milliseconds as a number): moves
/// the clock and answers once the broker has acted on every deadline passed.
pub(crate) async fn clock_advance(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let body = body_object(&body)?;
    let by = match body.get("by") {
        Some(JsonValue::String(t)) => {
            wharf_base::parse_duration(t).map_err(|e| ApiError::BadRequest(e.to_string()))?
        }
        Some(JsonValue::Number(n)) => std::time::Duration::from_millis(
            n.as_u64()
                .ok_or_else(|| ApiError::BadRequest(format!("'by' must be a duration, got {n}")))?,
        ),
        _ => {
            return Err(ApiError::BadRequest(
                "'by' must be a duration such as \"30m\" or milliseconds".to_owned(),
            ));
        }
    };
    let now_ms =
        clock_control::advance(api.config().clock.as_ref(), by).map_err(|e| clock_refused(&e))?;
    api.tick().await?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}

/// `POST /api/test/clock/set` with `{"now_ms": N}` (never backwards).
pub(crate) async fn clock_set(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let body = body_object(&body)?;
    let Some(to) = body.get("now_ms").and_then(JsonValue::as_u64) else {
        return Err(ApiError::BadRequest(
            "'now_ms' must be milliseconds since the epoch".to_owned(),
        ));
    };
    let now_ms =
        clock_control::set(api.config().clock.as_ref(), to).map_err(|e| clock_refused(&e))?;
    api.tick().await?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}

// ----- vhosts -----

fn vhost_json(view: &AdminView<'_>, name: &str) -> JsonValue {
    let qs = view.broker.queues(name);
    let ready: u64 = qs.iter().map(|q| q.ready).sum();
    let unacked: u64 = qs.iter().map(|q| q.unacked).sum();
    json!({
        "name": name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "tracing": false,
        "messages": ready.saturating_add(unacked),
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
    })
}

pub(crate) async fn vhosts(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let list = api
        .query(|view| {
            let list: Vec<JsonValue> = view
                .broker
                .vhost_names()
                .iter()
                .map(|v| vhost_json(view, v))
                .collect();
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn vhost_get(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let found = api
        .query(move |view| known_vhost(view, &vhost).then(|| vhost_json(view, &vhost)))
        .await?;
    Ok(ok_json(found.ok_or(ApiError::NotFound)?))
}

pub(crate) async fn vhost_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let v = vhost.clone();
    let existed = api.query(move |view| known_vhost(view, &v)).await?;
    api.command(Command::VhostAdd { vhost }).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn vhost_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let v = vhost.clone();
    if !api.query(move |view| known_vhost(view, &v)).await? {
        return Err(ApiError::NotFound);
    }
    api.command(Command::VhostDelete { vhost }).await?;
    Ok(no_content())
}

// ----- queues -----

/// A vhost's policies parsed once per listing (by the broker's own `parse_policy`), keyed by
/// (operator, name).
pub(crate) struct ParsedPolicies(HashMap<(bool, String), QueueSettings>);

impl ParsedPolicies {
    pub(crate) fn new(policies: &[PolicyInfo]) -> Self {
        ParsedPolicies(
            policies
                .iter()
                .filter_map(|p| {
                    let parsed = parse_policy(&p.policy, p.operator).ok()?;
                    Some(((p.operator, p.policy.name.clone()), parsed.settings))
                })
                .collect(),
        )
    }

    fn get(&self, name: Option<&String>, operator: bool) -> Option<QueueSettings> {
        self.0.get(&(operator, name?.clone())).cloned()
    }
}

/// A queue's JSON with its effective policy definition and effective message TTL, both
/// resolved by the broker's own functions (`parse_policy`, `QueueSettings::effective`).
/// Built outside the broker task: only the listings are copied out of it.
pub(crate) fn queue_json(q: &QueueInfo, policies: &ParsedPolicies) -> JsonValue {
    let policy = policies.get(q.policy.as_ref(), false);
    let operator = policies.get(q.operator_policy.as_ref(), true);
    let from_policies = QueueSettings::effective(
        &QueueSettings::default(),
        policy.as_ref(),
        operator.as_ref(),
    );
    let args = parse_queue_args(&q.vhost, &q.name, &q.arguments).unwrap_or_default();
    let all = QueueSettings::effective(&args, policy.as_ref(), operator.as_ref());
    let mut out = j::queue(q, &settings_json(&from_policies));
    if let Some(map) = out.as_object_mut() {
        map.insert(
            "effective_message_ttl".to_owned(),
            json!(all.message_ttl_ms),
        );
    }
    out
}

/// Settings in policy-definition form (the keys a policy would use).
fn settings_json(s: &QueueSettings) -> JsonValue {
    let mut map = serde_json::Map::new();
    if let Some(v) = s.message_ttl_ms {
        map.insert("message-ttl".into(), json!(v));
    }
    if let Some(v) = s.expires_ms {
        map.insert("expires".into(), json!(v));
    }
    if let Some(v) = &s.dead_letter_exchange {
        map.insert("dead-letter-exchange".into(), json!(v));
    }
    if let Some(v) = &s.dead_letter_routing_key {
        map.insert("dead-letter-routing-key".into(), json!(v));
    }
    if let Some(v) = s.max_length {
        map.insert("max-length".into(), json!(v));
    }
    if let Some(v) = s.max_length_bytes {
        map.insert("max-length-bytes".into(), json!(v));
    }
    if let Some(v) = s.overflow {
        let name = match v {
            wharf_broker::Overflow::DropHead => "drop-head",
            wharf_broker::Overflow::RejectPublish => "reject-publish",
            wharf_broker::Overflow::RejectPublishDlx => "reject-publish-dlx",
        };
        map.insert("overflow".into(), json!(name));
    }
    if let Some(v) = s.delivery_limit {
        map.insert("delivery-limit".into(), json!(v));
    }
    JsonValue::Object(map)
}

/// The queues of each vhost (all of them, or the one named `only`) with the vhost's
/// policies, copied out of the broker task.
async fn queue_rows(
    api: &Api,
    vhosts: Vec<String>,
    only: Option<String>,
) -> Result<Vec<(Vec<QueueInfo>, Vec<PolicyInfo>)>, ApiError> {
    api.query(move |view| {
        vhosts
            .iter()
            .map(|v| {
                let mut queues = view.broker.queues(v);
                if let Some(name) = &only {
                    queues.retain(|q| &q.name == name);
                }
                (queues, view.broker.policies(v))
            })
            .collect()
    })
    .await
}

fn queues_json(rows: &[(Vec<QueueInfo>, Vec<PolicyInfo>)]) -> Vec<JsonValue> {
    let mut list = Vec::new();
    for (queues, policies) in rows {
        let parsed = ParsedPolicies::new(policies);
        list.extend(queues.iter().map(|q| queue_json(q, &parsed)));
    }
    list
}

async fn queue_list(api: &Api, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
    let rows = queue_rows(api, vhosts, None).await?;
    Ok(ok_json(JsonValue::Array(queues_json(&rows))))
}

pub(crate) async fn queues_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    queue_list(&api, None).await
}

pub(crate) async fn queues_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    queue_list(&api, Some(vhost)).await
}

async fn find_queue(api: &Api, vhost: String, name: String) -> Result<JsonValue, ApiError> {
    let rows = queue_rows(api, vec![vhost], Some(name)).await?;
    queues_json(&rows)
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound)
}

pub(crate) async fn queue_get(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    Ok(ok_json(find_queue(&api, vhost, name).await?))
}

pub(crate) async fn queue_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let map = body_object(&body)?;
    let arguments = j::json_to_table(map.get("arguments").unwrap_or(&JsonValue::Null))
        .map_err(ApiError::BadRequest)?;
    let declare = QueueDeclare {
        vhost: vhost.clone(),
        queue: name.clone(),
        passive: false,
        durable: field_bool(&map, "durable", true)?,
        exclusive: false,
        auto_delete: field_bool(&map, "auto_delete", false)?,
        arguments,
        owner: None,
    };
    let existed = find_queue(&api, vhost, name).await.is_ok();
    api.command(Command::QueueDeclare(declare)).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn queue_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    // queue.delete of an unknown queue succeeds in AMQP; the API says 404.
    find_queue(&api, vhost.clone(), queue.clone()).await?;
    api.command(Command::QueueDelete {
        vhost,
        queue,
        if_unused: query_flag(&q, "if-unused"),
        if_empty: query_flag(&q, "if-empty"),
        owner: None,
    })
    .await?;
    Ok(no_content())
}

pub(crate) async fn queue_purge(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, queue)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    api.command(Command::QueuePurge {
        vhost,
        queue,
        owner: None,
    })
    .await?;
    Ok(no_content())
}

/// RabbitMQ's "get messages": `ack_requeue_true` (and `reject_requeue_true`) peek without
/// changing the queue (the broker's read-only `ready_messages`); `ack_requeue_false` takes
/// the messages and acks them through broker commands.
pub(crate) async fn queue_get_messages(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, queue)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let map = body_object(&body)?;
    let count = match map.get("count") {
        None => 1,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| ApiError::BadRequest(format!("'count' must be an integer, got {v}")))?,
    };
    let ackmode = map
        .get("ackmode")
        .and_then(JsonValue::as_str)
        .ok_or_else(|| ApiError::BadRequest("'ackmode' is required".to_owned()))?
        .to_owned();
    let encoding = map
        .get("encoding")
        .and_then(JsonValue::as_str)
        .unwrap_or("auto")
        .to_owned();
    if encoding != "auto" && encoding != "base64" {
        return Err(ApiError::BadRequest(format!(
            "'encoding' must be auto or base64, got '{encoding}'"
        )));
    }
    let truncate = map
        .get("truncate")
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|n| usize::try_from(n).ok());
    let out: Vec<JsonValue> = match ackmode.as_str() {
        "ack_requeue_true" | "reject_requeue_true" => {
            let limit = count as usize;
            api.query(move |view| {
                if !view.broker.queues(&vhost).iter().any(|q| q.name == queue) {
                    return None;
                }
                // Reads back only the first `count` messages (the rest may be on disk).
                let total = view
                    .broker
                    .queues(&vhost)
                    .iter()
                    .find(|q| q.name == queue)
                    .map_or(0, |q| q.ready);
                let ready = view.broker.peek_messages(&vhost, &queue, limit);
                Some(
                    ready
                        .into_iter()
                        .take(limit)
                        .enumerate()
                        .map(|(i, (m, redelivered))| {
                            let left = total.saturating_sub(i as u64 + 1);
                            j::message(&m, redelivered, left, &encoding, truncate)
                        })
                        .collect(),
                )
            })
            .await?
            .ok_or(ApiError::NotFound)?
        }
        "ack_requeue_false" => api
            .take(vhost, queue, count)
            .await?
            .iter()
            .map(|g| {
                j::message(
                    &g.message,
                    g.redelivered,
                    u64::from(g.message_count),
                    &encoding,
                    truncate,
                )
            })
            .collect(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "'ackmode' must be ack_requeue_true, ack_requeue_false or reject_requeue_true, got '{other}'"
            )));
        }
    };
    Ok(ok_json(JsonValue::Array(out)))
}

// ----- exchanges -----

async fn exchange_list(api: &Api, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                list.extend(view.broker.exchanges(v).iter().map(j::exchange));
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn exchanges_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    exchange_list(&api, None).await
}

pub(crate) async fn exchanges_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    exchange_list(&api, Some(vhost)).await
}

async fn find_exchange(api: &Api, vhost: String, name: String) -> Result<JsonValue, ApiError> {
    api.query(move |view| {
        view.broker
            .exchanges(&vhost)
            .iter()
            .find(|x| x.name == name)
            .map(j::exchange)
    })
    .await?
    .ok_or(ApiError::NotFound)
}

pub(crate) async fn exchange_get(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    Ok(ok_json(find_exchange(&api, vhost, name).await?))
}

pub(crate) async fn exchange_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
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
    let existed = find_exchange(&api, vhost, name).await.is_ok();
    api.command(Command::ExchangeDeclare(declare)).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn exchange_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, exchange)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    // exchange.delete of an unknown exchange succeeds in AMQP; the API says 404.
    find_exchange(&api, vhost.clone(), exchange.clone()).await?;
    api.command(Command::ExchangeDelete {
        vhost,
        exchange,
        if_unused: query_flag(&q, "if-unused"),
    })
    .await?;
    Ok(no_content())
}

// ----- bindings -----

/// The bindings of a vhost as RabbitMQ lists them: the default exchange's implicit binding
/// of every queue first, then the declared ones.
fn bindings_json(view: &AdminView<'_>, vhost: &str) -> Vec<JsonValue> {
    let mut list: Vec<JsonValue> = view
        .broker
        .queues(vhost)
        .iter()
        .map(|q| {
            json!({
                "source": "",
                "vhost": vhost,
                "destination": q.name,
                "destination_type": "queue",
                "routing_key": q.name,
                "arguments": {},
                "properties_key": q.name,
            })
        })
        .collect();
    list.extend(
        view.broker
            .bindings(vhost)
            .iter()
            .map(|b| j::binding(vhost, b)),
    );
    list
}

async fn binding_list(api: &Api, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                list.extend(bindings_json(view, v));
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn bindings_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    binding_list(&api, None).await
}

pub(crate) async fn bindings_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    binding_list(&api, Some(vhost)).await
}

pub(crate) async fn bind_queue(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, source, destination)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let map = body_object(&body)?;
    let routing_key = map
        .get("routing_key")
        .and_then(JsonValue::as_str)
        .unwrap_or_default()
        .to_owned();
    let arguments = j::json_to_table(map.get("arguments").unwrap_or(&JsonValue::Null))
        .map_err(ApiError::BadRequest)?;
    api.command(Command::QueueBind {
        vhost,
        queue: destination,
        exchange: source,
        routing_key,
        arguments,
        bind: true,
        owner: None,
    })
    .await?;
    Ok(StatusCode::CREATED.into_response())
}

// ----- policies and operator policies -----

async fn policy_list(api: &Api, vhost: Option<String>, operator: bool) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
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

async fn policy_put_inner(
    api: &Api,
    vhost: String,
    name: String,
    body: &Bytes,
    operator: bool,
) -> ApiResult {
    let map = body_object(body)?;
    let policy = policy_spec(name.clone(), &map)?;
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

pub(crate) async fn policies_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_list(&api, None, false).await
}

pub(crate) async fn policies_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_list(&api, Some(vhost), false).await
}

pub(crate) async fn policy_get(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    Ok(ok_json(find_policy(&api, vhost, name, false).await?))
}

pub(crate) async fn policy_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_put_inner(&api, vhost, name, &body, false).await
}

pub(crate) async fn policy_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_delete_inner(&api, vhost, name, false).await
}

pub(crate) async fn op_policies_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_list(&api, None, true).await
}

pub(crate) async fn op_policies_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_list(&api, Some(vhost), true).await
}

pub(crate) async fn op_policy_get(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    Ok(ok_json(find_policy(&api, vhost, name, true).await?))
}

pub(crate) async fn op_policy_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_put_inner(&api, vhost, name, &body, true).await
}

pub(crate) async fn op_policy_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    policy_delete_inner(&api, vhost, name, true).await
}

// ----- connections, channels, consumers -----

pub(crate) async fn connections(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let list: Vec<JsonValue> = view
                .connections
                .iter()
                .map(|c| j::connection(c, server))
                .collect();
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn channels(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for c in &view.connections {
                let consumers = view.broker.consumers(&c.vhost);
                for ch in &c.channels {
                    let mine: Vec<_> = consumers
                        .iter()
                        .filter(|k| k.chan.conn.0 == c.id && k.chan.channel.0 == ch.number)
                        .collect();
                    let unacked = mine.iter().map(|k| u64::from(k.unacked)).sum();
                    list.push(j::channel(c, ch, server, mine.len(), unacked));
                }
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

async fn consumer_list(api: &Api, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                for k in view.broker.consumers(v) {
                    let conn = view.connections.iter().find(|c| c.id == k.chan.conn.0);
                    let (conn_name, peer_host, peer_port, user) = conn.map_or_else(
                        || (String::new(), String::new(), 0, String::new()),
                        |c| {
                            (
                                j::connection_name(c, server),
                                c.peer.ip().to_string(),
                                c.peer.port(),
                                c.user.clone(),
                            )
                        },
                    );
                    list.push(json!({
                        "consumer_tag": k.consumer_tag,
                        "queue": { "name": k.queue, "vhost": v },
                        "channel_details": {
                            "name": format!("{conn_name} ({})", k.chan.channel.0),
                            "number": k.chan.channel.0,
                            "connection_name": conn_name,
                            "peer_host": peer_host,
                            "peer_port": peer_port,
                            "user": user,
                        },
                        "ack_required": !k.no_ack,
                        "exclusive": k.exclusive,
                        "prefetch_count": k.prefetch_count,
                        "active": true,
                        "activity_status": "up",
                        "arguments": {},
                    }));
                }
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn consumers_all(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    consumer_list(&api, None).await
}

pub(crate) async fn consumers_vhost(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(vhost): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    consumer_list(&api, Some(vhost)).await
}

// ----- users and permissions (broker definitions in the log, `broker::access`) -----

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

/// A permission as RabbitMQ's API and definitions show it.
pub(crate) fn permission_json(p: &wharf_broker::PermissionInfo) -> JsonValue {
    json!({
        "user": p.user, "vhost": p.vhost,
        "configure": p.configure, "write": p.write, "read": p.read,
    })
}

pub(crate) async fn users(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let list = api
        .query(|v| v.broker.users().iter().map(user_json).collect::<Vec<_>>())
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn permissions(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    api.admin(&headers, peer)?;
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
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
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

pub(crate) async fn user_delete(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    let n = name.clone();
    if !api.query(move |v| v.broker.user(&n).is_some()).await? {
        return Err(ApiError::NotFound);
    }
    api.command(Command::UserDelete { name }).await?;
    Ok(no_content())
}

/// `PUT /api/permissions/{vhost}/{user}` with `configure`, `write`, `read` regexes.
pub(crate) async fn permission_put(
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    api.admin(&headers, peer)?;
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
    State(api): State<Api>,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult {
    api.admin(&headers, peer)?;
    api.command(Command::PermissionClear { user, vhost })
        .await?;
    Ok(no_content())
}
