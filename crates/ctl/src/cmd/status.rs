//! The node's health and status: `ping`, `await_startup`, `status` (memory, disk, alarms,
//! listeners, totals, as rabbitmqctl prints them), `report`, `list_parameters`.

use std::time::Duration;

use serde_json::Value as JsonValue;

use super::{Ctl, cell};
use crate::client::segment;
use crate::exit::EXIT_UNAVAILABLE;
use crate::opts::{Fail, Outcome, check_args, usage};

/// `await_startup`'s default wait, seconds (rabbitmqctl's).
const AWAIT_STARTUP_SECS: u64 = 300;
/// How often `await_startup` asks.
const AWAIT_POLL: Duration = Duration::from_millis(200);

/// Bytes as rabbitmqctl prints memory and disk figures: gigabytes with 4 decimals.
fn gb(v: &JsonValue) -> String {
    match v.as_u64() {
        #[expect(clippy::cast_precision_loss, reason = "a rounded figure for people")]
        Some(bytes) => format!("{:.4} gb", bytes as f64 / 1e9),
        None => "unknown".to_owned(),
    }
}

/// What a listener is for, in rabbitmqctl's words.
fn purpose(protocol: &str) -> &'static str {
    match protocol {
        "amqp" => "AMQP 0-9-1",
        "amqp/ssl" => "AMQP 0-9-1 over TLS",
        "http" => "HTTP API",
        "https" => "HTTP API over TLS (HTTPS)",
        "http/prometheus" => "Prometheus exporter API over HTTP",
        _ => "unknown",
    }
}

