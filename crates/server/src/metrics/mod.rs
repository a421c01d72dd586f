//! Prometheus metrics as RabbitMQ's `rabbitmq_prometheus` plugin serves them, so that its
//! Grafana dashboards and the usual alert rules work unchanged (S-OPS-1): a listener of its
//! own (port 15692 by default, [`crate::ServerConfig::prometheus_bind`]) with `/metrics`
//! (aggregated), `/metrics/per-object` and `/metrics/detailed?family=…&vhost=…`, RabbitMQ's
//! metric names, types, help texts and labels, and wharf's own figures under `wharf_`. The
//! management API serves the aggregated `/metrics` too, from the same code.
//!
//! A sibling of `mgmt` on the server's side: it asks the broker task through the admin path
//! (`crate::admin`) and must not depend on `mgmt`.
//!
//! - `snapshot.rs`: what one scrape copies out of the broker task.
//! - `families.rs`: the families, written with `prometheus-client`'s text encoder.
//! - `objects.rs`: the per-connection and per-channel families.
//! - `sample.rs`: one family's samples and their text.
//! - `timings.rs`: wharf's own histograms (the broker task's and the log writer's time).
//! - `detailed.rs`: `/metrics/detailed`'s query.
//! - `process.rs`: the process's file descriptors.
//! - `raft.rs`: the quorum queues' Raft figures (`ra_metrics`) and replication lag.
//! - `serve.rs`: the listener and its routes.

mod detailed;
mod families;
mod objects;
mod process;
mod raft;
mod sample;
mod serve;
mod snapshot;
mod timings;

pub(crate) use families::{Endpoint, NodeFigures};
pub(crate) use serve::serve;

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::admin::{AdminQuery, AdminRequest};
use crate::alarm::{AlarmSource, Alarms};
use crate::core::CoreMsg;
use families::Exposition;
use snapshot::Snapshot;

/// Where a scrape's figures come from.
#[derive(Debug, Clone)]
pub struct MetricsSource {
    /// The broker task's inbox.
    pub(crate) core: mpsc::Sender<CoreMsg>,
    /// The resource alarms and their monitor's last samples.
    pub(crate) alarms: Option<Arc<Alarms>>,
    /// The node's name (`rabbitmq_node`).
    pub(crate) node: String,
    /// The cluster's name (`rabbitmq_cluster`): the node's own without a cluster.
    pub(crate) cluster: String,
    /// The quorum queues' group this node is a member of (the `rabbitmq_raft_*` families).
    pub(crate) group: Option<wharf_cluster::QueueGroup>,
    /// How long recovery took at start, ms.
    pub(crate) recovery_ms: u64,
    /// When the server started, ms since the epoch (the server's clock).
    pub(crate) started_at_ms: u64,
}

impl MetricsSource {
    /// The node's figures now: the resource monitor's last samples, the alarms, the
    /// process's file descriptors.
    pub(crate) fn node_figures(&self) -> NodeFigures {
        let samples = self
            .alarms
            .as_ref()
            .map(|a| a.samples())
            .unwrap_or_default();
        NodeFigures {
            node: self.node.clone(),
            cluster: self.cluster.clone(),
            disk_free_bytes: samples.disk_free_bytes,
            memory_used_bytes: samples.memory_used_bytes,
            memory_limit_bytes: samples.memory_limit_bytes,
            disk_free_limit_bytes: self
                .alarms
                .as_ref()
                .map(|a| a.limits().thresholds.disk_free_limit_bytes),
            alarms: self
                .alarms
                .as_ref()
                .map(|a| (a.is_on(AlarmSource::Disk), a.is_on(AlarmSource::Memory))),
            open_fds: process::open_fds(),
            max_fds: process::max_fds(),
            recovery_ms: self.recovery_ms,
            started_at_ms: self.started_at_ms,
        }
    }

    /// One scrape of `endpoint` as Prometheus text; `None` when the broker task is gone.
    pub(crate) async fn scrape(&self, endpoint: Endpoint) -> Option<String> {
        let (done, answer) = oneshot::channel();
        let per_object = !matches!(endpoint, Endpoint::Aggregated);
        let query: AdminQuery = Box::new(move |view| {
            let _ = done.send(Snapshot::of(view, per_object));
        });
        self.core
            .send(CoreMsg::Admin(AdminRequest::Query(query)))
            .await
            .ok()?;
        let snapshot = answer.await.ok()?;
        let raft = match &self.group {
            Some(group) => Some(raft::RaftFigures {
                group: group.figures().await,
                queues: if per_object {
                    group.quorum_queues()
                } else {
                    Vec::new()
                },
            }),
            None => None,
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exposition {
            snapshot,
            node: self.node_figures(),
            endpoint,
            raft,
        }));
        let mut text = String::new();
        // Writing into a String cannot fail.
        prometheus_text::encode(&mut text, &registry).ok()?;
        Some(erlang_bucket_bounds(&text))
    }

    /// A scrape as an HTTP answer: the text, or 503 when the broker task is gone.
    pub(crate) async fn answer(&self, endpoint: Endpoint) -> Response {
        match self.scrape(endpoint).await {
            Some(text) => (
                [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
                text,
            )
                .into_response(),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the broker task is not running\n",
            )
                .into_response(),
        }
    }
}

/// RabbitMQ writes the message size histogram's bounds below 10^6 as Erlang formats floats
/// (`le="100.0"` .. `le="100000.0"`), and the RabbitMQ-Overview dashboard's "Message Size
/// Distribution" panel matches those strings; the encoder writes them as Go does (`le="100"`).
/// This rewrites the four bounds of that one family, so the panel finds them.
fn erlang_bucket_bounds(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        if line.starts_with("rabbitmq_message_size_bytes_bucket{") {
            let mut line = line.to_owned();
            for bound in ["100", "1000", "10000", "100000"] {
                line = line.replace(&format!("le=\"{bound}\""), &format!("le=\"{bound}.0\""));
            }
            out.push_str(&line);
        } else {
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::erlang_bucket_bounds;

    #[test]
    fn s_ops_1_message_size_bounds_are_written_as_rabbitmq_writes_them() {
        let text = "rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"100\"} 3\n\
                    rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"1e+06\"} 3\n\
                    wharf_wal_records_per_fsync_bucket{le=\"1000\"} 1\n";
        assert_eq!(
            erlang_bucket_bounds(text),
            "rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"100.0\"} 3\n\
             rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"1e+06\"} 3\n\
             wharf_wal_records_per_fsync_bucket{le=\"1000\"} 1\n"
        );
    }
}
