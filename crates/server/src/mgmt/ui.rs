//! The web dashboard's files, served at `/` on the management port (S-UI-6): one HTML page,
//! its script and its style sheet, compiled into the binary (`include_str!`), with no build
//! step and nothing fetched from elsewhere. The page keeps the credentials in the browser and
//! sends them as HTTP basic on each API call, as RabbitMQ's UI does; these files themselves
//! need no login (they hold no data).

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::api::Api;

const INDEX_HTML: &str = include_str!("../../assets/ui/index.html");
const APP_JS: &str = include_str!("../../assets/ui/app.js");
const APP_CSS: &str = include_str!("../../assets/ui/app.css");

/// Only what the page itself serves: scripts, styles and API calls from this origin.
const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                   base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// One static file with its content type; revalidated on each load (`no-cache`) so that a
/// new wharf's page is never mixed with an old script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
        .into_response()
}

/// The dashboard's routes: the page at `/` (and `/index.html`, as RabbitMQ's UI has) and its
/// two files under `/ui/`.
pub(crate) fn routes() -> Router<Api> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/index.html",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}
