//! `/metrics` on the management port: the aggregated Prometheus exposition of
//! `crate::metrics` (the Prometheus listener's `/metrics`), from the same code, without
//! authentication as `rabbitmq_prometheus` serves it.

use axum::extract::State;
use axum::response::Response;

use super::api::Api;
use crate::metrics::Endpoint;

pub(crate) async fn metrics(State(api): State<Api>) -> Response {
    api.config().metrics.answer(Endpoint::Aggregated).await
}
