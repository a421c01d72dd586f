//! `/api/bindings`: listings (the default exchange's implicit bindings first), binding a
//! queue or an exchange to an exchange, and deleting a binding by its `properties_key`.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value as JsonValue, json};

use super::api::{
    Api, ApiError, ApiResult, Authenticated, AuthenticatedBody, Principal, Reader, Scope, Via,
};
use super::exchanges::exchange_in_path;
use super::json as j;
use super::reply::{body_object, no_content, ok_json, vhosts_of};
use crate::admin::AdminView;

use wharf_broker::{BindingInfo, Command, DestName, FieldTable};

/// The bindings of a vhost as copied out of the broker task: its queues' names (the default
/// exchange's implicit bindings) and its declared bindings. The JSON is written outside the
/// task (issue 18: a vhost with 10,000 queues).
struct VhostBindings {
    vhost: String,
    queues: Vec<String>,
    declared: Vec<BindingInfo>,
}

impl VhostBindings {
    fn of(view: &AdminView<'_>, vhost: &str) -> Self {
        VhostBindings {
            vhost: vhost.to_owned(),
            queues: view.broker.queue_names(vhost),
            declared: view.broker.bindings(vhost),
        }
    }

    /// Adds the quorum queues of the group's committed state `committed` this node's live
    /// broker does not hold (on a follower: all of them) with their bindings, as the queue
    /// listings show them (S-CLU-42).
    fn add_committed(&mut self, committed: &wharf_broker::Broker) {
        let mut added = Vec::new();
        for name in committed.queue_names(&self.vhost) {
            let quorum =
                committed.queue_kind(&self.vhost, &name) == Some(wharf_broker::QueueKind::Quorum);
            if quorum && !self.queues.contains(&name) {
                added.push(name);
            }
        }
        if added.is_empty() {
            return;
        }
        self.declared.extend(
            committed
                .bindings(&self.vhost)
                .into_iter()
                .filter(|b| matches!(&b.destination, DestName::Queue(q) if added.contains(q))),
        );
        self.queues.extend(added);
    }

    /// As RabbitMQ lists them: the default exchange's implicit binding of every queue first,
    /// then the declared ones.
    fn json(&self) -> impl Iterator<Item = JsonValue> + '_ {
        let vhost = self.vhost.as_str();
        let implicit = self.queues.iter().map(move |name| {
            json!({
                "source": "",
                "vhost": vhost,
                "destination": name,
                "destination_type": "queue",
                "routing_key": name,
                "arguments": {},
                "properties_key": name,
            })
        });
        implicit.chain(self.declared.iter().map(move |b| j::binding(vhost, b)))
    }
}

/// The bindings of `vhosts`, copied out of the broker task.
async fn vhost_bindings(api: &Api, vhosts: Vec<String>) -> Result<Vec<VhostBindings>, ApiError> {
    let mut copied = api
        .query(move |view| {
            vhosts
                .iter()
                .map(|v| VhostBindings::of(view, v))
                .collect::<Vec<_>>()
        })
        .await?;
    if let Some(group) = api.group() {
        group
            .machine
            .with(|m| copied.iter_mut().for_each(|b| b.add_committed(m.broker())));
    }
    Ok(copied)
}

async fn binding_list(api: &Api, scope: &Scope, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, scope, vhost).await?;
    let copied = vhost_bindings(api, vhosts).await?;
    let list = copied.iter().flat_map(VhostBindings::json).collect();
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn bindings_all(Reader(api, scope): Reader) -> ApiResult {
    binding_list(&api, &scope, None).await
}

pub(crate) async fn bindings_vhost(
    Path(vhost): Path<String>,
    Reader(api, scope): Reader,
) -> ApiResult {
    binding_list(&api, &scope, Some(vhost)).await
}

/// The broker command that adds (`bind`) or removes a binding.
pub(crate) fn bind_command(
    vhost: String,
    source: String,
    dest: DestName,
    routing_key: String,
    arguments: FieldTable,
    bind: bool,
) -> Command {
    match dest {
        DestName::Queue(queue) => Command::QueueBind {
            vhost,
            queue,
            exchange: source,
            routing_key,
            arguments,
            bind,
            owner: None,
        },
        DestName::Exchange(destination) => Command::ExchangeBind {
            vhost,
            destination,
            source,
            routing_key,
            arguments,
            bind,
        },
    }
}

async fn bind(
    api: &Api,
    who: &Principal,
    vhost: String,
    source: String,
    dest: DestName,
    body: &axum::body::Bytes,
) -> ApiResult {
    let map = body_object(body)?;
    let routing_key = map
        .get("routing_key")
        .and_then(JsonValue::as_str)
        .unwrap_or_default()
        .to_owned();
    let arguments = j::json_to_table(map.get("arguments").unwrap_or(&JsonValue::Null))
        .map_err(ApiError::BadRequest)?;
    let source = exchange_in_path(source);
    let cmd = bind_command(vhost.clone(), source, dest, routing_key, arguments, true);
    api.permit(who, &vhost, &cmd, Via::Method).await?;
    api.command(cmd).await?;
    Ok(StatusCode::CREATED.into_response())
}

