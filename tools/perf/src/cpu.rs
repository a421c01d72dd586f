//! CPU time of a process from `/proc/<pid>/stat` (Linux), used to report the broker's CPU cost
//! per message and the generator's own CPU use. Depends on std only.

use std::fs;

/// Clock ticks per second of `/proc/<pid>/stat`'s utime and stime (`USER_HZ`). Linux fixes it at
/// 100 on every architecture we run on; reading `sysconf(_SC_CLK_TCK)` would need `unsafe`.
pub const TICKS_PER_S: f64 = 100.0;

/// User plus system CPU seconds consumed so far by every thread of process `pid`, or `None` if
/// the process is gone or the file is unreadable.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_s(&stat)
}

/// CPU seconds of this process.
pub fn self_cpu_s() -> Option<f64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat_cpu_s(&stat)
}

/// Parses utime + stime (fields 14 and 15) out of a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may itself contain spaces or parentheses, so fields are
/// counted from the last `)`.
pub fn parse_stat_cpu_s(stat: &str) -> Option<f64> {
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    // After ")" the fields start at field 3 (state); utime is field 14, so index 11.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime_ticks: u64 = fields.next()?.parse().ok()?;
    let stime_ticks: u64 = fields.next()?.parse().ok()?;
    #[expect(
        clippy::cast_precision_loss,
        reason = "tick counts stay far below 2^52 for any real process"
    )]
    let ticks = (utime_ticks + stime_ticks) as f64;
    Some(ticks / TICKS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utime_and_stime_after_a_name_with_spaces_and_parens() {
        let line = "9555 (beam.smp (x) y) S 1 9554 9554 0 -1 4194560 1 0 0 0 250 75 0 0 20 0 \
                    30 0 123 456 789";
        let cpu_s = parse_stat_cpu_s(line).unwrap();
        assert!((cpu_s - 3.25).abs() < 1e-9, "{cpu_s}");
    }

    #[test]
    fn refuses_a_truncated_line() {
        assert_eq!(parse_stat_cpu_s("12 (x) S 1 2 3"), None);
        assert_eq!(parse_stat_cpu_s("no parenthesis at all"), None);
    }

    #[test]
    fn reads_its_own_cpu_time() {
        assert!(self_cpu_s().is_some());
    }
}
