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
use wharf_broker::{BrokerError, Command, ErrorKind, GetOk, QueueKind, Reply};

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
    /// The AMQPS (AMQP over TLS) listener's address, when it listens (`amqp/ssl`).
    pub amqps_addr: Option<SocketAddr>,
    /// The Prometheus listener's address, when it listens (`/api/overview`'s listeners).
    pub prometheus_addr: Option<SocketAddr>,
    /// The resource limits, changed at runtime by `PUT /api/wharf/resource-limits`.
    pub resources: crate::alarm::ResourceControl,
    /// The manual clock the server runs on when started with clock control
    /// (`--test-clock`); `None`: the clock endpoints refuse.
    pub clock: Option<wharf_clock::ManualClock>,
    /// The data directory, read (never written) by a message's timeline (S-UI-7); `None`:
    /// the timeline answers 404.
    pub data_dir: Option<std::path::PathBuf>,
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
    /// This API's listeners: the plain HTTP one, then the HTTPS one if any.
    listeners: Arc<[SocketAddr]>,
    /// The sampled message rates (`message_stats`' `*_details`).
    pub(crate) rates: Arc<super::rates::Rates>,
}

impl Api {
    /// The shared state of the handlers of `config`, listening on `listeners` (plain HTTP,
    /// then HTTPS), sending to the broker task on `core`.
    pub(crate) fn new(config: MgmtConfig, core: CoreSender, listeners: &[SocketAddr]) -> Self {
        Api {
            config: Arc::new(config),
            core,
            listeners: listeners.into(),
            rates: Arc::default(),
        }
    }

    /// Every listener of the server with RabbitMQ's protocol name (`amqp`, `amqp/ssl`,
    /// `http`, `https`, `http/prometheus`), as `/api/overview` lists them.
    pub(crate) fn listeners(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut all = vec![("amqp", self.config.amqp_addr)];
        all.extend(self.config.amqps_addr.map(|a| ("amqp/ssl", a)));
        for (i, addr) in self.listeners.iter().enumerate() {
            all.push((if i == 0 { "http" } else { "https" }, *addr));
        }
        all.extend(self.config.prometheus_addr.map(|a| ("http/prometheus", a)));
        all
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

/// The API of a request whose caller may use the management API at all: any of RabbitMQ's
/// management tags (`management`, `policymaker`, `monitoring`, `administrator`); 401 "Not
/// management user" otherwise (S-MGMT-1). Carries who it is.
pub(crate) struct Authenticated(pub(crate) Api, pub(crate) Principal);

/// [`Authenticated`] for a request with a body (read before the caller is checked, as for
/// [`AdminBody`]). What the caller may change is decided by the handler, once it knows the
/// vhost and the broker command ([`Api::permit`], [`Api::policymaker`]).
pub(crate) struct AuthenticatedBody(pub(crate) Api, pub(crate) Principal, pub(crate) Bytes);

/// How a refused AMQP permission is answered (S-MGMT-1), as RabbitMQ's two ways of running
/// an API write as its caller answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// A declare, delete, bind or unbind (RabbitMQ runs the method as the user): 401
    /// "Access refused.".
    Method,
    /// A publish, get or purge (RabbitMQ opens a channel as the user): 401 with the text the
    /// channel was closed with (`ACCESS_REFUSED - write access to exchange ...`).
    Channel,
}

/// The API of a read-only request and what its caller may see (S-MGMT-1): every vhost for
/// `administrator` and `monitoring`, the vhosts the user has permissions on for `management`
/// and `policymaker`.
pub(crate) struct Reader(pub(crate) Api, pub(crate) Scope);

/// The API of a request only `monitoring` and `administrator` users may make (node details):
/// 401 "Not monitor user" otherwise.
pub(crate) struct Monitor(pub(crate) Api);

/// Which vhosts a reader sees.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// All of them.
    All,
    /// A `management` user: the vhosts it has permissions on, and its own connections.
    User {
        /// The user's name.
        name: String,
        /// The vhosts it holds a permission on.
        vhosts: Vec<String>,
    },
}

