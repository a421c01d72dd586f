//! [`Snapshot`]: the figures of one scrape that live in the broker task (queues, connections,
//! counters, the log's sync histograms), copied there by [`Snapshot::of`] and turned into
//! text outside it.

use crate::admin::{AdminView, ChannelStats};
use crate::counters::MessageCounters;
use wharf_wal::SyncSnapshot;

/// One queue's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueFigures {
    pub(crate) vhost: String,
    pub(crate) name: String,
    pub(crate) ready: u64,
    pub(crate) unacked: u64,
    pub(crate) ready_bytes: u64,
    pub(crate) consumers: u64,
}

/// One connection's figures, and its channels'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnFigures {
    /// The client's address, the connection's label (S-OPS-10).
    pub(crate) peer: std::net::SocketAddr,
    /// Bytes received from the client and sent to it.
    pub(crate) received_bytes: u64,
    pub(crate) sent_bytes: u64,
    /// Its open channels: number and figures.
    pub(crate) channels: Vec<(u16, ChannelStats)>,
}

/// What a scrape reads from the broker task.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// Per queue, or (aggregated) one line of sums over every queue.
    pub(crate) queues: Vec<QueueFigures>,
    /// Every open connection (the per-connection and per-channel families).
    pub(crate) conns: Vec<ConnFigures>,
    /// Queues.
    pub(crate) queue_count: u64,
    pub(crate) connections: u64,
    pub(crate) channels: u64,
    /// Open channels that have published.
    pub(crate) publishers: u64,
    pub(crate) counters: MessageCounters,
    pub(crate) sync: Option<SyncSnapshot>,
    pub(crate) timings: crate::core::CoreTimingsSnapshot,
    /// The server's clock, ms since the epoch.
    pub(crate) now_ms: u64,
}

impl Snapshot {
    /// Copies the figures out of the broker task's view (no formatting here). The per-queue
    /// figures only when `per_object`; the aggregated endpoint, what Prometheus polls, gets
    /// one line of sums counted without listing anything (issue 18: no listing on the broker
    /// task per poll).
    pub(crate) fn of(view: &AdminView<'_>, per_object: bool) -> Snapshot {
        let queues = if per_object {
            let mut queues = Vec::new();
            for vhost in view.broker.vhost_names() {
                queues.extend(
                    view.broker
                        .queues(&vhost)
                        .into_iter()
                        .map(|q| QueueFigures {
                            vhost: q.vhost,
                            name: q.name,
                            ready: q.ready,
                            unacked: q.unacked,
                            ready_bytes: q.ready_bytes,
                            consumers: u64::from(q.consumers),
                        }),
                );
            }
            queues
        } else {
            let t = view.broker.totals();
            vec![QueueFigures {
                vhost: String::new(),
                name: String::new(),
                ready: t.ready,
                unacked: t.unacked,
                ready_bytes: t.ready_bytes,
                consumers: t.consumers,
            }]
        };
        let counts = view.connections.counts();
        // The per-connection and per-channel families (S-OPS-10) read every connection, the
        // aggregated endpoint too (it sums them): O(connections), not O(messages), and only
        // their traffic and channel counts (issue 18: no copy of each client's properties
        // per scrape). The addresses are written out of the broker task.
        let conns = view
            .connections
            .traffic()
            .into_iter()
            .map(|c| ConnFigures {
                peer: c.peer,
                received_bytes: c.traffic.0,
                sent_bytes: c.traffic.1,
                channels: c.channels,
            })
            .collect();
        Snapshot {
            queues,
            conns,
            queue_count: view.broker.totals().queues,
            connections: counts.connections,
            channels: counts.channels,
            publishers: counts.publishing,
            counters: view.counters,
            sync: view.sync.clone(),
            timings: view.timings.clone(),
            now_ms: view.now_ms,
        }
    }

    /// Consumers on every queue.
    pub(crate) fn consumers(&self) -> u64 {
        self.queues.iter().map(|q| q.consumers).sum()
    }
}
