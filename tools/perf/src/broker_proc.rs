//! The broker as a child process of `recovery`: spawned from a command line, signalled and
//! waited for by the pid it was spawned with, and killed (SIGKILL, by that pid) and reaped when
//! dropped, so that every exit path of wharf-perf (an error, a panic, Ctrl-C) takes it down and
//! nothing is ever killed by name. Depends on tokio's process support and rustix's `kill` and
//! `waitpid`.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};
use tokio::process::{Child, Command};

/// A running broker process we spawned.
#[derive(Debug)]
pub struct BrokerChild {
    child: Child,
    pid: u32,
}

impl BrokerChild {
    /// Spawns `command` (program then arguments), its output appended to `log` or discarded.
    /// The child gets its own process group, so a Ctrl-C at the terminal reaches wharf-perf
    /// only, which then kills the child itself.
    pub fn spawn(command: &[String], log: Option<&Path>) -> Result<Self> {
        let (program, args) = command.split_first().context("empty broker command")?;
        let (stdout, stderr) = match log {
            Some(path) => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening --broker-log {}", path.display()))?;
                (Stdio::from(file.try_clone()?), Stdio::from(file))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning the broker {program:?}"))?;
        let pid = child.id().context("the spawned broker has no pid")?;
        Ok(Self { child, pid })
    }

    /// The broker's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn raw_pid(&self) -> Result<Pid> {
        i32::try_from(self.pid)
            .ok()
            .and_then(Pid::from_raw)
            .context("broker pid out of range")
    }

    /// Sends `signal` to the pid we spawned (still our unreaped child, so the pid cannot have
    /// been reused).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        kill_process(self.raw_pid()?, signal)
            .with_context(|| format!("signalling broker pid {}", self.pid))
    }

    /// Waits at most `timeout` for the process to exit and returns its status.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => bail!("broker pid {} still running after {timeout:?}", self.pid),
        }
    }

    /// The exit status if the process has already exited (without waiting).
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// A clean stop: SIGTERM, then wait; SIGKILL if it does not exit within `timeout`.
    pub async fn stop(mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.exited()? {
            return Ok(status);
        }
        self.signal(Signal::TERM)?;
        match self.wait(timeout).await {
            Ok(status) => Ok(status),
            Err(e) => {
                self.signal(Signal::KILL)?;
                self.child.wait().await?;
                Err(e.context("killed it after a clean stop timed out"))
            }
        }
    }
}

impl Drop for BrokerChild {
    /// Kills a broker still running (SIGKILL to our unreaped child's pid) and reaps it before
    /// returning, so that when wharf-perf exits the broker is gone, not a zombie holding a pid.
    /// (tokio's `kill_on_drop` is not used: it would signal the pid again after this reaping,
    /// when the pid may already belong to another process.)
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if self.child.start_kill().is_ok()
            && let Ok(pid) = self.raw_pid()
        {
            let _ = waitpid(Some(pid), WaitOptions::empty());
        }
    }
}
