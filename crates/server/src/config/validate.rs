//! [`Config::validate`]: ports, heartbeats, names, duplicate users, and the limits a
//! configuration may lower but never raise (STYLE 3.2).

use std::collections::BTreeSet;

use super::error::{ConfigError, invalid};
use super::resolved::Config;
use crate::alarm::MemoryLimit;

use wharf_base::limits;

/// A vhost or user name longer than this cannot travel in a short string.
const NAME_BYTES_MAX: usize = 255;

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(invalid(
            key,
            format!("longer than {NAME_BYTES_MAX} bytes ({})", name.len()),
        ));
    }
    Ok(())
}

impl Config {
    /// Refuses out-of-range ports and heartbeats, empty or over-long names, duplicate users.
    /// Port 0 is allowed: the system picks a free port and the log names it.
    ///
    /// # Errors
    /// The first offending key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("port", self.port),
            ("mgmt_port", self.mgmt_port),
            ("prometheus_port", self.prometheus_port.unwrap_or(0)),
            ("heartbeat_secs", self.heartbeat_secs),
            ("tls.port", self.tls.as_ref().map_or(0, |t| t.port)),
            (
                "mgmt_tls.port",
                self.mgmt_tls.as_ref().map_or(0, |t| t.port),
            ),
        ] {
            if u16::try_from(value).is_err() {
                return Err(invalid(key, format!("{value} is above 65535")));
            }
        }
        if self.bind.split(',').any(|host| host.trim().is_empty()) {
            return Err(invalid(
                "bind",
                "must not be empty (nor hold an empty host)",
            ));
        }
        if self.cluster_listen.is_some() != self.cluster_seeds.is_some() {
            return Err(invalid(
                "cluster_listen",
                "cluster_listen and cluster_seeds go together (the node's own address is one of the seeds)",
            ));
        }
        self.validate_limits()?;
        let mut seen = BTreeSet::new();
        for (i, u) in self.users.iter().enumerate() {
            check_name(&format!("users[{i}].name"), &u.name)?;
            if !seen.insert(u.name.as_str()) {
                return Err(invalid(
                    format!("users[{i}].name"),
                    format!("user '{}' is listed twice", u.name),
                ));
            }
            for (j, v) in u.vhosts.iter().enumerate() {
                check_name(&format!("users[{i}].vhosts[{j}]"), v)?;
            }
        }
        for (i, v) in self.vhosts.iter().enumerate() {
            check_name(&format!("vhosts[{i}].name"), v)?;
        }
        Ok(())
    }

    /// Limits may lower the hard bounds of `wharf_base::limits`, never raise them (STYLE 3.2).
    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (key, value, min, max) in [
            (
                "connection_max",
                self.connection_max,
                1,
                u64::from(limits::CONNECTIONS_MAX),
            ),
            (
                "channel_max",
                self.channel_max,
                1,
                u64::from(limits::CHANNELS_PER_CONNECTION_MAX),
            ),
            (
                "frame_max",
                self.frame_max,
                u64::from(limits::FRAME_BYTES_MIN),
                u64::from(limits::FRAME_BYTES_MAX),
            ),
            (
                "max_message_size",
                self.max_message_size,
                1,
                u64::from(limits::MESSAGE_BODY_BYTES_MAX),
            ),
            (
                "unacked_per_channel_max",
                self.unacked_per_channel_max,
                1,
                u64::from(limits::UNACKED_PER_CHANNEL_MAX),
            ),
            // S-FLOW-1: 0 turns publisher flow control off.
            (
                "flow_ready_high",
                self.flow_ready_high,
                0,
                limits::FLOW_READY_HIGH_MAX as u64,
            ),
            // S-CONS-9: positive, as RabbitMQ's `non_zero_positive_integer`.
            ("consumer_timeout", self.consumer_timeout_ms, 1, u64::MAX),
        ] {
            if !(min..=max).contains(&value) {
                return Err(invalid(
                    key,
                    format!(
                        "{value} is outside {min}..={max} (config may lower a limit, not raise it)"
                    ),
                ));
            }
        }
        let (low, high) = (
            limits::CHECKPOINT_LOG_BYTES_MIN_LOWEST,
            limits::CHECKPOINT_LOG_BYTES_MIN_HIGHEST,
        );
        if !(low..=high).contains(&self.checkpoint_log_bytes_min) {
            return Err(invalid(
                "checkpoint_log_bytes_min",
                format!(
                    "{} is outside {low}..={high} bytes (1 MiB to 4 GiB)",
                    self.checkpoint_log_bytes_min
                ),
            ));
        }
        match self.memory_high_watermark {
            MemoryLimit::Fraction(f) if !(f > 0.0 && f <= 1.0) => Err(invalid(
                "memory_high_watermark",
                format!("the fraction {f} is outside (0, 1]"),
            )),
            MemoryLimit::Bytes(0) => Err(invalid("memory_high_watermark", "must be positive")),
            _ => Ok(()),
        }
    }
}
