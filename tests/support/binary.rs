//! Shared helpers of the tests that run the real `wharf` binary (restart tests, crash torture):
//! spawn it on a data directory with `--port 0`, learn its address from its start line, stop
//! it gracefully (SIGTERM) or kill it (SIGKILL), always by the pid we spawned. Depends only on
//! the binary's command line and log line, lapin and std; never on wharf's library.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};

/// How long the binary may take to recover and listen.
const START_WAIT: Duration = Duration::from_secs(30);

/// A running `wharf` child process.
pub struct Broker {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its start line ("wharf listening ..."), ANSI colours removed.
    pub start_line: String,
    /// Every line it logged so far (stdout and stderr).
    lines: Arc<Mutex<Vec<String>>>,
}

/// Removes ANSI escape sequences (`ESC [ ... letter`) from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of `key=value` in a log line (up to the next space).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pattern = format!(" {key}=");
    let start = line.find(&pattern)? + pattern.len();
    let rest = line.get(start..)?;
    Some(rest.split(' ').next().unwrap_or(rest))
}

/// `bin` on `dir` listening on free loopback ports (AMQP, management, Prometheus), without
/// colours or a configuration file from the environment: how every test runs the binary.
pub fn command(bin: &str, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--mgmt-port",
        "0",
        "--prometheus-port",
        "0",
    ])
    .arg("--data-dir")
    .arg(dir)
    .env("NO_COLOR", "1")
    .env_remove("WHARF_CONFIG");
    c
}

impl Broker {
    /// Starts the binary on `dir` and waits for its start line.
    pub fn start(dir: &Path) -> Broker {
        Self::start_bin(env!("CARGO_BIN_EXE_wharf"), dir)
    }

    /// Starts `bin` on `dir` with `--port 0` and waits for its start line.
    pub fn start_bin(bin: &str, dir: &Path) -> Broker {
        Self::start_with_args(bin, dir, &[])
    }

    /// As [`Broker::start_bin`], with more command-line arguments.
    pub fn start_with_args(bin: &str, dir: &Path, extra: &[&str]) -> Broker {
        Self::launch_with_args(bin, dir, extra).wait()
    }

    /// As [`Broker::start_with_args`], without waiting for the start line: a new cluster's
    /// nodes start together, each waiting for the others before it serves (S-CLU-20).
    pub fn launch_with_args(bin: &str, dir: &Path, extra: &[&str]) -> Starting {
        let mut cmd = command(bin, dir);
        cmd.args(["--log", "info"]).args(extra);
        Self::launch(cmd, &dir.display().to_string())
    }

    /// `bin` with exactly `args` (a command line as a person types it: no port, directory
    /// or log level added), without colours or a configuration file from the environment;
    /// waits for its start line.
    pub fn start_exact(bin: &str, args: &[String]) -> Broker {
        Self::launch_exact(bin, args).wait()
    }

    /// As [`Broker::start_exact`], without waiting for the start line.
    pub fn launch_exact(bin: &str, args: &[String]) -> Starting {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("NO_COLOR", "1")
            .env_remove("WHARF_CONFIG");
        Self::launch(cmd, &args.join(" "))
    }

    /// Spawns `cmd` (`what`, for a failure's message); [`Starting::wait`] waits for its start
    /// line.
    fn launch(mut cmd: Command, what: &str) -> Starting {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the wharf binary");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (started_tx, started) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for (stream, tx) in [
            (
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
                started_tx.clone(),
            ),
            (Box::new(stderr), started_tx),
        ] {
            let lines = lines.clone();
            // Drains the pipe for the whole life of the child, so it never blocks on logging.
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let line = strip_ansi(&line);
                    if line.contains("wharf listening") {
                        let _ = tx.send(line.clone());
                    }
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Starting {
            child: Some(child),
            lines,
            started,
            what: what.to_owned(),
        }
    }
}

/// A spawned broker whose start line has not been read yet.
pub struct Starting {
    /// Taken by [`Starting::wait`]; killed by the drop otherwise.
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    started: mpsc::Receiver<String>,
    what: String,
}

impl Starting {
    /// Waits for the start line (panics with the output when it does not come).
    pub fn wait(mut self) -> Broker {
        let mut child = self.child.take().expect("waited once");
        let (lines, started, what) = (self.lines.clone(), &self.started, self.what.clone());
        let Ok(start_line) = started.recv_timeout(START_WAIT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "wharf did not start ({what}); its output:\n{}",
                lines.lock().unwrap().join("\n")
            );
        };
        let addr = field(&start_line, "addr")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no addr in the start line: {start_line}"));
        Broker {
            child,
            addr,
            start_line,
            lines,
        }
    }
}

impl Broker {
    /// The process id we spawned.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has ended (of itself, or by a signal not sent through `kill`).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The AMQP URL of the default user and vhost.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// A numeric field of the start line.
    pub fn start_field(&self, key: &str) -> u64 {
        field(&self.start_line, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {key} in the start line: {}", self.start_line))
    }

    /// Everything the broker logged so far.
    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// SIGKILL, by the pid we spawned; waits for the process to be gone.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL to our child");
        self.child.wait().expect("reaping our child");
    }

    /// SIGTERM (graceful shutdown), by the pid we spawned; waits for a clean exit.
    pub fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("running kill -TERM");
        assert!(status.success(), "kill -TERM failed");
        let exit = self.child.wait().expect("reaping our child");
        assert!(
            exit.success(),
            "graceful shutdown failed: {exit}\n{}",
            self.output()
        );
    }

    /// A lapin connection and one channel on it.
    pub async fn channel(&self) -> (Connection, Channel) {
        let conn = Connection::connect(&self.url(), ConnectionProperties::default())
            .await
            .unwrap();
        let ch = conn.create_channel().await.unwrap();
        (conn, ch)
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // Never waited for (a failed test): kill our own child, by its pid.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // A failed test must not leave its broker running: kill our own child, by its pid.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// True if `err` is the broker's 404 `NOT_FOUND` (a channel error).
pub fn is_not_found(err: &lapin::Error) -> bool {
    matches!(err.kind(), lapin::ErrorKind::ProtocolError(e) if e.get_id() == 404)
}