pub(crate) async fn bind_queue(
    Path((vhost, source, destination)): Path<(String, String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    bind(
        &api,
        &who,
        vhost,
        source,
        DestName::Queue(destination),
        &body,
    )
    .await
}

/// `POST /api/bindings/{vhost}/e/{source}/e/{destination}` (S-MGMT-4).
pub(crate) async fn bind_exchange(
    Path((vhost, source, destination)): Path<(String, String, String)>,
    AuthenticatedBody(api, who, body): AuthenticatedBody,
) -> ApiResult {
    bind(
        &api,
        &who,
        vhost,
        source,
        DestName::Exchange(destination),
        &body,
    )
    .await
}

/// The bindings from `source` to `dest` in `vhost`.
async fn bindings_between(
    api: &Api,
    scope: &Scope,
    vhost: String,
    source: String,
    dest: DestName,
) -> Result<Vec<BindingInfo>, ApiError> {
    let vhosts = vhosts_of(api, scope, Some(vhost)).await?;
    let list = api
        .query(move |view| {
            vhosts
                .iter()
                .flat_map(|v| view.broker.bindings(v))
                .filter(|b| b.source == source && b.destination == dest)
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(list)
}

fn dest_of(kind: &str, name: String) -> Result<DestName, ApiError> {
    match kind {
        "q" => Ok(DestName::Queue(name)),
        "e" => Ok(DestName::Exchange(name)),
        _ => Err(ApiError::NotFound),
    }
}

/// `GET /api/bindings/{vhost}/e/{source}/q/{destination}`: the bindings between two.
pub(crate) async fn bindings_to_queue(
    Path((vhost, source, destination)): Path<(String, String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    bindings_between_get(api, scope, vhost, source, DestName::Queue(destination)).await
}

/// `GET /api/bindings/{vhost}/e/{source}/e/{destination}`.
pub(crate) async fn bindings_to_exchange(
    Path((vhost, source, destination)): Path<(String, String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    bindings_between_get(api, scope, vhost, source, DestName::Exchange(destination)).await
}

async fn bindings_between_get(
    api: Api,
    scope: Scope,
    vhost: String,
    source: String,
    dest: DestName,
) -> ApiResult {
    let list = bindings_between(&api, &scope, vhost.clone(), exchange_in_path(source), dest)
        .await?
        .iter()
        .map(|b| j::binding(&vhost, b))
        .collect();
    Ok(ok_json(JsonValue::Array(list)))
}

/// `GET` and `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`: one
/// binding named by its `properties_key` (404 when none has it).
async fn binding_by_props(
    api: &Api,
    scope: &Scope,
    path: BindingPath,
) -> Result<BindingInfo, ApiError> {
    let (vhost, source, kind, destination, props) = path;
    let dest = dest_of(&kind, destination)?;
    let list = bindings_between(api, scope, vhost.clone(), exchange_in_path(source), dest).await?;
    list.into_iter()
        .find(|b| j::properties_key(b) == props)
        .ok_or(ApiError::NotFound)
}

/// vhost, source, `q` or `e`, destination, properties key.
type BindingPath = (String, String, String, String, String);

pub(crate) async fn binding_get(
    Path(path): Path<BindingPath>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let vhost = path.0.clone();
    let b = binding_by_props(&api, &scope, path).await?;
    Ok(ok_json(j::binding(&vhost, &b)))
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}` (S-MGMT-4).
pub(crate) async fn binding_delete(
    Path(path): Path<BindingPath>,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    let vhost = path.0.clone();
    api.vhost_access(&who, &vhost)?;
    let b = binding_by_props(&api, &Scope::All, path).await?;
    let cmd = bind_command(
        vhost.clone(),
        b.source,
        b.destination,
        b.routing_key,
        b.arguments,
        false,
    );
    api.permit(&who, &vhost, &cmd, Via::Method).await?;
    api.command(cmd).await?;
    Ok(no_content())
}

/// The bindings of `vhost` that `keep` selects, as listed (the default exchange's implicit
/// ones included).
async fn bindings_where(
    api: &Api,
    scope: &Scope,
    vhost: String,
    keep: impl Fn(&JsonValue) -> bool,
) -> ApiResult {
    let vhosts = vhosts_of(api, scope, Some(vhost)).await?;
    let copied = vhost_bindings(api, vhosts).await?;
    let list = copied
        .iter()
        .flat_map(VhostBindings::json)
        .filter(|b| keep(b))
        .collect();
    Ok(ok_json(JsonValue::Array(list)))
}

/// `GET /api/queues/{vhost}/{name}/bindings`: the queue's bindings, the default exchange's
/// first (rabbitmqadmin's `delete binding` reads them).
pub(crate) async fn queue_bindings(
    Path((vhost, queue)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    bindings_where(&api, &scope, vhost, move |b| {
        b["destination_type"] == "queue" && b["destination"] == queue.as_str()
    })
    .await
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/source`: the bindings from the exchange.
pub(crate) async fn exchange_bindings_source(
    Path((vhost, exchange)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let exchange = exchange_in_path(exchange);
    bindings_where(&api, &scope, vhost, move |b| {
        b["source"] == exchange.as_str()
    })
    .await
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/destination`: the bindings to the exchange.
pub(crate) async fn exchange_bindings_destination(
    Path((vhost, exchange)): Path<(String, String)>,
    Reader(api, scope): Reader,
) -> ApiResult {
    bindings_where(&api, &scope, vhost, move |b| {
        b["destination_type"] == "exchange" && b["destination"] == exchange.as_str()
    })
    .await
}
