//! Policy definitions (S-POL-1, S-POL-4): parsing and validation of a policy's JSON
//! definition into settings, and the choice of the policy that applies to a queue (S-POL-2).

use regex::Regex;

use super::classic;
use super::queue_args::{DeadLetterStrategy, Overflow, QueueSettings};
use crate::error::BrokerError;
use crate::types::{ApplyTo, PolicySpec};
use wharf_base::limits::TTL_MS_MAX;

/// A policy after validation (S-POL-1): compiled pattern and parsed definition.
#[derive(Debug, Clone)]
pub struct Policy {
    /// As set.
    pub spec: PolicySpec,
    /// Compiled pattern.
    pub regex: Regex,
    /// Parsed definition.
    pub settings: QueueSettings,
    /// The `alternate-exchange` key (an exchange policy, S-DEFS-4).
    pub alternate_exchange: Option<String>,
    /// The keys it sets that wharf accepts and ignores (S-PRIO-8).
    pub ignored: Vec<&'static str>,
}

impl Policy {
    /// True when this policy may apply to a queue named `queue`.
    pub fn matches_queue(&self, queue: &str) -> bool {
        matches!(self.spec.apply_to, ApplyTo::Queues | ApplyTo::All) && self.regex.is_match(queue)
    }

    /// True when this policy may apply to an exchange named `exchange`.
    pub fn matches_exchange(&self, exchange: &str) -> bool {
        matches!(self.spec.apply_to, ApplyTo::Exchanges | ApplyTo::All)
            && self.regex.is_match(exchange)
    }
}

/// Whether `key` is a RabbitMQ policy key for something a single wharf node has no use for:
/// classic queue mirroring (`ha-*`), queue storage modes and versions (`queue-mode`,
/// `queue-version`), leader placement (`queue-master-locator`) and federation
/// (`federation-upstream`, `federation-upstream-set`). Such keys are accepted and kept in the
/// definition (so it exports as it was given) and change nothing (S-DEFS-1); the server warns
/// about each.
pub fn noop_policy_key(key: &str) -> bool {
    key.starts_with("ha-")
        || matches!(
            key,
            "queue-mode"
                | "queue-version"
                | "queue-master-locator"
                | "federation-upstream"
                | "federation-upstream-set"
        )
}

/// Whether an operator policy may set `key` (S-POL-2): numeric limits only, not routing,
/// overflow or storage choices.
fn operator_may_set(key: &str) -> bool {
    !matches!(
        key,
        "dead-letter-exchange"
            | "dead-letter-routing-key"
            | "dead-letter-strategy"
            | "overflow"
            | "alternate-exchange"
            | "queue-mode"
    )
}

fn policy_error(name: &str, text: &str) -> BrokerError {
    BrokerError::precondition(format!("invalid policy '{name}': {text}"))
}

