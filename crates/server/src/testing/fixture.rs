//! The fixture binary's protocol (`wharf --test-mode`): [`TempDataDir`] and the stdin clock
//! commands ([`ClockCommand`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock_control::ClockControlError;
use crate::handle::ServerHandle;

use wharf_base::parse_duration;
use wharf_clock::{Clock, SystemClock};

/// A fresh directory under the system's temporary directory, removed (with its contents)
/// on drop. Used by [`TestBrokerBuilder::temp_data_dir`] and `wharf --test-mode`.
#[derive(Debug)]
pub struct TempDataDir {
    path: PathBuf,
}

impl TempDataDir {
    /// Creates `wharf-test-<pid>-<ms>-<n>` in the temporary directory.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn create() -> io::Result<TempDataDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = format!(
                "wharf-test-{}-{}-{n}",
                std::process::id(),
                SystemClock.now_ms()
            );
            let path = base.join(name);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDataDir { path }),
                // Another process of the same pid (a container) or an old leftover: next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One line of the fixture binary's clock protocol (`wharf --test-mode --test-clock` reads
/// them on stdin and answers each with one JSON line on stdout):
///
/// | line | effect | answer |
/// |---|---|---|
/// | `advance 30m` | [`ServerHandle::clock_advance`] | `{"now_ms": 1767227400000}` |
/// | `set 1767225600000` | [`ServerHandle::clock_set`] (ms since the epoch) | `{"now_ms": ...}` |
/// | `now` | [`ServerHandle::clock_now`] | `{"now_ms": ...}` |
///
/// Anything else, or a refused operation (no `--test-clock`, a time in the past), is answered
/// `{"error": "..."}`. The answer to `advance` and `set` comes after the broker has done what
/// became due, so a client that reads the answer and then looks sees the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockCommand {
    /// Move the clock forward.
    Advance(Duration),
    /// Set the clock, ms since the Unix epoch.
    Set(u64),
    /// Tell the time.
    Now,
}

impl ClockCommand {
    /// Parses one protocol line (surrounding whitespace ignored).
    ///
    /// # Errors
    /// An unknown command or a bad argument, described for the `error` answer.
    pub fn parse(line: &str) -> Result<ClockCommand, String> {
        let mut words = line.split_whitespace();
        let command = match (words.next(), words.next()) {
            (Some("advance"), Some(by)) => {
                ClockCommand::Advance(parse_duration(by).map_err(|e| e.to_string())?)
            }
            (Some("set"), Some(ms)) => ClockCommand::Set(
                ms.parse()
                    .map_err(|_| format!("'{ms}' is not a time in ms since the epoch"))?,
            ),
            (Some("now"), None) => ClockCommand::Now,
            _ => {
                return Err(format!(
                    "unknown command '{}': expected 'advance <duration>', 'set <ms>' or 'now'",
                    line.trim()
                ));
            }
        };
        if words.next().is_some() {
            return Err(format!("trailing words in '{}'", line.trim()));
        }
        Ok(command)
    }

    /// Runs the command on `server`: the new (or current) time in ms.
    ///
    /// # Errors
    /// As the [`ServerHandle`] clock operations.
    pub async fn run(self, server: &ServerHandle) -> Result<u64, ClockControlError> {
        match self {
            ClockCommand::Advance(by) => server.clock_advance(by).await,
            ClockCommand::Set(ms) => server.clock_set(ms).await,
            ClockCommand::Now => server.clock_now(),
        }
    }

    /// Parses and runs one protocol line; returns the JSON answer line (without newline).
    pub async fn answer(server: &ServerHandle, line: &str) -> String {
        let result = match ClockCommand::parse(line) {
            Ok(command) => command.run(server).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match result {
            Ok(now_ms) => serde_json::json!({ "now_ms": now_ms }).to_string(),
            Err(error) => serde_json::json!({ "error": error }).to_string(),
        }
    }
}