impl Scope {
    /// Whether `vhost` is visible.
    pub(crate) fn sees(&self, vhost: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::User { vhosts, .. } => vhosts.iter().any(|x| x == vhost),
        }
    }

    /// Whether a connection (channel, consumer) of `user` is visible: a `management` user
    /// sees only its own, as in RabbitMQ.
    pub(crate) fn sees_user(&self, user: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::User { name, .. } => name == user,
        }
    }

    /// 401 "User not authorised to access virtual host" for a vhost outside the scope, as
    /// RabbitMQ answers a management user naming another vhost.
    pub(crate) fn check(&self, vhost: &str) -> Result<(), ApiError> {
        if self.sees(vhost) {
            Ok(())
        } else {
            Err(ApiError::NotAuthorised(
                "User not authorised to access virtual host",
            ))
        }
    }
}

/// RabbitMQ's tags that open the management API.
const MANAGEMENT_TAGS: [&str; 4] = ["administrator", "monitoring", "policymaker", "management"];

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

/// Reads a request's body, then checks its caller with `check` (the body first, so that a
/// refused body answers as it always did).
async fn body_then<T>(
    req: Request,
    api: &Api,
    check: fn(&Api, &HeaderMap, SocketAddr) -> Result<T, ApiError>,
) -> Result<(T, Bytes), Response> {
    let (mut parts, body) = req.into_parts();
    let peer = peer(&mut parts, api).await?;
    let headers = parts.headers.clone();
    let bytes = Bytes::from_request(Request::from_parts(parts, body), api)
        .await
        .map_err(IntoResponse::into_response)?;
    let who = check(api, &headers, peer).map_err(IntoResponse::into_response)?;
    Ok((who, bytes))
}

impl FromRequest<Api> for AdminBody {
    type Rejection = Response;

    async fn from_request(req: Request, api: &Api) -> Result<Self, Response> {
        let (_, bytes) = body_then(req, api, Api::admin).await?;
        Ok(AdminBody(api.clone(), bytes))
    }
}

impl FromRequest<Api> for AuthenticatedBody {
    type Rejection = Response;

    async fn from_request(req: Request, api: &Api) -> Result<Self, Response> {
        let (who, bytes) = body_then(req, api, Api::management_user).await?;
        Ok(AuthenticatedBody(api.clone(), who, bytes))
    }
}

impl FromRequestParts<Api> for Authenticated {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, Response> {
        let peer = peer(parts, api).await?;
        let who = api
            .management_user(&parts.headers, peer)
            .map_err(IntoResponse::into_response)?;
        Ok(Authenticated(api.clone(), who))
    }
}

impl FromRequestParts<Api> for Reader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, Response> {
        let Authenticated(api, who) = Authenticated::from_request_parts(parts, api).await?;
        let scope = api.scope_of(who);
        Ok(Reader(api, scope))
    }
}

impl FromRequestParts<Api> for Monitor {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, Response> {
        let Authenticated(api, who) = Authenticated::from_request_parts(parts, api).await?;
        if who.has_tag("administrator") || who.has_tag("monitoring") {
            Ok(Monitor(api))
        } else {
            Err(ApiError::NotAuthorised("Not monitor user").into_response())
        }
    }
}

/// A refused permission answered as `via` says.
fn refused(via: Via, text: &str) -> ApiError {
    match via {
        Via::Method => ApiError::NotAuthorised("Access refused."),
        Via::Channel => ApiError::AccessRefused(format!("ACCESS_REFUSED - {text}")),
    }
}

/// What a handler answers: a response, or an error in RabbitMQ's JSON shape.
pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) use crate::auth::Principal;

