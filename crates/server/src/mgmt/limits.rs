//! `GET` and `PUT /api/wharf/resource-limits` (wharf's own path: RabbitMQ changes these only
//! through `rabbitmqctl`): the memory high watermark and the free disk limit, changed at
//! runtime, applied at once and not kept across a restart (S-OPS-8). Administrators only.
//!
//! The body names what changes: `{"vm_memory_high_watermark": {"relative": 0.5}}` or
//! `{"absolute": "1GB"}`, `{"disk_free_limit": {"absolute": "50MB"}}` or
//! `{"mem_relative": 1.5}`; numbers may be JSON numbers or text. Refusals carry
//! `rabbitmqctl`'s words (400, "Bad argument…").

use serde_json::{Map, Value as JsonValue, json};

use super::api::{Admin, AdminBody, ApiError, ApiResult};
use super::reply::{body_object, ok_json};
use crate::alarm::{DiskLimit, Limits, MemoryLimit};
use crate::config::parse_bytes;

/// The limits as set and in bytes, as both endpoints answer.
fn limits_json(l: &Limits) -> JsonValue {
    let memory = match l.memory {
        MemoryLimit::Fraction(f) => json!({ "relative": f }),
        MemoryLimit::Bytes(b) => json!({ "absolute": b }),
    };
    let disk = match l.disk {
        DiskLimit::Bytes(b) => json!({ "absolute": b }),
        DiskLimit::MemRelative(f) => json!({ "mem_relative": f }),
    };
    json!({
        "vm_memory_high_watermark": memory,
        "vm_memory_limit": l.thresholds.memory_limit_bytes,
        "disk_free_limit": disk,
        "disk_free_limit_bytes": l.thresholds.disk_free_limit_bytes,
    })
}

pub(crate) async fn limits_get(Admin(api): Admin) -> ApiResult {
    Ok(ok_json(limits_json(
        &api.config().resources.alarms.limits(),
    )))
}

pub(crate) async fn limits_put(AdminBody(api, body): AdminBody) -> ApiResult {
    let map = body_object(&body)?;
    if let Some(key) = map
        .keys()
        .find(|k| *k != "vm_memory_high_watermark" && *k != "disk_free_limit")
    {
        return Err(bad(&format!("unknown setting '{key}'")));
    }
    let memory = match map.get("vm_memory_high_watermark") {
        Some(v) => Some(memory_limit(setting(v)?)?),
        None => None,
    };
    let disk = match map.get("disk_free_limit") {
        Some(v) => Some(disk_limit(setting(v)?)?),
        None => None,
    };
    let limits = api.config().resources.set(memory, disk).await;
    Ok(ok_json(limits_json(&limits)))
}

/// rabbitmqctl's refusal of an argument.
fn bad(detail: &str) -> ApiError {
    if detail.is_empty() {
        ApiError::BadRequest("Bad argument.".to_owned())
    } else {
        ApiError::BadRequest(format!("Bad argument: {detail}"))
    }
}

/// The one `{"form": value}` pair of a setting, the value as text.
fn setting(v: &JsonValue) -> Result<(&str, String), ApiError> {
    let pair = v
        .as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m: &Map<String, JsonValue>| m.iter().next());
    let Some((form, value)) = pair else {
        return Err(bad(
            "a setting is one of {\"absolute\": ...}, {\"relative\": ...}",
        ));
    };
    let text = match value {
        JsonValue::String(s) => s.trim().to_owned(),
        JsonValue::Number(n) => n.to_string(),
        _ => return Err(bad("")),
    };
    Ok((form.as_str(), text))
}

/// A byte size with RabbitMQ's units (`1GB`, `512MiB`, `100`).
fn bytes(text: &str) -> Result<u64, ApiError> {
    parse_bytes(text).map_err(|_| {
        let digits = text.trim_start_matches(|c: char| c.is_ascii_digit());
        if digits.len() < text.len() && digits.chars().all(char::is_alphabetic) {
            bad("Invalid units.")
        } else {
            bad("")
        }
    })
}

/// A finite number, or rabbitmqctl's "Bad argument.".
fn number(text: &str) -> Result<f64, ApiError> {
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| bad(""))
}

fn memory_limit((form, text): (&str, String)) -> Result<MemoryLimit, ApiError> {
    match form {
        "relative" => {
            let f = number(&text)?;
            if (0.0..=1.0).contains(&f) {
                Ok(MemoryLimit::Fraction(f))
            } else {
                Err(bad(
                    "The threshold should be a fraction between 0.0 and 1.0",
                ))
            }
        }
        "absolute" => bytes(&text).map(MemoryLimit::Bytes),
        other => Err(bad(&format!("unknown form '{other}'"))),
    }
}

fn disk_limit((form, text): (&str, String)) -> Result<DiskLimit, ApiError> {
    match form {
        "absolute" => bytes(&text).map(DiskLimit::Bytes),
        "mem_relative" => {
            let f = number(&text)?;
            if f >= 0.0 {
                Ok(DiskLimit::MemRelative(f))
            } else {
                Err(bad(""))
            }
        }
        other => Err(bad(&format!("unknown form '{other}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: ApiError) -> String {
        match e {
            ApiError::BadRequest(r) => r,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn s_ops_8_settings_parse_as_rabbitmqctl_reads_them() {
        let m = |form: &str, t: &str| memory_limit((form, t.to_owned()));
        let d = |form: &str, t: &str| disk_limit((form, t.to_owned()));
        assert_eq!(m("relative", "0.5").unwrap(), MemoryLimit::Fraction(0.5));
        assert_eq!(
            m("absolute", "1GB").unwrap(),
            MemoryLimit::Bytes(1_000_000_000)
        );
        assert_eq!(m("absolute", "100").unwrap(), MemoryLimit::Bytes(100));
        assert_eq!(
            reason(m("relative", "1.5").unwrap_err()),
            "Bad argument: The threshold should be a fraction between 0.0 and 1.0"
        );
        assert_eq!(reason(m("relative", "abc").unwrap_err()), "Bad argument.");
        assert_eq!(
            reason(m("absolute", "1gb").unwrap_err()),
            "Bad argument: Invalid units."
        );
        assert_eq!(reason(m("absolute", "xyz").unwrap_err()), "Bad argument.");
        assert_eq!(d("absolute", "50MB").unwrap(), DiskLimit::Bytes(50_000_000));
        assert_eq!(
            d("mem_relative", "1.5").unwrap(),
            DiskLimit::MemRelative(1.5)
        );
        assert_eq!(reason(d("absolute", "-5").unwrap_err()), "Bad argument.");
        assert_eq!(
            reason(d("mem_relative", "abc").unwrap_err()),
            "Bad argument."
        );
    }
}