/// The value of policy `name`'s key `key` that `text` names, or 406 naming the key.
fn known<T>(
    name: &str,
    key: &str,
    text: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, BrokerError> {
    parse(text).ok_or_else(|| policy_error(name, &format!("'{key}' has an unknown value '{text}'")))
}

/// Validates a policy (S-POL-1): the pattern must compile; the definition must be a JSON
/// object whose keys are all known and well-typed; operator policies may only set numeric
/// limits (S-POL-2).
///
/// # Errors
/// `PRECONDITION_FAILED` naming the offending key or the pattern.
pub fn parse_policy(spec: &PolicySpec, operator: bool) -> Result<Policy, BrokerError> {
    let name = spec.name.as_str();
    if name.is_empty() {
        return Err(policy_error(name, "the name is empty"));
    }
    let regex = Regex::new(&spec.pattern).map_err(|e| {
        policy_error(
            name,
            &format!("invalid regular expression '{}': {e}", spec.pattern),
        )
    })?;
    let json: serde_json::Value = serde_json::from_str(&spec.definition)
        .map_err(|e| policy_error(name, &format!("the definition is not JSON: {e}")))?;
    let serde_json::Value::Object(map) = json else {
        return Err(policy_error(name, "the definition must be a JSON object"));
    };
    if map.is_empty() {
        return Err(policy_error(name, "the definition is empty"));
    }
    let mut s = QueueSettings::default();
    let mut alternate_exchange = None;
    let mut ignored = Vec::new();
    for (key, v) in &map {
        let int = || -> Result<u64, BrokerError> {
            v.as_u64().ok_or_else(|| {
                policy_error(
                    name,
                    &format!("'{key}' must be a non-negative integer, got {v}"),
                )
            })
        };
        let string = || -> Result<String, BrokerError> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| policy_error(name, &format!("'{key}' must be a string, got {v}")))
        };
        if operator && !operator_may_set(key) {
            return Err(policy_error(
                name,
                &format!("'{key}' is not allowed in an operator policy"),
            ));
        }
        match key.as_str() {
            "message-ttl" => {
                let n = int()?;
                let ttl = u32::try_from(n).map_err(|_| {
                    policy_error(name, &format!("'message-ttl' must be at most {TTL_MS_MAX}"))
                })?;
                s.message_ttl_ms = Some(ttl);
            }
            "expires" => {
                let n = int()?;
                if n == 0 || n > TTL_MS_MAX {
                    return Err(policy_error(
                        name,
                        &format!("'expires' must be between 1 and {TTL_MS_MAX}, got {n}"),
                    ));
                }
                s.expires_ms = Some(n);
            }
            "dead-letter-exchange" => s.dead_letter_exchange = Some(string()?),
            "alternate-exchange" => alternate_exchange = Some(string()?),
            "dead-letter-routing-key" => s.dead_letter_routing_key = Some(string()?),
            "max-length" => s.max_length = Some(int()?),
            "max-length-bytes" => s.max_length_bytes = Some(int()?),
            "delivery-limit" => s.delivery_limit = Some(int()?),
            // S-CONS-8: as `x-consumer-timeout`; the lowest wins.
            "consumer-timeout" => s.consumer_timeout_ms = Some(int()?),
            "queue-mode" | "queue-version" => {
                let key = classic::no_op_policy_key(key, v).map_err(|e| policy_error(name, &e))?;
                ignored.push(key);
            }
            "overflow" => s.overflow = Some(known(name, key, &string()?, Overflow::parse)?),
            // S-QQ-7: as `x-dead-letter-strategy`.
            "dead-letter-strategy" => {
                s.dead_letter_strategy =
                    Some(known(name, key, &string()?, DeadLetterStrategy::parse)?);
            }
            // S-DEFS-1: accepted, kept, no effect.
            k if noop_policy_key(k) => {}
            _ => {
                return Err(policy_error(
                    name,
                    &format!("'{key}' is not a recognised policy key"),
                ));
            }
        }
    }
    Ok(Policy {
        spec: spec.clone(),
        regex,
        settings: s,
        alternate_exchange,
        ignored,
    })
}

/// The policy that applies to `exchange` among `policies` (S-POL-2, S-DEFS-4), chosen as for
/// queues.
pub fn select_exchange_policy<'a>(
    policies: impl Iterator<Item = &'a Policy>,
    exchange: &str,
) -> Option<&'a Policy> {
    highest(policies.filter(|p| p.matches_exchange(exchange)))
}

/// The policy that applies to `queue` among `policies` (S-POL-2): the highest priority; ties
/// go to the greatest name, so the choice is deterministic.
pub fn select_policy<'a>(
    policies: impl Iterator<Item = &'a Policy>,
    queue: &str,
) -> Option<&'a Policy> {
    highest(policies.filter(|p| p.matches_queue(queue)))
}

