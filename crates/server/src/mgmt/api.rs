//! What every management handler shares: the API's configuration and its way into the broker
//! task ([`Api`]), who made a request ([`authenticate`]; the [`Admin`] and [`Authenticated`]
//! extractors, the one place a handler's access is checked), and the error answers in
//! RabbitMQ's JSON shape ([`ApiError`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::admin::{AdminRequest, AdminView};
use crate::auth::UserRegistry;
use crate::core::CoreMsg;
use wharf_broker::{BrokerError, Command, ErrorKind, GetOk, Reply};

/// How to run the management API.
#[derive(Debug, Clone)]
pub struct MgmtConfig {
    /// `host:port` to listen on (port 0 picks a free one).
    pub bind: String,
    /// Who may log in, and their tags (the same registry AMQP logins use).
    pub users: Arc<UserRegistry>,
    /// Where `/metrics` reads its figures (the Prometheus listener's own source).
    pub metrics: crate::metrics::MetricsSource,
    /// The settings the server runs with (`/api/environment`; no users or passwords).
    pub environment: serde_json::Value,
    /// The AMQP listener's address (for `/api/overview`'s listeners).
    pub amqp_addr: SocketAddr,
    /// The manual clock the server runs on when started with clock control
    /// (`--test-clock`); `None`: the clock endpoints refuse.
    pub clock: Option<wharf_clock::ManualClock>,
    /// Also serve the API over HTTPS on this listener (RabbitMQ's `management.ssl.*`), with
    /// the same router and authentication; plain HTTP stays on `bind`.
    pub tls: Option<crate::tls::TlsListener>,
}

/// The broker task's inbox; this layer sends it only `CoreMsg::Admin` and `CoreMsg::Tick`.
pub(crate) type CoreSender = mpsc::Sender<CoreMsg>;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct Api {
    config: Arc<MgmtConfig>,
    core: CoreSender,
}

impl Api {
    /// The shared state of the handlers of `config`, sending to the broker task on `core`.
    pub(crate) fn new(config: MgmtConfig, core: CoreSender) -> Self {
        Api {
            config: Arc::new(config),
            core,
        }
    }
}

/// The API of a request whose caller is an administrator (RabbitMQ's `administrator` tag):
/// 401 without valid credentials, 403 for any other user. Extract it after the path and
/// query so that those are checked first as they always were ([`AdminBody`] when there is a
/// body).
pub(crate) struct Admin(pub(crate) Api);

/// [`Admin`] for a request with a body: the body is read before the caller is checked (as
/// axum extracts a handler's arguments in order), so a refused body answers as it always did.
pub(crate) struct AdminBody(pub(crate) Api, pub(crate) Bytes);

/// The API of a request whose caller is any user with valid credentials (401 otherwise).
pub(crate) struct Authenticated(pub(crate) Api);

/// The caller's address, as axum's `ConnectInfo` gives it (its own rejection when missing).
async fn peer(parts: &mut Parts, api: &Api) -> Result<SocketAddr, Response> {
    let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, api)
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(peer)
}

impl FromRequestParts<Api> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, Response> {
        let peer = peer(parts, api).await?;
        api.admin(&parts.headers, peer)
            .map_err(IntoResponse::into_response)?;
        Ok(Admin(api.clone()))
    }
}

impl FromRequest<Api> for AdminBody {
    type Rejection = Response;

    async fn from_request(req: Request, api: &Api) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let peer = peer(&mut parts, api).await?;
        let headers = parts.headers.clone();
        let bytes = Bytes::from_request(Request::from_parts(parts, body), api)
            .await
            .map_err(IntoResponse::into_response)?;
        api.admin(&headers, peer)
            .map_err(IntoResponse::into_response)?;
        Ok(AdminBody(api.clone(), bytes))
    }
}

impl FromRequestParts<Api> for Authenticated {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, Response> {
        let peer = peer(parts, api).await?;
        api.user(&parts.headers, peer)
            .map_err(IntoResponse::into_response)?;
        Ok(Authenticated(api.clone()))
    }
}

/// What a handler answers: a response, or an error in RabbitMQ's JSON shape.
pub(crate) type ApiResult = Result<Response, ApiError>;

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
