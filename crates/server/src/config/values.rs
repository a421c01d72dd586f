//! Setting values: byte sizes with RabbitMQ's units, the memory limit (bytes or a fraction
//! of RAM), and the fsync policy.

use super::error::{ConfigError, invalid};
use super::file::SizeSetting;
use crate::alarm::MemoryLimit;

/// Parses a byte size with RabbitMQ's units: `k`/`KiB`, `M`/`MiB`, `G`/`GiB` are powers of
/// 1024, `kB`/`MB`/`GB` powers of 1000; no unit means bytes.
///
/// # Errors
/// The text is not a number with one of those units, or overflows.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 50000000, \"50MB\", \"1GiB\")"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "kiB" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("unknown unit '{other}' in '{text}'")),
    };
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// The disk limit from a setting (bytes or a unit string; a fraction makes no sense here).
pub(super) fn disk_limit(setting: &SizeSetting) -> Result<u64, ConfigError> {
    byte_size("disk_free_limit", setting)
}

/// A number of bytes from a setting of `key` (bytes or a unit string, not a fraction).
pub(super) fn byte_size(key: &str, setting: &SizeSetting) -> Result<u64, ConfigError> {
    match setting {
        SizeSetting::Bytes(b) => Ok(*b),
        SizeSetting::Text(t) => parse_bytes(t).map_err(|e| invalid(key, e)),
        SizeSetting::Fraction(f) => Err(invalid(key, format!("{f} is not a number of bytes"))),
    }
}

/// When the write-ahead log is made durable. Only one policy exists: every publisher confirm,
/// definition reply and acknowledged settle waits for `fdatasync` (S-DUR-3). A policy that
/// confirms after `write()` alone would need the log's writer and the broker task's release
/// gate to change together, and would lose confirmed messages on power loss; it is not
/// offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// `fsync = "always"`: fdatasync before every confirm (group commit batches them).
    #[default]
    Always,
}

impl FsyncPolicy {
    /// Parses the `fsync` key.
    ///
    /// # Errors
    /// Anything but `"always"`, with the reason.
    pub fn parse(text: &str) -> Result<FsyncPolicy, ConfigError> {
        match text {
            "always" => Ok(FsyncPolicy::Always),
            other => Err(invalid(
                "fsync",
                format!(
                    "'{other}' is not supported: only \"always\" (every confirm waits for \
                     fdatasync; confirming earlier could lose confirmed messages on \
                     power loss)"
                ),
            )),
        }
    }
}

/// The memory limit from a setting: a fraction (number with a point, or such text) or bytes.
pub(super) fn memory_limit(setting: &SizeSetting) -> Result<MemoryLimit, ConfigError> {
    match setting {
        SizeSetting::Bytes(b) => Ok(MemoryLimit::Bytes(*b)),
        SizeSetting::Fraction(f) => Ok(MemoryLimit::Fraction(*f)),
        SizeSetting::Text(t) if t.contains('.') => t
            .trim()
            .parse::<f64>()
            .map(MemoryLimit::Fraction)
            .map_err(|_| invalid("memory_high_watermark", format!("'{t}' is not a fraction"))),
        SizeSetting::Text(t) => parse_bytes(t)
            .map(MemoryLimit::Bytes)
            .map_err(|e| invalid("memory_high_watermark", e)),
    }
}
