//! `/api/queues`: listings with effective policies and TTLs (resolved by the broker's own
//! functions), declare, delete, purge, and RabbitMQ's "get messages".
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::{Path, Query};
use serde_json::{Value as JsonValue, json};
use std::collections::HashMap;

use super::api::{Api, ApiError, ApiResult, Authenticated, AuthenticatedBody, Reader, Scope, Via};
use super::cluster::Sight;
use super::json::{self as j, QueueSite};
use super::page::{Known, ListQuery, Row};
use super::rates::Counts;
use super::reply::{
    body_object, created_or_updated, field_bool, no_content, ok_json, query_flag, vhosts_of,
};
use crate::auth::{Permission, ResourceKind, need};

use wharf_broker::{
    Command, PolicyInfo, QueueDeclare, QueueInfo, QueueSettings, parse_policy, parse_queue_args,
};

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
pub(crate) fn queue_json(
    q: &QueueInfo,
    policies: &ParsedPolicies,
    site: QueueSite<'_>,
) -> JsonValue {
    let policy = policies.get(q.policy.as_ref(), false);
    let operator = policies.get(q.operator_policy.as_ref(), true);
    let from_policies = QueueSettings::effective(
        &QueueSettings::default(),
        policy.as_ref(),
        operator.as_ref(),
    );
    let args = parse_queue_args(&q.vhost, &q.name, &q.arguments).unwrap_or_default();
    let all = QueueSettings::effective(&args, policy.as_ref(), operator.as_ref());
    let mut out = j::queue(q, &settings_json(&from_policies), site);
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
/// policies, copied out of the broker task. In a cluster, the group's quorum queues the live
/// broker does not hold (on a follower: all of them) come from the group's committed state,
/// marked `true` (S-CLU-42).
async fn queue_rows(
    api: &Api,
    vhosts: Vec<String>,
    only: Option<String>,
) -> Result<Rows, ApiError> {
    let (one, names) = (only.clone(), vhosts.clone());
    let (now_ms, mut rows): Rows = api
        .query(move |view| {
            let rows = vhosts
                .iter()
                .map(|v| {
                    // One queue is looked up, not found in a listing of every queue.
                    let queues = match &only {
                        Some(name) => view.broker.queue(v, name).into_iter().collect(),
                        None => view.broker.queues(v),
                    };
                    let queues = queues.into_iter().map(|q| (q, false)).collect();
                    (queues, view.broker.policies(v))
                })
                .collect();
            (view.now_ms, rows)
        })
        .await?;
    if let Some(group) = api.group() {
        group.machine.with(|m| {
            let committed = m.broker();
            for (vhost, (queues, _)) in names.iter().zip(&mut rows) {
                add_committed(committed, vhost, one.as_deref(), queues);
            }
        });
    }
    Ok((now_ms, rows))
}

/// Adds to `queues` (of `vhost`) the quorum queues of the committed broker `committed` they
/// lack (all, or the one named `only`).
fn add_committed(
    committed: &wharf_broker::Broker,
    vhost: &str,
    only: Option<&str>,
    queues: &mut Vec<(QueueInfo, bool)>,
) {
    let listed = match only {
        Some(name) => committed.queue(vhost, name).into_iter().collect(),
        None => committed.queues(vhost),
    };
    for q in listed {
        let quorum = q.kind == wharf_broker::QueueKind::Quorum;
        if quorum && !queues.iter().any(|(l, _)| l.name == q.name) {
            queues.push((q, true));
        }
    }
}

/// The broker clock's time of a listing, and each vhost's queues (each marked when it comes
/// from the group's committed state) with its policies.
type Rows = (u64, Vec<(Vec<(QueueInfo, bool)>, Vec<PolicyInfo>)>);

/// Where a listing's queues live: this node, and in a cluster the group as the request sees
/// it (asked once per listing).
pub(crate) struct Place {
    own: String,
    sight: Option<Sight>,
}

impl Place {
    /// The place of `rows`' queues: the group's sight when one of them is a quorum queue of a
    /// cluster.
    async fn of(api: &Api, rows: &Rows) -> Place {
        let quorum = rows.1.iter().any(|(queues, _)| {
            queues
                .iter()
                .any(|(q, _)| q.kind == wharf_broker::QueueKind::Quorum)
        });
        let sight = match api.group() {
            Some(group) if quorum => Some(Sight::of(group, true).await),
            _ => None,
        };
        Place {
            own: api.node_name().to_owned(),
            sight,
        }
    }

    /// Where `q` lives (`committed`: read from the group's committed state).
    fn site(&self, q: &QueueInfo, committed: bool) -> QueueSite<'_> {
        match &self.sight {
            Some(s) if q.kind == wharf_broker::QueueKind::Quorum => s.site(!committed),
            _ => QueueSite {
                node: Some(&self.own),
                consumers_known: true,
            },
        }
    }
}

