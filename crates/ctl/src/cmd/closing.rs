//! Closing client connections: `close_connection NAME REASON` and `close_all_connections
//! [-p VHOST | --global] [--limit N] [--per-connection-delay MS] REASON`, through
//! `DELETE /api/connections/{name}` with the reason in `X-Reason` (the client is told 320
//! `CONNECTION_FORCED` and the reason, S-OPS-9).

use std::time::Duration;

use super::{Ctl, cell};
use crate::client::segment;
use crate::exit::EXIT_UNAVAILABLE;
use crate::opts::{Fail, Outcome, arg, check_args, usage};

impl Ctl<'_, '_> {
    /// Closes one connection (named as `list_connections name` shows it).
    fn close_one(&self, name: &str, reason: &str) -> Outcome {
        let path = format!("/api/connections/{}", segment(name));
        self.call_with("DELETE", &path, None, &[("x-reason", reason)])?;
        Ok(())
    }

    /// `close_connection NAME REASON`.
    pub(super) fn close_connection(&mut self, pos: &[String]) -> Outcome {
        check_args(
            pos,
            2,
            2,
            "close_connection <connection name> <explanation>",
        )?;
        let (name, reason) = (arg(pos, 1), arg(pos, 2));
        self.info(&format!("Closing connection {name}, reason: {reason}..."));
        self.close_one(name, reason)
    }

    /// `close_all_connections REASON`: the connections of the vhost (`-p`, `/` by default),
    /// or of every vhost with `--global`, at most `--limit` of them, waiting
    /// `--per-connection-delay` milliseconds between two; prints how many it closed. A
    /// connection that went away meanwhile is not counted.
    pub(super) fn close_all_connections(&mut self, pos: &[String]) -> Outcome {
        let shape = "close_all_connections [-p <vhost> --limit <limit>] [--global] \
                     [--per-connection-delay <delay>] <explanation>";
        check_args(pos, 1, 1, shape)?;
        let reason = arg(pos, 1).to_owned();
        let limit = number(self.opts.limit.as_deref(), "--limit")?;
        let delay = number(
            self.opts.per_connection_delay.as_deref(),
            "--per-connection-delay",
        )?;
        let vhost = (!self.opts.global).then(|| self.vhost());
        let node = self.node()?;
        self.info(&match &vhost {
            Some(v) => format!("Closing all connections in vhost {v}, reason: {reason}..."),
            None => format!(
                "Closing all connections to node {node} (across all vhosts), reason: {reason}..."
            ),
        });
        let all = self.call("GET", "/api/connections", None)?.json();
        let names: Vec<String> = all
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| vhost.as_deref().is_none_or(|v| c["vhost"] == v))
            .map(|c| cell(&c["name"]))
            .take(limit.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)))
            .collect();
        let mut closed = 0u64;
        for (i, name) in names.iter().enumerate() {
            if i > 0
                && let Some(ms) = delay
            {
                std::thread::sleep(Duration::from_millis(ms));
            }
            match self.close_one(name, &reason) {
                Ok(()) => closed += 1,
                // Gone by itself meanwhile: nothing to close.
                Err(Fail(EXIT_UNAVAILABLE, text)) if text.starts_with("Connection '") => {}
                Err(e) => return Err(e),
            }
        }
        let _ = writeln!(self.io.out, "Closed {closed} connections");
        Ok(())
    }
}

/// An option's value as a non-negative integer.
fn number(value: Option<&str>, option: &str) -> Result<Option<u64>, Fail> {
    value
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                usage(format!(
                    "{option} must be a non-negative integer, got '{v}'"
                ))
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_non_negative_integers() {
        assert_eq!(number(None, "--limit").ok(), Some(None));
        assert_eq!(number(Some("3"), "--limit").ok(), Some(Some(3)));
        assert!(number(Some("-1"), "--limit").is_err());
    }
}
