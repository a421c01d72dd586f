//! `/api/exchanges`: list, show, declare and delete exchanges.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::{Path, Query};
use serde_json::Value as JsonValue;
use std::collections::HashMap;

use super::api::{Admin, AdminBody, Api, ApiError, ApiResult};
use super::json as j;
use super::reply::{
    body_object, created_or_updated, field_bool, no_content, ok_json, query_flag, vhosts_of,
};

use wharf_broker::{Command, ExchangeDeclare};

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

pub(crate) async fn exchanges_all(Admin(api): Admin) -> ApiResult {
    exchange_list(&api, None).await
}

pub(crate) async fn exchanges_vhost(Path(vhost): Path<String>, Admin(api): Admin) -> ApiResult {
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
    Path((vhost, name)): Path<(String, String)>,
    Admin(api): Admin,
) -> ApiResult {
    Ok(ok_json(find_exchange(&api, vhost, name).await?))
}

pub(crate) async fn exchange_put(
    Path((vhost, name)): Path<(String, String)>,
    AdminBody(api, body): AdminBody,
) -> ApiResult {
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
    Path((vhost, exchange)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    Admin(api): Admin,
) -> ApiResult {
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