impl Ctl<'_, '_> {
    /// `ping`: one request; 0 when the broker answers, 69 (and why) when it does not.
    pub(super) fn ping(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "ping")?;
        self.info(&format!(
            "Will ping {}. This only checks that its management API answers.",
            self.client.base()
        ));
        self.call("GET", "/api/overview", None)?;
        self.info("Ping succeeded");
        Ok(())
    }

    /// `await_startup [--timeout S]`: asks until the broker answers (it answers once
    /// recovery is done and it serves clients), at most `--timeout` seconds.
    pub(super) fn await_startup(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "await_startup [--timeout SECONDS]")?;
        let secs = match &self.opts.timeout {
            None => AWAIT_STARTUP_SECS,
            Some(t) => t
                .parse()
                .map_err(|_| usage(format!("--timeout must be seconds, got '{t}'")))?,
        };
        let tries = (Duration::from_secs(secs).as_millis() / AWAIT_POLL.as_millis()).max(1);
        for _ in 0..tries {
            match self.call("GET", "/api/overview", None) {
                Err(Fail(EXIT_UNAVAILABLE, _)) => std::thread::sleep(AWAIT_POLL),
                other => return other.map(|_| ()),
            }
        }
        Err(Fail(
            EXIT_UNAVAILABLE,
            format!(
                "the broker at {} did not start within {secs} seconds",
                self.client.base()
            ),
        ))
    }

    pub(super) fn status(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "status")?;
        let o = self.call("GET", "/api/overview", None)?.json();
        let node = cell(&o["node"]);
        let n = self
            .call("GET", &format!("/api/nodes/{}", segment(&node)), None)?
            .json();
        let vhosts = self.call("GET", "/api/vhosts", None)?.json();
        if self.opts.json {
            let status = serde_json::json!({ "overview": o, "node": n, "vhosts": vhosts });
            let _ = writeln!(self.io.out, "{status}");
            return Ok(());
        }
        self.info(&format!("Status of node {node} ..."));
        let mut lines = vec![
            "Runtime\n".to_owned(),
            format!("Product name: {}", cell(&o["product_name"])),
            format!("Product version: {}", cell(&o["product_version"])),
            format!("RabbitMQ version: {}", cell(&o["rabbitmq_version"])),
            format!("Node name: {node}"),
            format!(
                "Uptime (seconds): {}",
                n["uptime"].as_u64().map_or(0, |ms| ms / 1000)
            ),
            "\nAlarms\n".to_owned(),
        ];
        let alarms: Vec<String> = [
            ("mem_alarm", "Memory alarm"),
            ("disk_free_alarm", "Free disk space alarm"),
        ]
        .iter()
        .filter(|(key, _)| n[*key] == JsonValue::Bool(true))
        .map(|(_, what)| format!("{what} on node {node}"))
        .collect();
        if alarms.is_empty() {
            lines.push("(none)".to_owned());
        }
        lines.extend(alarms);
        lines.extend([
            "\nMemory\n".to_owned(),
            format!("Total memory used: {}", gb(&n["mem_used"])),
            format!(
                "Calculation strategy: {}",
                cell(&n["mem_calculation_strategy"])
            ),
            format!(
                "Memory high watermark setting: computed to: {}",
                gb(&n["mem_limit"])
            ),
            "\nFile Descriptors\n".to_owned(),
            format!(
                "Total: {}, limit: {}",
                cell(&n["fd_used"]),
                cell(&n["fd_total"])
            ),
            "\nFree Disk Space\n".to_owned(),
            format!(
                "Low free disk space watermark: {}",
                gb(&n["disk_free_limit"])
            ),
            format!("Free disk space: {}", gb(&n["disk_free"])),
            "\nTotals\n".to_owned(),
            format!(
                "Connection count: {}",
                cell(&o["object_totals"]["connections"])
            ),
            format!("Queue count: {}", cell(&o["object_totals"]["queues"])),
            format!(
                "Virtual host count: {}",
                vhosts.as_array().map_or(0, Vec::len)
            ),
            "\nListeners\n".to_owned(),
        ]);
        for l in o["listeners"].as_array().into_iter().flatten() {
            let protocol = cell(&l["protocol"]);
            lines.push(format!(
                "Interface: {}, port: {}, protocol: {protocol}, purpose: {}",
                cell(&l["ip_address"]),
                cell(&l["port"]),
                purpose(&protocol)
            ));
        }
        for line in lines {
            let _ = writeln!(self.io.out, "{line}");
        }
        Ok(())
    }

    /// `report`: the status, then every listing (per vhost where the listing is), as
    /// rabbitmqctl's report gathers them for a support request.
    pub(super) fn report(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "report")?;
        self.status(&pos[..1])?;
        let name = |s: &str| vec![s.to_owned()];
        self.list_global(
            &name("list_connections"),
            "/api/connections",
            &["user", "peer_host", "peer_port", "state"],
            "\nListing connections ...",
        )?;
        self.list_global(
            &name("list_channels"),
            "/api/channels",
            &["name", "user", "consumer_count", "messages_unacknowledged"],
            "\nListing channels ...",
        )?;
        let vhosts = self.call("GET", "/api/vhosts", None)?.json();
        for v in vhosts.as_array().into_iter().flatten() {
            self.opts.vhost = Some(cell(&v["name"]));
            let _ = writeln!(self.io.out);
            self.list_queues(&name("list_queues"))?;
            self.list_simple(
                &name("list_exchanges"),
                "exchanges",
                &["name", "type"],
                "Listing exchanges for vhost",
            )?;
            self.list_bindings(&name("list_bindings"))?;
            self.list_consumers(&name("list_consumers"))?;
            self.list_policies(&name("list_policies"))?;
            self.list_permissions(&name("list_permissions"))?;
        }
        Ok(())
    }

    /// `list_parameters [-p VHOST]`: the runtime parameters of a vhost (wharf keeps none of
    /// federation's or shovel's, so the list is what the API holds).
    pub(super) fn list_parameters(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "list_parameters [-p VHOST]")?;
        let vhost = self.vhost();
        let all = self.call("GET", "/api/parameters", None)?.json();
        let items: Vec<JsonValue> = all
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["vhost"].as_str() == Some(vhost.as_str()))
            .cloned()
            .collect();
        self.info(&format!(
            "Listing runtime parameters for vhost \"{vhost}\" ..."
        ));
        let cols = ["component", "name", "value"].map(str::to_owned);
        self.table(&JsonValue::Array(items), &cols)
    }

    /// `environment`: the settings the broker runs with (rabbitmqctl prints the application
    /// environment; wharf's is its resolved configuration, as JSON).
    pub(super) fn environment(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "environment")?;
        let env = self.call("GET", "/api/environment", None)?.json();
        if self.opts.json {
            let _ = writeln!(self.io.out, "{env}");
            return Ok(());
        }
        let node = cell(&self.call("GET", "/api/overview", None)?.json()["node"]);
        self.info(&format!("Application environment of node {node} ..."));
        let text = serde_json::to_string_pretty(&env).unwrap_or_default();
        let _ = writeln!(self.io.out, "{text}");
        Ok(())
    }
}
