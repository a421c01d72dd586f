//! The management HTTP API: RabbitMQ's management paths and JSON shapes over axum, HTTP basic
//! auth, and Prometheus metrics at `/metrics`. A sibling of `server` (it uses the server's
//! admin path, `server::admin`, and the broker's types); nothing below it may use it
//! (`tests/layering.rs`).
//!
//! It holds no business rules: every change is a broker [`Command`] sent through the broker
//! task (answered once durable), every listing a read-only query of the broker's own query
//! functions. This layer only maps HTTP to those and their answers to RabbitMQ's JSON.
//!
//! # Files
//!
//! - `mod.rs`: the listener, the router, authentication ([`authenticate`]), errors, and the
//!   two ways into the broker task (`Api::command`, `Api::query`).
//! - `json.rs`: broker values and listings as RabbitMQ's JSON, and JSON to field tables.
//! - `handlers.rs`: one function per endpoint.
//! - `definitions.rs`: `/api/definitions` export and import.
//! - `metrics.rs`: the Prometheus text exposition.
//! - `https.rs`: the TLS listener (`MgmtConfig::tls`), serving the same router.

mod definitions;
mod handlers;
mod https;
pub mod json;
mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use base64::Engine as _;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::admin::{AdminRequest, AdminView};
use crate::auth::UserRegistry;
use crate::core::CoreMsg;
use crate::error::ServerError;
use wharf_broker::{BrokerError, Command, ErrorKind, GetOk, Reply};

/// How to run the management API.
#[derive(Debug, Clone)]
pub struct MgmtConfig {
    /// `host:port` to listen on (port 0 picks a free one).
    pub bind: String,
    /// Who may log in, and their tags (the same registry AMQP logins use).
    pub users: Arc<UserRegistry>,
    /// How long recovery took at start, ms (a metric).
    pub recovery_ms: u64,
    /// The AMQP listener's address (for `/api/overview`'s listeners).
    pub amqp_addr: SocketAddr,
    /// The manual clock the server runs on when started with clock control
    /// (`--test-clock`); `None`: the clock endpoints refuse.
    pub clock: Option<wharf_clock::ManualClock>,
    /// Also serve the API over HTTPS on this listener (RabbitMQ's `management.ssl.*`), with
    /// the same router and authentication; plain HTTP stays on `bind`.
    pub tls: Option<crate::tls::TlsListener>,
    /// The server's resource alarms: `/metrics` reports the free disk space and memory use
    /// their monitor last measured (measured once, by the monitor); `None`: not reported.
    pub alarms: Option<Arc<crate::alarm::Alarms>>,
}

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

