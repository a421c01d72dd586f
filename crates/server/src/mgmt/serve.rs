//! The management API's listeners (plain HTTP, and HTTPS when configured) and its router:
//! every route, the handler that serves it, and the fallback 404.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::api::{Api, ApiError, CoreSender, MgmtConfig};
use super::https;
use super::{
    bindings, browse, clock, connections, dead_letters, definitions, exchanges, health, limits,
    metrics, node, overview, timeline,
};
use super::{policies, queues, time, ui, users, vhosts};
use crate::error::ServerError;

/// The management API's listeners, once bound.
#[derive(Debug)]
pub(crate) struct Listening {
    /// The plain HTTP address.
    pub(crate) addr: SocketAddr,
    /// The HTTPS address, when [`MgmtConfig::tls`] is set.
    pub(crate) tls_addr: Option<SocketAddr>,
    /// Serves both until the stop signal.
    pub(crate) task: JoinHandle<()>,
}

/// Binds the management listeners (plain, and HTTPS when configured) and serves until `stop`
/// turns true.
///
/// # Errors
/// An address cannot be bound; the TLS certificate or key cannot be loaded.
pub(crate) async fn serve(
    config: MgmtConfig,
    core: CoreSender,
    stop: watch::Receiver<bool>,
) -> Result<Listening, ServerError> {
    let (listener, addr) = bind(&config.bind).await?;
    info!(%addr, "management API listening");
    let tls = match &config.tls {
        Some(t) => {
            // The one loading path of certificates, shared with AMQPS.
            let tls_config = crate::tls::server_config(&t.cert_file, &t.key_file)?;
            let (listener, tls_addr) = bind(&t.bind).await?;
            info!(addr = %tls_addr, "management API listening (HTTPS)");
            Some((
                https::HttpsListener::start(listener, tls_addr, tls_config, stop.clone()),
                tls_addr,
            ))
        }
        None => None,
    };
    let tls_addr = tls.as_ref().map(|(_, a)| *a);
    let listeners: Vec<SocketAddr> = std::iter::once(addr)
        .chain(tls.as_ref().map(|(_, a)| *a))
        .collect();
    let api = Api::new(config, core, &listeners);
    let app = router(api);
    let shutdown = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let plain = axum::serve(
        listener,
        app.clone()
            .into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown(stop.clone()));
    let task = tokio::spawn(async move {
        let secure = async move {
            let Some((listener, _)) = tls else {
                return Ok(());
            };
            // `tap_io` only so that axum's `ConnectInfo<SocketAddr>` applies to this listener.
            let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(shutdown(stop))
            .await
        };
        let (plain, secure) = tokio::join!(plain.into_future(), secure);
        for result in [plain, secure] {
            if let Err(e) = result {
                warn!(error = %e, "management API stopped");
            }
        }
    });
    Ok(Listening {
        addr,
        tls_addr,
        task,
    })
}

async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// The largest request body the API reads: RabbitMQ's default `management.http.max_body_size`,
/// so a definitions export RabbitMQ imports imports here too; a larger one gets 413 (S-MGMT-9).
pub(crate) const MAX_BODY_BYTES: usize = 20_000_000;

fn router(api: Api) -> Router {
    Router::new()
        .merge(node_routes())
        .merge(entity_routes())
        .merge(access_routes())
        .merge(time::routes())
        .merge(ui::routes())
        .fallback(|| async { ApiError::NotFound })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

/// The node, health checks, metrics and the test clock.
fn node_routes() -> Router<Api> {
    Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/api/overview", get(overview::overview))
        .route("/api/environment", get(node::environment_get))
        .route("/api/healthchecks/node", get(overview::healthcheck))
        .route("/api/whoami", get(health::whoami))
        .route("/api/health/checks/alarms", get(health::alarms))
        .route("/api/health/checks/local-alarms", get(health::alarms))
        .route(
            "/api/health/checks/port-listener/{port}",
            get(health::port_listener),
        )
        .route(
            "/api/health/checks/virtual-hosts",
            get(health::virtual_hosts),
        )
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(health::node_is_quorum_critical),
        )
        .route("/api/aliveness-test/{vhost}", get(health::aliveness))
        .route("/api/nodes", get(health::nodes))
        .route("/api/nodes/{name}", get(health::node))
        .route("/api/parameters", get(definitions::parameters))
        .route(
            "/api/wharf/resource-limits",
            get(limits::limits_get).put(limits::limits_put),
        )
        .route("/api/test/clock", get(clock::clock_show))
        .route("/api/test/clock/advance", post(clock::clock_advance))
        .route("/api/test/clock/set", post(clock::clock_set))
}

