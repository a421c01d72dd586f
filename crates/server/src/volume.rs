//! The log sized for the volume the data directory is on (S-DISK-5): segment size, the
//! checkpoint trigger and the largest message follow the volume, with a warning at start
//! when it is small. Depends on `rustix` (statvfs) and the server's configuration.

use std::io;

use tracing::warn;

use crate::server_config::ServerConfig;
use wharf_base::limits;

/// How the log is sized for the volume the data directory is on (S-DISK-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumePlan {
    /// Segment size: an eighth of the volume, rounded down to a power of two, between
    /// [`VOLUME_SEGMENT_BYTES_MIN`] and `limits::SEGMENT_BYTES_MAX`.
    pub segment_bytes: u64,
    /// The checkpoint trigger's floor: the configured one, or an eighth of the volume.
    pub checkpoint_log_bytes_min: u64,
    /// The largest message body: the configured one, or half of an eighth of the volume
    /// (rounded down to a power of two, at least half a smallest segment): a record larger
    /// than a segment gets a segment of its own (S-BIG-3), so a body is bounded by the
    /// volume, not by the segment size.
    pub message_bytes_max: u32,
}

/// The smallest segment a real volume gets (tests of the log itself go lower).
pub const VOLUME_SEGMENT_BYTES_MIN: u64 = 1024 * 1024;
/// Room a record needs beyond its body (properties, headers, routing), as in `limits`.
const RECORD_OVERHEAD_BYTES: u64 = 256 * 1024;

/// The plan for a volume of `total_bytes`, given the configured checkpoint floor and message
/// size limit. A volume of 512 MiB or more gets the default 64 MiB segments.
pub fn plan_for_volume(total_bytes: u64, checkpoint_min: u64, message_max: u32) -> VolumePlan {
    let eighth = (total_bytes / 8).max(1);
    let power = 1u64 << eighth.ilog2();
    let segment_bytes = power.clamp(VOLUME_SEGMENT_BYTES_MIN, limits::SEGMENT_BYTES_MAX);
    let body_fits = (power.max(VOLUME_SEGMENT_BYTES_MIN) / 2).saturating_sub(RECORD_OVERHEAD_BYTES);
    VolumePlan {
        segment_bytes,
        checkpoint_log_bytes_min: checkpoint_min
            .min(eighth.max(limits::CHECKPOINT_LOG_BYTES_MIN_LOWEST)),
        message_bytes_max: message_max.min(u32::try_from(body_fits).unwrap_or(u32::MAX)),
    }
}

/// Sizes the log for the data directory's volume (S-DISK-5): segments, preallocation (which
/// never exceeds a segment), the checkpoint trigger and the largest message follow the
/// volume, with a clear warning at start when it is small. Returns the segment size. A
/// configured `storage` (a simulated disk) keeps the defaults, or its configured
/// `storage_segment_bytes`.
///
/// # Errors
/// The data directory cannot be created or its file system measured.
pub fn fit_to_volume(config: &mut ServerConfig) -> io::Result<u64> {
    if config.storage.is_some() {
        return Ok(config
            .storage_segment_bytes
            .unwrap_or(limits::SEGMENT_BYTES_MAX));
    }
    std::fs::create_dir_all(&config.data_dir)?;
    let st = rustix::fs::statvfs(&config.data_dir)?;
    let total = st.f_blocks.saturating_mul(st.f_frsize);
    let plan = plan_for_volume(
        total,
        config.checkpoint_log_bytes_min,
        config.message_bytes_max,
    );
    if plan.segment_bytes < limits::SEGMENT_BYTES_MAX {
        let usable = total
            .saturating_sub(config.disk_free_limit_bytes)
            .saturating_sub(2 * plan.segment_bytes);
        warn!(
            data_dir = %config.data_dir.display(),
            volume_bytes = total,
            segment_bytes = plan.segment_bytes,
            disk_free_limit_bytes = config.disk_free_limit_bytes,
            usable_bytes = usable,
            message_bytes_max = plan.message_bytes_max,
            "the data directory's volume is small: log segments and the largest message are \
             scaled down to it, and publishers are blocked once the free space less one \
             segment falls below disk_free_limit"
        );
    }
    config.checkpoint_log_bytes_min = plan.checkpoint_log_bytes_min;
    config.message_bytes_max = plan.message_bytes_max;
    Ok(plan.segment_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_disk_5_segments_and_messages_follow_the_volume() {
        const MIB: u64 = 1024 * 1024;
        let default = limits::MESSAGE_BODY_BYTES_DEFAULT;
        let big = plan_for_volume(1 << 40, 64 * MIB, default);
        assert_eq!(big.segment_bytes, limits::SEGMENT_BYTES_MAX);
        assert_eq!(big.checkpoint_log_bytes_min, 64 * MIB);
        assert_eq!(
            big.message_bytes_max, default,
            "larger than a segment (S-BIG-3)"
        );
        let gib = plan_for_volume(1 << 30, 64 * MIB, default);
        assert_eq!(gib.segment_bytes, limits::SEGMENT_BYTES_MAX);
        assert_eq!(gib.message_bytes_max, 64 * 1024 * 1024 - 256 * 1024);
        let small = plan_for_volume(64 * MIB, 64 * MIB, 16 * 1024 * 1024);
        assert_eq!(small.segment_bytes, 8 * MIB);
        assert_eq!(small.checkpoint_log_bytes_min, 8 * MIB);
        assert_eq!(small.message_bytes_max, 4 * 1024 * 1024 - 256 * 1024);
        let mid = plan_for_volume(256 * MIB, 64 * MIB, 16 * 1024 * 1024);
        assert_eq!(mid.segment_bytes, 32 * MIB);
        // The largest message's record takes at most a sixteenth of the volume (half a
        // smallest segment on the tiniest ones).
        for total in [MIB, 3 * MIB, 64 * MIB, 100 * MIB, 1 << 30] {
            let p = plan_for_volume(total, 64 * MIB, u32::MAX);
            let bound = (total / 16).max(VOLUME_SEGMENT_BYTES_MIN / 2);
            assert!(
                u64::from(p.message_bytes_max) + 256 * 1024 <= bound,
                "{p:?}"
            );
            assert!(p.segment_bytes >= VOLUME_SEGMENT_BYTES_MIN);
        }
    }
}
