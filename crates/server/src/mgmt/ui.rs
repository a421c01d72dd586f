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
const ADMIN_JS: &str = include_str!("../../assets/ui/admin.js");
const TIME_JS: &str = include_str!("../../assets/ui/time.js");
/// A message's timeline and the dead-letter explorer (S-UI-7..10), pages of their own.
const LIFE_JS: &str = include_str!("../../assets/ui/life.js");

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

/// The dashboard's files: path, content type, content. The page is also at `/index.html`, as
/// RabbitMQ's UI has it.
const FILES: [(&str, &str, &str); 7] = [
    ("/", "text/html; charset=utf-8", INDEX_HTML),
    ("/index.html", "text/html; charset=utf-8", INDEX_HTML),
    ("/ui/app.js", "text/javascript; charset=utf-8", APP_JS),
    ("/ui/app.css", "text/css; charset=utf-8", APP_CSS),
    ("/ui/admin.js", "text/javascript; charset=utf-8", ADMIN_JS),
    ("/ui/time.js", "text/javascript; charset=utf-8", TIME_JS),
    ("/ui/life.js", "text/javascript; charset=utf-8", LIFE_JS),
];

/// The dashboard's routes: one per file of [`FILES`].
pub(crate) fn routes() -> Router<Api> {
    FILES
        .iter()
        .fold(Router::new(), |router, &(path, content_type, body)| {
            router.route(path, get(move || async move { asset(content_type, body) }))
        })
}