fn highest<'a>(matching: impl Iterator<Item = &'a Policy>) -> Option<&'a Policy> {
    matching.max_by(|a, b| (a.spec.priority, &a.spec.name).cmp(&(b.spec.priority, &b.spec.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(def: &str) -> PolicySpec {
        PolicySpec {
            name: "p".into(),
            pattern: "^q".into(),
            apply_to: ApplyTo::Queues,
            priority: 0,
            definition: def.into(),
        }
    }

    #[test]
    fn s_defs_1_noop_keys_are_accepted_kept_and_change_nothing() {
        let def = r#"{"ha-mode": "all", "ha-sync-mode": "automatic", "queue-mode": "lazy", "queue-version": 2, "queue-master-locator": "min-masters", "federation-upstream-set": "all", "max-length": 9}"#;
        let p = parse_policy(&spec(def), false).unwrap();
        assert_eq!(p.spec.definition, def, "kept as given, for export");
        assert_eq!(
            p.settings,
            QueueSettings {
                max_length: Some(9),
                ..QueueSettings::default()
            }
        );
        assert!(noop_policy_key("ha-params"));
        assert!(!noop_policy_key("alternate-exchange"));
        assert!(!noop_policy_key("message-ttl"));
    }

    #[test]
    fn s_pol_1_definitions_are_validated() {
        let p = parse_policy(
            &spec(r#"{"message-ttl": 5, "expires": 7, "dead-letter-exchange": "dlx", "dead-letter-routing-key": "k", "max-length": 1, "max-length-bytes": 2, "overflow": "reject-publish", "delivery-limit": 3}"#),
            false,
        )
        .unwrap();
        assert_eq!(p.settings.message_ttl_ms, Some(5));
        assert_eq!(p.settings.overflow, Some(Overflow::RejectPublish));
        for (def, needle) in [
            (r#"{"foo": 1}"#, "'foo'"),
            (r#"{"message-ttl": "5"}"#, "'message-ttl'"),
            (r#"{"message-ttl": -5}"#, "'message-ttl'"),
            (r#"{"expires": 0}"#, "'expires'"),
            (r#"{"overflow": "x"}"#, "'overflow'"),
            (r#"{"max-length": 1.5}"#, "'max-length'"),
            ("[1]", "JSON object"),
            ("{", "not JSON"),
        ] {
            let err = parse_policy(&spec(def), false).unwrap_err();
            assert!(err.text.contains(needle), "{def}: {}", err.text);
        }
        let mut bad = spec(r#"{"max-length": 1}"#);
        bad.pattern = "(".into();
        assert!(
            parse_policy(&bad, false)
                .unwrap_err()
                .text
                .contains("regular expression")
        );
        let err = parse_policy(&spec(r#"{"dead-letter-exchange": "x"}"#), true).unwrap_err();
        assert!(err.text.contains("operator"));
    }

    #[test]
    fn s_pol_2_resolution_lowest_numeric_argument_wins_for_dlx() {
        let args = QueueSettings {
            message_ttl_ms: Some(100),
            dead_letter_exchange: Some("arg".into()),
            max_length: Some(10),
            ..QueueSettings::default()
        };
        let policy = QueueSettings {
            message_ttl_ms: Some(50),
            dead_letter_exchange: Some("pol".into()),
            dead_letter_routing_key: Some("polkey".into()),
            max_length: Some(20),
            overflow: Some(Overflow::RejectPublish),
            ..QueueSettings::default()
        };
        let op = QueueSettings {
            max_length: Some(5),
            message_ttl_ms: Some(70),
            ..QueueSettings::default()
        };
        let e = QueueSettings::effective(&args, Some(&policy), Some(&op));
        assert_eq!(e.message_ttl_ms, Some(50));
        assert_eq!(e.max_length, Some(5));
        assert_eq!(e.dead_letter_exchange.as_deref(), Some("arg"));
        assert_eq!(e.dead_letter_routing_key.as_deref(), Some("polkey"));
        assert_eq!(e.overflow, Some(Overflow::RejectPublish));
    }
}
