//! The Prometheus listener (`rabbitmq_prometheus`'s port, 15692 by default): `/metrics`,
//! `/metrics/per-object` and `/metrics/detailed`, without authentication as RabbitMQ serves
//! them; anything else is 404.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::detailed::{Detailed, Ignored};
use super::{Endpoint, MetricsSource};
use crate::error::ServerError;

async fn aggregated(State(source): State<MetricsSource>) -> Response {
    source.answer(Endpoint::Aggregated).await
}

async fn per_object(State(source): State<MetricsSource>) -> Response {
    source.answer(Endpoint::PerObject).await
}

async fn detailed(State(source): State<MetricsSource>, RawQuery(query): RawQuery) -> Response {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.as_deref().unwrap_or("")).unwrap_or_default();
    let (d, ignored) = Detailed::parse(&pairs);
    // S-OPS-3: ignored as RabbitMQ ignores them, but never silently.
    for i in ignored {
        match i {
            Ignored::NotKept(family) => {
                warn!(%family, "/metrics/detailed: wharf keeps no figures for this family");
            }
            Ignored::Unknown(family) => {
                warn!(%family, "/metrics/detailed: no such metric family");
            }
        }
    }
    source.answer(Endpoint::Detailed(d)).await
}

/// The listener's routes.
pub(crate) fn router(source: MetricsSource) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route("/metrics/detailed", get(detailed))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(source)
}

/// Binds `bind` and serves the Prometheus endpoints until `stop` turns true: (the address,
/// the task).
///
/// # Errors
/// The address cannot be bound.
pub(crate) async fn serve(
    bind: &str,
    source: MetricsSource,
    mut stop: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: bind.to_owned(),
        source,
    };
    let listener = TcpListener::bind(bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    info!(%addr, "Prometheus metrics listening");
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router(source))
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            warn!(error = %e, "Prometheus metrics listener stopped");
        }
    });
    Ok((addr, task))
}