/// An error answer, in RabbitMQ's JSON shape.
#[derive(Debug)]
pub enum ApiError {
    /// 401: no or wrong credentials.
    Unauthorized,
    /// 401 `not_authorised` with RabbitMQ's reason: the user lacks the tag or the vhost
    /// access the request needs (RabbitMQ answers these with 401 too, not 403).
    NotAuthorised(&'static str),
    /// 401 `not_authorised` with the text an AMQP channel was refused with ([`Via::Channel`]).
    AccessRefused(String),
    /// Another answer of RabbitMQ's: status, `error` and `reason`.
    Coded(u16, &'static str, String),
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
            // Not done after all: the cluster did not commit it (S-CLU-53).
            ErrorKind::InternalError => ApiError::Coded(500, "internal_error", e.text),
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
                "Login failed".to_owned(),
            ),
            ApiError::NotAuthorised(reason) => (
                StatusCode::UNAUTHORIZED,
                "not_authorised",
                reason.to_owned(),
            ),
            ApiError::AccessRefused(reason) => (StatusCode::UNAUTHORIZED, "not_authorised", reason),
            ApiError::Coded(status, error, reason) => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                error,
                reason,
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
/// user's tags decide what it may do (S-MGMT-1). The one place that decides who a request is.
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
    users
        .check(name, password, peer)
        .map_err(|_| ApiError::Unauthorized)
}

impl Api {
    /// The caller, who must be an administrator.
    pub(crate) fn admin(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Principal, ApiError> {
        let who = authenticate(headers, peer, &self.config.users)?;
        if who.has_tag("administrator") {
            Ok(who)
        } else if MANAGEMENT_TAGS.iter().any(|t| who.has_tag(t)) {
            Err(ApiError::NotAuthorised("Not administrator user"))
        } else {
            Err(ApiError::NotAuthorised("Not management user"))
        }
    }

    /// The caller, who must hold one of the management tags: 401 "Not management user"
    /// otherwise.
    pub(crate) fn management_user(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Principal, ApiError> {
        let who = self.user(headers, peer)?;
        if MANAGEMENT_TAGS.iter().any(|t| who.has_tag(t)) {
            Ok(who)
        } else {
            Err(ApiError::NotAuthorised("Not management user"))
        }
    }

    /// S-MGMT-1: whether `who` may run `cmd` in `vhost` through the API, as RabbitMQ runs an
    /// API write as its caller: the vhost's access ([`Api::vhost_access`]), then the AMQP
    /// permissions the command needs and the topic permissions it uses, refused as `via`
    /// says. An administrator's writes are not checked against its AMQP permissions.
    pub(crate) async fn permit(
        &self,
        who: &Principal,
        vhost: &str,
        cmd: &Command,
        via: Via,
    ) -> Result<(), ApiError> {
        self.permit_needs(who, vhost, &crate::auth::required_permissions(cmd), via)?;
        let Some((vhost, exchange, key, write)) = crate::auth::topic_use(cmd) else {
            return Ok(());
        };
        let snapshot = self.config.users.snapshot();
        if who.has_tag("administrator") || !snapshot.restricts_topic(&who.name, vhost, exchange) {
            return Ok(());
        }
        let (v, x) = (vhost.to_owned(), exchange.to_owned());
        let kind = self
            .query(move |view| view.broker.exchange_kind(&v, &x))
            .await?;
        if kind != Some(wharf_broker::ExchangeKind::Topic)
            || snapshot.topic_permits(&who.name, vhost, exchange, key, write)
        {
            return Ok(());
        }
        Err(refused(
            via,
            &crate::auth::topic_refusal_text(&who.name, vhost, exchange, key),
        ))
    }

    /// [`Api::permit`] for an operation given by the permissions it needs (no topic).
    pub(crate) fn permit_needs(
        &self,
        who: &Principal,
        vhost: &str,
        needs: &[crate::auth::Need],
        via: Via,
    ) -> Result<(), ApiError> {
        self.vhost_access(who, vhost)?;
        if who.has_tag("administrator") {
            return Ok(());
        }
        crate::auth::PermissionCache::default()
            .authorize(&self.config.users, &who.name, vhost, needs)
            .map_err(|text| refused(via, &text))
    }

    /// RabbitMQ's `is_authorized_vhost`: an administrator may name any vhost; another user
    /// only one it holds a permission on (401 "User not authorised to access virtual host").
    /// A vhost that does not exist passes, so that the request answers 404.
    pub(crate) fn vhost_access(&self, who: &Principal, vhost: &str) -> Result<(), ApiError> {
        let snapshot = self.config.users.snapshot();
        if who.has_tag("administrator")
            || !snapshot.has_vhost(vhost)
            || snapshot.may_open(&who.name, vhost)
        {
            Ok(())
        } else {
            Err(ApiError::NotAuthorised(
                "User not authorised to access virtual host",
            ))
        }
    }

    /// RabbitMQ's `is_authorized_policies`, for policies and runtime parameters: an
    /// administrator, or a `policymaker` with access to `vhost` (any vhost when `None`); 401
    /// "User not authorised to access object" otherwise.
    pub(crate) fn policymaker(&self, who: &Principal, vhost: Option<&str>) -> Result<(), ApiError> {
        let allowed = who.has_tag("administrator")
            || (who.has_tag("policymaker")
                && vhost.is_none_or(|v| self.vhost_access(who, v).is_ok()));
        if allowed {
            Ok(())
        } else {
            Err(ApiError::NotAuthorised(
                "User not authorised to access object",
            ))
        }
    }

    /// What `who` may read: every vhost for `administrator` and `monitoring`, the vhosts it
    /// holds a permission on otherwise.
    pub(crate) fn scope_of(&self, who: Principal) -> Scope {
        if who.has_tag("administrator") || who.has_tag("monitoring") {
            Scope::All
        } else {
            Scope::User {
                vhosts: self.config.users.snapshot().vhosts_of(&who.name),
                name: who.name,
            }
        }
    }

    /// 401 "Not administrator user" unless `who` is an administrator.
    pub(crate) fn administrator(who: &Principal) -> Result<(), ApiError> {
        if who.has_tag("administrator") {
            Ok(())
        } else {
            Err(ApiError::NotAuthorised("Not administrator user"))
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

    /// This node's name (`wharf@localhost`, or its name in its cluster, S-CLU-40).
    pub(crate) fn node_name(&self) -> &str {
        &self.config.metrics.node
    }

    /// The quorum queues' group this node is a member of.
    pub(crate) fn group(&self) -> Option<&wharf_cluster::QueueGroup> {
        self.config.metrics.group.as_ref()
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

    pub(crate) async fn send(&self, req: AdminRequest) -> Result<(), ApiError> {
        self.core
            .send(CoreMsg::Admin(req))
            .await
            .map_err(|_| ApiError::Unavailable)
    }

    /// Runs a broker command through the broker task; answered once durable.
    pub(crate) async fn command(&self, cmd: Command) -> Result<Reply, ApiError> {
        Ok(self.command_as_broker(cmd).await??)
    }

    /// [`Api::command`] with the broker's refusal as it is (for answers that show its text).
    pub(crate) async fn command_as_broker(
        &self,
        cmd: Command,
    ) -> Result<Result<Reply, BrokerError>, ApiError> {
        let (done, answer) = oneshot::channel();
        self.send(AdminRequest::Command {
            cmd: Box::new(cmd),
            done,
        })
        .await?;
        answer.await.map_err(|_| ApiError::Unavailable)
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

    /// Reads queue `queue` of `vhost` with `f` (the broker and this node's clock): from the
    /// live broker, or, for a quorum queue the live broker does not hold (on a follower: all
    /// of them), from the group's committed state (S-CLU-42). `None` when neither has it.
    pub(crate) async fn read_queue<T, F>(
        &self,
        vhost: &str,
        queue: &str,
        f: F,
    ) -> Result<Option<(u64, T)>, ApiError>
    where
        T: Send + 'static,
        F: Fn(&wharf_broker::Broker, u64) -> Option<T> + Clone + Send + 'static,
    {
        let live = f.clone();
        let (now, found) = self
            .query(move |view| (view.now_ms, live(view.broker, view.now_ms)))
            .await?;
        if let Some(found) = found {
            return Ok(Some((now, found)));
        }
        let committed = self.group().and_then(|group| {
            group.machine.with(|m| {
                let quorum = m.broker().queue_kind(vhost, queue) == Some(QueueKind::Quorum);
                quorum.then(|| f(m.broker(), now)).flatten()
            })
        });
        Ok(committed.map(|found| (now, found)))
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