/// A listed queue before it is JSON: what the broker said of it and its vhost's policies.
struct QueueRow<'a> {
    info: QueueInfo,
    policies: &'a ParsedPolicies,
    /// Read from the group's committed state.
    committed: bool,
    place: &'a Place,
}

impl QueueRow<'_> {
    fn site(&self) -> QueueSite<'_> {
        self.place.site(&self.info, self.committed)
    }
}

impl Row for QueueRow<'_> {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn known_field(&self, key: &str) -> Known {
        if j::QUEUE_FIELDS.contains(&key) {
            Known::Field(j::queue_field(&self.info, key, self.site()))
        } else {
            Known::Unbuilt
        }
    }
}

/// The counts a queue's `message_stats` are sampled from, under its key.
fn queue_counts(q: &QueueInfo) -> (String, Counts) {
    let s = q.stats;
    let key = format!("q/{}/{}", q.vhost, q.name);
    let named = vec![
        ("publish", s.publish),
        ("deliver_get", s.deliver_get),
        ("redeliver", s.redeliver),
        ("ack", s.ack),
    ];
    (key, named)
}

/// The vhosts' policies parsed, one per vhost of `rows`.
fn parsed_policies((_, rows): &Rows) -> Vec<ParsedPolicies> {
    rows.iter().map(|(_, p)| ParsedPolicies::new(p)).collect()
}

/// The listed queues as rows, in the listing's order.
fn queue_rows_of<'a>(
    rows: Rows,
    parsed: &'a [ParsedPolicies],
    place: &'a Place,
) -> Vec<QueueRow<'a>> {
    rows.1
        .into_iter()
        .zip(parsed)
        .flat_map(|((queues, _), policies)| {
            queues.into_iter().map(move |(info, committed)| QueueRow {
                info,
                policies,
                committed,
                place,
            })
        })
        .collect()
}

/// The queues as JSON, each with its sampled `message_stats` (S-MGMT-8; not for a queue read
/// from the group's committed state, whose counts are not this node's) and, for a quorum
/// queue of a cluster, its leader, members and replication (S-CLU-41).
fn queues_json(api: &Api, now_ms: u64, rows: &[QueueRow<'_>]) -> Vec<JsonValue> {
    let mut list: Vec<JsonValue> = rows
        .iter()
        .map(|r| queue_json(&r.info, r.policies, r.site()))
        .collect();
    let counts: Vec<_> = rows.iter().map(|r| queue_counts(&r.info)).collect();
    api.rates.attach(now_ms, &mut list, &counts);
    for (item, row) in list.iter_mut().zip(rows) {
        let Some(map) = item.as_object_mut() else {
            continue;
        };
        if row.committed {
            map.remove("message_stats");
        }
        if let Some(sight) = &row.place.sight
            && row.info.kind == wharf_broker::QueueKind::Quorum
        {
            map.extend(sight.queue_fields());
        }
    }
    list
}

async fn queue_list(
    api: &Api,
    scope: &Scope,
    vhost: Option<String>,
    q: &HashMap<String, String>,
) -> ApiResult {
    let vhosts = vhosts_of(api, scope, vhost).await?;
    let rows = queue_rows(api, vhosts, None).await?;
    let query = ListQuery::parse(q)?;
    let now_ms = rows.0;
    let parsed = parsed_policies(&rows);
    let place = Place::of(api, &rows).await;
    let rows = queue_rows_of(rows, &parsed, &place);
    let counts: Vec<_> = rows.iter().map(|r| queue_counts(&r.info)).collect();
    api.rates.record(now_ms, &counts);
    let answer = query.apply_rows(rows, |page| queues_json(api, now_ms, &page))?;
    Ok(ok_json(answer))
}

pub(crate) async fn queues_all(
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    queue_list(&api, &scope, None, &q).await
}

pub(crate) async fn queues_vhost(
    Path(vhost): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    queue_list(&api, &scope, Some(vhost), &q).await
}

async fn find_queue(api: &Api, vhost: String, name: String) -> Result<JsonValue, ApiError> {
    let rows = queue_rows(api, vec![vhost], Some(name)).await?;
    let now_ms = rows.0;
    let parsed = parsed_policies(&rows);
    let place = Place::of(api, &rows).await;
    queues_json(api, now_ms, &queue_rows_of(rows, &parsed, &place))
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound)
}

