//! A message's own TTL from its `expiration` property (S-TTL-2).

use crate::error::BrokerError;
use wharf_base::limits::TTL_MS_MAX;

/// Parses the `expiration` property (S-TTL-2) as RabbitMQ's `rabbit_basic:parse_expiration`:
/// an optional sign and decimal digits, 0 <= n <= 2^32-1.
///
/// # Errors
/// `PRECONDITION_FAILED` (the channel closes): `invalid expiration '<text>': <reason>`.
pub fn parse_expiration(text: &str) -> Result<u32, BrokerError> {
    let fail = |reason: String| {
        BrokerError::precondition(format!("invalid expiration '{text}': {reason}"))
    };
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, text.get(1..).unwrap_or("")),
        Some(b'+') => (false, text.get(1..).unwrap_or("")),
        _ => (false, text),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return Err(fail("{invalid_expiration,no_integer}".to_owned()));
    }
    if end < digits.len() {
        return Err(fail(format!(
            "{{leftover_string,\"{}\"}}",
            digits.get(end..).unwrap_or("")
        )));
    }
    let Ok(n) = digits.parse::<u64>() else {
        return Err(fail(format!("{{value_too_large,{digits}}}")));
    };
    if negative && n > 0 {
        return Err(fail(format!("{{value_negative,-{n}}}")));
    }
    if n > TTL_MS_MAX {
        return Err(fail(format!("{{value_too_large,{n},{TTL_MS_MAX}}}")));
    }
    u32::try_from(n).map_err(|_| fail("{value_too_large}".to_owned()))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_ttl_2_expiration_parsing() {
        assert_eq!(parse_expiration("0").unwrap(), 0);
        assert_eq!(parse_expiration("60000").unwrap(), 60000);
        assert_eq!(parse_expiration("4294967295").unwrap(), u32::MAX);
        for bad in [
            "",
            "-1",
            "1.5",
            "abc",
            "10s",
            "4294967296",
            " 1",
            "99999999999999999999",
        ] {
            let err = parse_expiration(bad).unwrap_err();
            assert_eq!(err.kind.reply_code(), 406, "{bad}");
            assert!(err.text.starts_with("invalid expiration"), "{}", err.text);
        }
    }
}
