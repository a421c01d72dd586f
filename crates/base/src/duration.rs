//! Durations as people write them (`250ms`, `30m`, `1h30m`): the fixture protocol, the
//! management API's clock control and `wharfctl clock advance` all take this one form.

use std::time::Duration;

/// A duration that cannot be parsed (see [`parse_duration`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a duration: write a number and a unit (ms, s, m, h, d), e.g. 30m or 1h30m")]
pub struct DurationError(pub String);

/// Parses a duration as the fixture protocol and `wharfctl clock advance` take it: one or more
/// `<number><unit>` parts with units `ms`, `s`, `m`, `h`, `d`, e.g. `250ms`, `10s`, `30m`,
/// `1h30m`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(wharf_base::parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(wharf_base::parse_duration("30").is_err());
/// ```
///
/// # Errors
/// Anything else, or a total that overflows.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let bad = || DurationError(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let number: u64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let part = number.checked_mul(unit_ms).ok_or_else(bad)?;
        total_ms = total_ms.checked_add(part).ok_or_else(bad)?;
        rest = tail;
    }
    Ok(Duration::from_millis(total_ms))
}
