//! `/api/bindings`: listings (the default exchange's implicit bindings first) and binding a
//! queue to an exchange.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value as JsonValue, json};

use super::api::{Admin, AdminBody, Api, ApiError, ApiResult};
use super::json as j;
use super::reply::{body_object, ok_json, vhosts_of};
use crate::admin::AdminView;

use wharf_broker::Command;

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

pub(crate) async fn bindings_all(Admin(api): Admin) -> ApiResult {
    binding_list(&api, None).await
}

pub(crate) async fn bindings_vhost(Path(vhost): Path<String>, Admin(api): Admin) -> ApiResult {
    binding_list(&api, Some(vhost)).await
}

pub(crate) async fn bind_queue(
    Path((vhost, source, destination)): Path<(String, String, String)>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
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
