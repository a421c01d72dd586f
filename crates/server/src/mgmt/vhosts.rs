//! `/api/vhosts`: list, show, create and delete vhosts.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use std::collections::HashMap;

use axum::extract::{Path, Query};
use serde_json::{Value as JsonValue, json};

use super::api::{Admin, ApiError, ApiResult, Reader};
use super::reply::{created_or_updated, known_vhost, list_answer, no_content, ok_json};
use crate::admin::AdminView;

use wharf_broker::Command;

fn vhost_json(view: &AdminView<'_>, name: &str) -> JsonValue {
    // Counted, not listed: a listing copies every queue of the vhost (issue 18).
    let t = view.broker.totals_in(name);
    let (ready, unacked) = (t.ready, t.unacked);
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
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let list = api
        .query(move |view| {
            let list: Vec<JsonValue> = view
                .broker
                .vhost_names()
                .iter()
                .filter(|v| scope.sees(v))
                .map(|v| vhost_json(view, v))
                .collect();
            list
        })
        .await?;
    list_answer(list, &q)
}

pub(crate) async fn vhost_get(Path(vhost): Path<String>, Reader(api, scope): Reader) -> ApiResult {
    scope.check(&vhost)?;
    let found = api
        .query(move |view| known_vhost(view, &vhost).then(|| vhost_json(view, &vhost)))
        .await?;
    Ok(ok_json(found.ok_or(ApiError::NotFound)?))
}

pub(crate) async fn vhost_put(Path(vhost): Path<String>, Admin(api): Admin) -> ApiResult {
    let v = vhost.clone();
    let existed = api.query(move |view| known_vhost(view, &v)).await?;
    api.command(Command::VhostAdd { vhost }).await?;
    Ok(created_or_updated(!existed))
}

pub(crate) async fn vhost_delete(Path(vhost): Path<String>, Admin(api): Admin) -> ApiResult {
    let v = vhost.clone();
    if !api.query(move |view| known_vhost(view, &v)).await? {
        return Err(ApiError::NotFound);
    }
    api.command(Command::VhostDelete { vhost }).await?;
    Ok(no_content())
}
