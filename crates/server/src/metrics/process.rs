//! The process's file descriptors (`rabbitmq_process_open_fds`, `rabbitmq_process_max_fds`),
//! read from `/proc/self` on Linux; `None` elsewhere or when it cannot be read, and the
//! family is then left out rather than reported as 0.

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    u64::try_from(entries.count()).ok()
}

/// The soft limit on open file descriptors (`Max open files` in `/proc/self/limits`).
pub(crate) fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    max_fds_in(&limits)
}

fn max_fds_in(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.strip_prefix("Max open files")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max processes             63455                63455                processes\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(max_fds_in(text), Some(1024));
        assert_eq!(max_fds_in("Max open files unlimited unlimited files"), None);
    }
}
