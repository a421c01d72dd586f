//! Clock control over HTTP (`/api/test/clock`, `--test-clock` only; not part of RabbitMQ's API):
//! show, advance and set the manual clock, answering once the broker acted on what fell due.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use serde_json::{Value as JsonValue, json};

use super::api::{Admin, AdminBody, ApiError, ApiResult};
use super::reply::{body_object, ok_json};
use crate::clock_control::{self, ClockControlError};

fn clock_refused(e: &ClockControlError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

/// `GET /api/test/clock`: `{"now_ms": N}`.
pub(crate) async fn clock_show(Admin(api): Admin) -> ApiResult {
    let clock = api.config().clock.as_ref();
    let now_ms = clock
        .map(wharf_clock::Clock::now_ms)
        .ok_or_else(|| clock_refused(&ClockControlError::NotEnabled))?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}

/// `POST /api/test/clock/advance` with `{"by": "30m"}` (or milliseconds as a number): moves
/// the clock and answers once the broker has acted on every deadline passed.
pub(crate) async fn clock_advance(AdminBody(api, body): AdminBody) -> ApiResult {
    let body = body_object(&body)?;
    let by = match body.get("by") {
        Some(JsonValue::String(t)) => {
            wharf_base::parse_duration(t).map_err(|e| ApiError::BadRequest(e.to_string()))?
        }
        Some(JsonValue::Number(n)) => std::time::Duration::from_millis(
            n.as_u64()
                .ok_or_else(|| ApiError::BadRequest(format!("'by' must be a duration, got {n}")))?,
        ),
        _ => {
            return Err(ApiError::BadRequest(
                "'by' must be a duration such as \"30m\" or milliseconds".to_owned(),
            ));
        }
    };
    let now_ms =
        clock_control::advance(api.config().clock.as_ref(), by).map_err(|e| clock_refused(&e))?;
    api.tick().await?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}

/// `POST /api/test/clock/set` with `{"now_ms": N}` (never backwards).
pub(crate) async fn clock_set(AdminBody(api, body): AdminBody) -> ApiResult {
    let body = body_object(&body)?;
    let Some(to) = body.get("now_ms").and_then(JsonValue::as_u64) else {
        return Err(ApiError::BadRequest(
            "'now_ms' must be milliseconds since the epoch".to_owned(),
        ));
    };
    let now_ms =
        clock_control::set(api.config().clock.as_ref(), to).map_err(|e| clock_refused(&e))?;
    api.tick().await?;
    Ok(ok_json(json!({ "now_ms": now_ms })))
}
