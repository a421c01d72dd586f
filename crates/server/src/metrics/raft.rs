//! The quorum queues' Raft figures (S-CLU-43, S-CLU-44): `rabbitmq_prometheus`'s `ra_metrics`
//! family (`rabbitmq_raft_term_total`, `rabbitmq_raft_log_snapshot_index`,
//! `rabbitmq_raft_log_last_applied_index`, `rabbitmq_raft_log_commit_index`,
//! `rabbitmq_raft_log_last_written_index`), and wharf's replication lag per follower.
//!
//! RabbitMQ runs one Raft member per quorum queue per node and reports each; wharf runs one
//! group carrying every quorum queue, so the labels say what a value is: `/metrics` sums the
//! node's groups (one) without labels, as RabbitMQ sums its members; `/metrics/per-object` and
//! `/metrics/detailed?family=ra_metrics` give each quorum queue the values of the group that
//! carries it, labelled `vhost` and `queue` as RabbitMQ labels them, plus `raft_group` (queues
//! of one group show the same values: aggregate by `raft_group`, never sum over queues). An
//! index not reached yet (no snapshot) is 0. `rabbitmq_raft_entry_commit_latency_seconds` is
//! not measured and left out.
//!
//! Besides, wharf's own: the followers' lag on the leader (S-CLU-44), and the entries this
//! member voided (S-CLU-61).

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use wharf_cluster::GroupFigures;

use super::sample::{Labels, Value, family};

/// The group this node is a member of, and the quorum queues it carries (per object only).
#[derive(Debug, Clone)]
pub(crate) struct RaftFigures {
    pub(crate) group: GroupFigures,
    /// `(vhost, queue)` of every quorum queue of the group, as its committed state holds
    /// them; empty for `/metrics`.
    pub(crate) queues: Vec<(String, String)>,
}

/// A family of `ra_metrics`: its name without the prefix, help, type, and how to read it.
type RaftMetric = (
    &'static str,
    &'static str,
    MetricType,
    fn(&GroupFigures) -> u64,
);

const RA_METRICS: [RaftMetric; 5] = [
    (
        "raft_term_total",
        "Current Raft term number",
        MetricType::Counter,
        |g| g.term,
    ),
    (
        "raft_log_snapshot_index",
        "Raft log snapshot index",
        MetricType::Gauge,
        |g| g.snapshot.unwrap_or(0),
    ),
    (
        "raft_log_last_applied_index",
        "Raft log last applied index",
        MetricType::Gauge,
        |g| g.applied.unwrap_or(0),
    ),
    (
        "raft_log_commit_index",
        "Raft log commit index",
        MetricType::Gauge,
        |g| g.committed.unwrap_or(0),
    ),
    (
        "raft_log_last_written_index",
        "Raft log last written index",
        MetricType::Gauge,
        |g| g.last_log.unwrap_or(0),
    ),
];

/// `ra_metrics` under `prefix`: one unlabelled sample per family, or (`per_object`) one per
/// quorum queue of a vhost `keep` accepts.
pub(super) fn ra_metrics(
    enc: &mut DescriptorEncoder<'_>,
    prefix: &str,
    raft: &RaftFigures,
    per_object: bool,
    keep: &dyn Fn(&str) -> bool,
) -> fmt::Result {
    let g = &raft.group;
    for (name, help, kind, read) in RA_METRICS {
        let value = Value::Int(read(g));
        let samples: Vec<(Labels, Value)> = if per_object {
            raft.queues
                .iter()
                .filter(|(vhost, _)| keep(vhost))
                .map(|(vhost, queue)| {
                    let labels = vec![
                        ("vhost", vhost.clone()),
                        ("queue", queue.clone()),
                        ("raft_group", g.group.to_string()),
                    ];
                    (labels, value)
                })
                .collect()
        } else {
            vec![(Vec::new(), value)]
        };
        family(enc, &format!("{prefix}{name}"), help, kind, &samples)?;
    }
    Ok(())
}

/// `wharf_raft_follower_lag_entries`: on the group's leader, per other member, the entries of
/// the leader's log it does not hold yet; no samples on a member that does not lead.
pub(super) fn lag(enc: &mut DescriptorEncoder<'_>, raft: &RaftFigures) -> fmt::Result {
    let g = &raft.group;
    let samples: Vec<(Labels, Value)> = g
        .members
        .iter()
        .filter(|r| Some(r.member) != g.leader)
        .filter_map(|r| {
            let labels = vec![
                ("raft_group", g.group.to_string()),
                ("follower", r.name.clone()),
            ];
            Some((labels, Value::Int(r.lag?)))
        })
        .collect();
    family(
        enc,
        "wharf_raft_follower_lag_entries",
        "On the leader of a Raft group: entries of its log a member does not hold yet.",
        MetricType::Gauge,
        &samples,
    )
}

/// `wharf_raft_voided_entries_total{raft_group, member}`: the committed entries this member's
/// state machine voided since the node started, its replay of its log included (S-CLU-60,
/// S-CLU-61); `member` is this member's id.
pub(super) fn voided(enc: &mut DescriptorEncoder<'_>, raft: &RaftFigures) -> fmt::Result {
    let g = &raft.group;
    let labels = vec![
        ("raft_group", g.group.to_string()),
        ("member", g.member.to_string()),
    ];
    family(
        enc,
        "wharf_raft_voided_entries_total",
        "Committed Raft entries this member voided: their events did not fit its committed state.",
        MetricType::Counter,
        &[(labels, Value::Int(g.voided))],
    )
}