/// Vhosts, queues, exchanges and bindings.
fn entity_routes() -> Router<Api> {
    Router::new()
        .route("/api/vhosts", get(vhosts::vhosts))
        .route(
            "/api/vhosts/{vhost}",
            get(vhosts::vhost_get)
                .put(vhosts::vhost_put)
                .delete(vhosts::vhost_delete),
        )
        .route("/api/queues", get(queues::queues_all))
        .route("/api/queues/{vhost}", get(queues::queues_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::queue_get)
                .put(queues::queue_put)
                .delete(queues::queue_delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(queues::queue_purge),
        )
        .route(
            "/api/queues/{vhost}/{name}/browse",
            get(browse::queue_browse),
        )
        .route(
            "/api/wharf/messages/{vhost}/{id}/timeline",
            get(timeline::message_timeline),
        )
        .route(
            "/api/wharf/dead-letters/{vhost}/{name}",
            get(dead_letters::dead_letters),
        )
        .route(
            "/api/wharf/dead-letters/{vhost}/{name}/move-back",
            post(dead_letters::move_back),
        )
        .route(
            "/api/queues/{vhost}/{name}/get",
            post(queues::queue_get_messages),
        )
        .route("/api/exchanges", get(exchanges::exchanges_all))
        .route("/api/exchanges/{vhost}", get(exchanges::exchanges_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::exchange_get)
                .put(exchanges::exchange_put)
                .delete(exchanges::exchange_delete),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            post(exchanges::exchange_publish),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(bindings::exchange_bindings_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(bindings::exchange_bindings_destination),
        )
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::queue_bindings),
        )
        .route("/api/bindings", get(bindings::bindings_all))
        .route("/api/bindings/{vhost}", get(bindings::bindings_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/q/{destination}",
            post(bindings::bind_queue).get(bindings::bindings_to_queue),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/e/{destination}",
            post(bindings::bind_exchange).get(bindings::bindings_to_exchange),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::binding_get).delete(bindings::binding_delete),
        )
}

/// Policies, definitions, connections, users and permissions.
fn access_routes() -> Router<Api> {
    use policies::{OPERATOR, USER};
    Router::new()
        .route("/api/policies", get(policies::list_all::<USER>))
        .route("/api/policies/{vhost}", get(policies::list_vhost::<USER>))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::get::<USER>)
                .put(policies::put::<USER>)
                .delete(policies::delete::<USER>),
        )
        .route(
            "/api/operator-policies",
            get(policies::list_all::<OPERATOR>),
        )
        .route(
            "/api/operator-policies/{vhost}",
            get(policies::list_vhost::<OPERATOR>),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::get::<OPERATOR>)
                .put(policies::put::<OPERATOR>)
                .delete(policies::delete::<OPERATOR>),
        )
        .route(
            "/api/definitions",
            get(definitions::export).post(definitions::import),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost).post(definitions::import_vhost),
        )
        .route("/api/connections", get(connections::connections))
        .route(
            "/api/connections/{name}",
            get(connections::connection_get).delete(connections::connection_delete),
        )
        .route("/api/channels", get(connections::channels))
        .route("/api/consumers", get(connections::consumers_all))
        .route("/api/consumers/{vhost}", get(connections::consumers_vhost))
        .route("/api/users", get(users::users))
        .route(
            "/api/users/{name}",
            get(users::user_get)
                .put(users::user_put)
                .delete(users::user_delete),
        )
        .route("/api/permissions", get(users::permissions))
        .route("/api/topic-permissions", get(users::topic_permissions))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(users::topic_permission_get)
                .put(users::topic_permission_put)
                .delete(users::topic_permission_delete),
        )
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(users::topic_permissions_of_vhost),
        )
        .route(
            "/api/users/{user}/topic-permissions",
            get(users::topic_permissions_of_user),
        )
        .route(
            "/api/permissions/{vhost}/{user}",
            get(users::permission_get)
                .put(users::permission_put)
                .delete(users::permission_delete),
        )
}