/// The broker task's inbox; this layer sends it only `CoreMsg::Admin`.
pub(crate) type CoreSender = mpsc::Sender<CoreMsg>;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct Api {
    config: Arc<MgmtConfig>,
    core: CoreSender,
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
    let api = Api {
        config: Arc::new(config),
        core,
    };
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

fn router(api: Api) -> Router {
    use handlers as h;
    Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/api/overview", get(h::overview))
        .route("/api/healthchecks/node", get(h::healthcheck))
        .route("/api/test/clock", get(h::clock_show))
        .route("/api/test/clock/advance", post(h::clock_advance))
        .route("/api/test/clock/set", post(h::clock_set))
        .route("/api/vhosts", get(h::vhosts))
        .route(
            "/api/vhosts/{vhost}",
            get(h::vhost_get).put(h::vhost_put).delete(h::vhost_delete),
        )
        .route("/api/queues", get(h::queues_all))
        .route("/api/queues/{vhost}", get(h::queues_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(h::queue_get).put(h::queue_put).delete(h::queue_delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(h::queue_purge),
        )
        .route(
            "/api/queues/{vhost}/{name}/get",
            post(h::queue_get_messages),
        )
        .route("/api/exchanges", get(h::exchanges_all))
        .route("/api/exchanges/{vhost}", get(h::exchanges_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(h::exchange_get)
                .put(h::exchange_put)
                .delete(h::exchange_delete),
        )
        .route("/api/bindings", get(h::bindings_all))
        .route("/api/bindings/{vhost}", get(h::bindings_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/q/{destination}",
            post(h::bind_queue),
        )
        .route("/api/policies", get(h::policies_all))
        .route("/api/policies/{vhost}", get(h::policies_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(h::policy_get)
                .put(h::policy_put)
                .delete(h::policy_delete),
        )
        .route("/api/operator-policies", get(h::op_policies_all))
        .route("/api/operator-policies/{vhost}", get(h::op_policies_vhost))
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(h::op_policy_get)
                .put(h::op_policy_put)
                .delete(h::op_policy_delete),
        )
        .route(
            "/api/definitions",
            get(definitions::export).post(definitions::import),
        )
        .route("/api/connections", get(h::connections))
        .route("/api/channels", get(h::channels))
        .route("/api/consumers", get(h::consumers_all))
        .route("/api/consumers/{vhost}", get(h::consumers_vhost))
        .route("/api/users", get(h::users))
        .route("/api/users/{name}", put(h::user_put).delete(h::user_delete))
        .route("/api/permissions", get(h::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            put(h::permission_put).delete(h::permission_delete),
        )
        .fallback(|| async { ApiError::NotFound })
        .with_state(api)
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user name.
    pub name: String,
    /// May change and see everything (RabbitMQ's `administrator` tag).
    pub administrator: bool,
}

/// An error answer, in RabbitMQ's JSON shape.
#[derive(Debug)]
pub enum ApiError {
    /// 401: no or wrong credentials.
    Unauthorized,
    /// 403: not an administrator.
    Forbidden,
    /// 404: no such object.
    NotFound,
    /// 400 with the reason (a refused definition, a malformed body).
    BadRequest(String),
    /// 500: the broker task is gone.
    Unavailable,
}

impl From<BrokerError> for ApiError {
    /// Maps the broker's refusal: unknown objects (404, and a vhost that does not exist) to
    /// 404, everything else (406 preconditions, 403/405 exclusivity) to 400 with its text.
    fn from(e: BrokerError) -> Self {
        match e.kind {
            ErrorKind::NotFound => ApiError::NotFound,
            ErrorKind::NotAllowed if e.text.contains("not found") => ApiError::NotFound,
            _ => ApiError::BadRequest(e.text),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error, reason) = match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "not_authorized",
                "Not_Authorized".to_owned(),
            ),
            ApiError::Forbidden => (
                StatusCode::FORBIDDEN,
                "not_authorized",
                "Not administrator user".to_owned(),
            ),
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "Object Not Found",
                "Not Found".to_owned(),
            ),
            ApiError::BadRequest(reason) => (StatusCode::BAD_REQUEST, "bad_request", reason),
            ApiError::Unavailable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the broker task is not running".to_owned(),
            ),
        };
        let mut resp = (
            status,
            axum::Json(json!({ "error": error, "reason": reason })),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        resp
    }
}

/// Checks the request's HTTP basic credentials against the server's user registry (the one
/// AMQP logins use: salted hashes, loopback-only users only from a loopback address); the
/// `administrator` tag makes an administrator. The one place that decides who a request is.
///
/// # Errors
/// [`ApiError::Unauthorized`] for missing, malformed or wrong credentials.
pub fn authenticate(
    headers: &HeaderMap,
    peer: SocketAddr,
    users: &UserRegistry,
) -> Result<Principal, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::Unauthorized)?;
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
        .ok_or(ApiError::Unauthorized)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| ApiError::Unauthorized)?;
    let text = String::from_utf8(decoded).map_err(|_| ApiError::Unauthorized)?;
    let (name, password) = text.split_once(':').ok_or(ApiError::Unauthorized)?;
    let who = users
        .check(name, password, peer)
        .map_err(|_| ApiError::Unauthorized)?;
    Ok(Principal {
        administrator: who.has_tag("administrator"),
        name: who.name,
    })
}

impl Api {
    /// The caller, who must be an administrator.
    pub(crate) fn admin(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Principal, ApiError> {
        let who = authenticate(headers, peer, &self.config.users)?;
        if who.administrator {
            Ok(who)
        } else {
            Err(ApiError::Forbidden)
        }
    }

    /// The caller, any user.
    pub(crate) fn user(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Principal, ApiError> {
        authenticate(headers, peer, &self.config.users)
    }

    pub(crate) fn config(&self) -> &MgmtConfig {
        &self.config
    }

    /// Runs the broker task's timer step now (after the clock moved) and waits for it.
    pub(crate) async fn tick(&self) -> Result<(), ApiError> {
        let (done, answer) = oneshot::channel();
        self.core
            .send(CoreMsg::Tick(done))
            .await
            .map_err(|_| ApiError::Unavailable)?;
        answer.await.map_err(|_| ApiError::Unavailable)
    }

    async fn send(&self, req: AdminRequest) -> Result<(), ApiError> {
        self.core
            .send(CoreMsg::Admin(req))
            .await
            .map_err(|_| ApiError::Unavailable)
    }

    /// Runs a broker command through the broker task; answered once durable.
    pub(crate) async fn command(&self, cmd: Command) -> Result<Reply, ApiError> {
        let (done, answer) = oneshot::channel();
        self.send(AdminRequest::Command {
            cmd: Box::new(cmd),
            done,
        })
        .await?;
        Ok(answer.await.map_err(|_| ApiError::Unavailable)??)
    }

    /// Takes and acks up to `count` messages of a queue.
    pub(crate) async fn take(
        &self,
        vhost: String,
        queue: String,
        count: u32,
    ) -> Result<Vec<GetOk>, ApiError> {
        let (done, answer) = oneshot::channel();
        self.send(AdminRequest::Take {
            vhost,
            queue,
            count,
            done,
        })
        .await?;
        Ok(answer.await.map_err(|_| ApiError::Unavailable)??)
    }

    /// Runs `f` against the broker task's state and returns what it copied out.
    pub(crate) async fn query<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&AdminView<'_>) -> T + Send + 'static,
    {
        let (done, answer) = oneshot::channel();
        let query = Box::new(move |view: &AdminView<'_>| {
            let _ = done.send(f(view));
        });
        self.send(AdminRequest::Query(query)).await?;
        answer.await.map_err(|_| ApiError::Unavailable)
    }
}
