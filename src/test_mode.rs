//! The fixture mode of the `wharf` binary, for tests written in other languages
//! (`--test-mode`, `--test-clock`; README "Testing your service against wharf").
//!
//! `wharf --test-mode` listens on 127.0.0.1 on a free port (unless `--bind`/`--port` say
//! otherwise), keeps its log in a fresh temporary directory removed at a graceful exit (unless
//! `--data-dir` is given), logs to stderr, and prints one JSON line on stdout once it accepts
//! clients:
//!
//! ```text
//! {"amqp_url":"amqp://guest:guest@127.0.0.1:41234/%2f","mgmt_url":"http://127.0.0.1:41235","pid":4242,"data_dir":"/tmp/wharf-test-4242-...","clock_control":true,"now_ms":1767225600000}
//! ```
//!
//! `--test-clock` runs the broker on a manual clock set to the wall time at start, which moves
//! only when told. In test mode, the clock is told through stdin, one command per line
//! (`advance 30m`, `set <ms>`, `now`), each answered by one JSON line on stdout
//! (`wharf::testing::ClockCommand` is the protocol). End of stdin is not a stop signal; SIGTERM
//! or SIGINT is. Part of the binary crate only: uses the library's public API.

use std::path::PathBuf;

use anyhow::Context;
use tokio::sync::mpsc;
use wharf::testing::{ClockCommand, TempDataDir};
use wharf_clock::{Clock, ManualClock, SystemClock};
use wharf_server::{ServerConfig, ServerHandle};

/// Longest stdin command line read at once; a longer one is answered as garbage, in pieces.
const COMMAND_LINE_BYTES_MAX: u64 = 4096;
/// Commands read ahead of the broker.
const COMMANDS_QUEUED_MAX: usize = 16;

/// The fixture flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TestArgs {
    /// Fixture mode for tests: listen on 127.0.0.1 on a free port, use a temporary data
    /// directory (removed at exit), print one JSON line with the URLs on stdout once ready,
    /// and read clock commands on stdin (with --test-clock).
    #[arg(long, env = "WHARF_TEST_MODE")]
    pub test_mode: bool,
    /// Run on a manual clock (starting at the wall time) that moves only when told: through
    /// stdin in --test-mode (`advance 30m`, `set <ms>`, `now`). For tests only.
    #[arg(long, env = "WHARF_TEST_CLOCK")]
    pub test_clock: bool,
}

impl TestArgs {
    /// In test mode, fills in the fixture defaults of the flags left unset: 127.0.0.1, port 0,
    /// and a fresh temporary data directory (returned; removing it is its drop).
    ///
    /// # Errors
    /// The temporary directory cannot be created.
    pub fn fixture_defaults(
        &self,
        bind: &mut Option<String>,
        port: &mut Option<u16>,
        mgmt_port: &mut Option<u16>,
        prometheus_port: &mut Option<u16>,
        data_dir: &mut Option<PathBuf>,
    ) -> anyhow::Result<Option<TempDataDir>> {
        if !self.test_mode {
            return Ok(None);
        }
        bind.get_or_insert_with(|| "127.0.0.1".to_owned());
        port.get_or_insert(0);
        mgmt_port.get_or_insert(0);
        prometheus_port.get_or_insert(0);
        if data_dir.is_some() {
            return Ok(None);
        }
        let temp = TempDataDir::create().context("creating a temporary data directory")?;
        *data_dir = Some(temp.path().to_owned());
        Ok(Some(temp))
    }

    /// Turns on clock control when asked.
    pub fn apply(&self, config: &mut ServerConfig) {
        if self.test_clock {
            tracing::warn!("--test-clock: the broker's clock moves only when told");
            config.clock_control = Some(ManualClock::new(SystemClock.now_ms()));
        }
    }
}

/// Prints the ready line on stdout.
pub fn announce(server: &ServerHandle, data_dir: &std::path::Path) {
    let line = serde_json::json!({
        "amqp_url": server.amqp_url(),
        "mgmt_url": server.mgmt_addr().map(|a| format!("http://{a}")),
        "pid": std::process::id(),
        "data_dir": data_dir.display().to_string(),
        "clock_control": server.clock_control_enabled(),
        "now_ms": server.clock_now().ok(),
    });
    println!("{line}");
}

/// Answers clock commands from stdin until stdin ends; then never resolves (the process
/// stops on a signal). Stdin is read on its own thread: a blocking read must not hold up the
/// runtime's shutdown.
pub async fn serve_stdin(server: &ServerHandle) {
    let (tx, mut rx) = mpsc::channel::<String>(COMMANDS_QUEUED_MAX);
    let reader = std::thread::Builder::new()
        .name("wharf-test-stdin".to_owned())
        .spawn(move || read_lines(&tx));
    if let Err(e) = reader {
        tracing::error!(error = %e, "cannot read clock commands from stdin");
        std::future::pending::<()>().await;
    }
    while let Some(line) = rx.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        println!("{}", ClockCommand::answer(server, &line).await);
    }
    std::future::pending::<()>().await;
}

fn read_lines(tx: &mpsc::Sender<String>) {
    use std::io::{BufRead, Read};
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    loop {
        let mut line = Vec::new();
        match (&mut lock)
            .take(COMMAND_LINE_BYTES_MAX)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                // Bytes that are not UTF-8 make an unknown command, answered as such.
                let line = String::from_utf8_lossy(&line).into_owned();
                if tx.blocking_send(line).is_err() {
                    return;
                }
            }
        }
    }
}