pub(crate) async fn queue_get(
    Path((vhost, name)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    scope.check(&vhost)?;
    Ok(ok_json(find_queue(&api, vhost, name).await?))
}

pub(crate) async fn queue_put(
    Path((vhost, name)): Path<(String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
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
    let declare = Command::QueueDeclare(declare);
    api.permit(&who, &vhost, &declare, Via::Method).await?;
    let existed = find_queue(&api, vhost, name).await.is_ok();
    api.command(declare).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn queue_delete(
    Path((vhost, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    let delete = Command::QueueDelete {
        vhost: vhost.clone(),
        queue: queue.clone(),
        if_unused: query_flag(&q, "if-unused"),
        if_empty: query_flag(&q, "if-empty"),
        owner: None,
    };
    api.permit(&who, &vhost, &delete, Via::Method).await?;
    // queue.delete of an unknown queue succeeds in AMQP; the API says 404.
    find_queue(&api, vhost, queue).await?;
    api.command(delete).await?;
    Ok(no_content())
}

pub(crate) async fn queue_purge(
    Path((vhost, queue)): Path<(String, String)>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    let purge = Command::QueuePurge {
        vhost: vhost.clone(),
        queue,
        owner: None,
    };
    api.permit(&who, &vhost, &purge, Via::Channel).await?;
    api.command(purge).await?;
    Ok(no_content())
}

/// RabbitMQ's "get messages": `ack_requeue_true` (and `reject_requeue_true`) peek without
/// changing the queue (the broker's read-only `ready_messages`); `ack_requeue_false` takes
/// the messages and acks them through broker commands.
pub(crate) async fn queue_get_messages(
    Path((vhost, queue)): Path<(String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    let read = need(ResourceKind::Queue, &queue, Permission::Read);
    api.permit_needs(&who, &vhost, &[read], Via::Channel)?;
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
            let peek = Peek {
                vhost,
                queue,
                limit: count as usize,
                encoding,
                truncate,
            };
            let (v, q) = (peek.vhost.clone(), peek.queue.clone());
            api.read_queue(&v, &q, move |broker, _| peek.of(broker))
                .await?
                .ok_or(ApiError::NotFound)?
                .1
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

/// A peek at a queue's first ready messages ("get messages" with `ack_requeue_true`).
#[derive(Clone)]
struct Peek {
    vhost: String,
    queue: String,
    limit: usize,
    encoding: String,
    truncate: Option<usize>,
}

impl Peek {
    /// The messages as RabbitMQ's JSON, from `broker`; `None` when it has no such queue.
    fn of(&self, broker: &wharf_broker::Broker) -> Option<Vec<JsonValue>> {
        let total = broker.queue(&self.vhost, &self.queue)?.ready;
        // Reads back only the first `limit` messages (the rest may be on disk).
        let ready = broker.peek_messages(&self.vhost, &self.queue, self.limit);
        Some(
            ready
                .into_iter()
                .take(self.limit)
                .enumerate()
                .map(|(i, (m, redelivered))| {
                    let left = total.saturating_sub(i as u64 + 1);
                    j::message(&m, redelivered, left, &self.encoding, self.truncate)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;
    use wharf_broker::{FieldTable, QueueKind, QueueStats, Value};

    fn info(kind: QueueKind, policy: Option<&str>) -> QueueInfo {
        let mut arguments = FieldTable::new();
        arguments.insert("x-message-ttl", Value::I32(5000));
        QueueInfo {
            vhost: "/".to_owned(),
            name: "orders".to_owned(),
            durable: true,
            exclusive_owner: None,
            auto_delete: false,
            arguments,
            policy: policy.map(str::to_owned),
            operator_policy: None,
            ready: 7,
            unacked: 3,
            ready_bytes: 700,
            unacked_bytes: 30,
            consumers: 2,
            dead_letter_held: 4,
            dead_letter_held_bytes: 40,
            kind,
            max_priority: None,
            stats: QueueStats::default(),
        }
    }

    /// S-MGMT-2: a queue row filters and sorts by exactly what its built JSON shows.
    #[test]
    fn s_mgmt_2_a_queue_rows_known_fields_are_its_json_fields() {
        let policies = ParsedPolicies::new(&[]);
        let place = Place {
            own: j::NODE.to_owned(),
            sight: None,
        };
        for q in [
            info(QueueKind::Classic, None),
            info(QueueKind::Quorum, Some("p")),
        ] {
            let row = QueueRow {
                info: q.clone(),
                policies: &policies,
                committed: false,
                place: &place,
            };
            let built = queue_json(&q, &policies, row.site());
            for key in j::QUEUE_FIELDS {
                assert_eq!(
                    row.known_field(key),
                    Known::Field(built.get(key).cloned()),
                    "{key}"
                );
            }
            for key in ["arguments", "effective_message_ttl", "message_stats.ack"] {
                assert_eq!(row.known_field(key), Known::Unbuilt, "{key}");
            }
            assert_eq!(row.name(), "orders");
            // Every field of the built JSON is known unbuilt or named above.
            for key in built.as_object().unwrap().keys() {
                let listed = j::QUEUE_FIELDS.contains(&key.as_str());
                let built_only = [
                    "arguments",
                    "effective_message_ttl",
                    "effective_policy_definition",
                    "exclusive_consumer_tag",
                ];
                assert!(listed || built_only.contains(&key.as_str()), "{key}");
            }
        }
    }
}
