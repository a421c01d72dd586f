//! [`Node`]: one broker process as the server's broker task runs it (`crates/server/src/core`),
//! without tokio or sockets: commands go to `Broker::handle`, each batch's events go to one
//! `Store::log` call, and every output of the batch (replies, deliveries, publisher confirms)
//! is sealed with the batch's ticket and released only once the log is durable through it
//! (S-DUR-3, S-DUR-4, S-DLX-7). The expiry timer fires at `Broker::next_deadline`, paging
//! follows the durable watermark, checkpoints are taken at points the run chooses.
//!
//! What the server adds on top (frames, outboxes, the group-commit waiter task) is not here;
//! the outputs are what a client would see, in order.

use std::collections::VecDeque;
use std::path::PathBuf;

use wharf_broker::{
    Broker, BrokerError, ChanRef, Command, ConnId, Effect, Event, MessageId, Outcome, Reply,
};
use wharf_store::{CheckpointDone, RecoverySummary, Store, StoreConfig, StoreError, Ticket};
use wharf_wal::WalConfig;

use crate::disk::{Disk, Fence};

/// The one channel each simulated client uses.
const CHANNEL: u16 = 1;
/// The data directory on the simulated disk.
pub const DATA_DIR: &str = "/sim/data";

/// What a client sees, released once durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A publisher confirm (`basic.ack`, or `basic.nack` when `ack` is false).
    Confirm {
        /// Client.
        conn: u64,
        /// Publish sequence number.
        seq: u64,
        /// Ack or nack.
        ack: bool,
    },
    /// A message handed to the client (`basic.deliver` or `basic.get-ok`).
    Deliver {
        /// Client.
        conn: u64,
        /// Delivery tag.
        tag: u64,
        /// Queue it came from.
        queue: String,
        /// Its id there.
        id: MessageId,
        /// Its body.
        body: Vec<u8>,
        /// The redelivered flag.
        redelivered: bool,
    },
    /// `basic.get-empty`.
    GetEmpty {
        /// Client.
        conn: u64,
    },
    /// The client's channel was closed for an error (and reopened: it starts over).
    ChannelClosed {
        /// Client.
        conn: u64,
        /// The broker's text.
        text: String,
    },
}

/// One batch as it was handed to the store: its events and the ticket that covers them.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The store's ticket (0: nothing was logged).
    pub ticket: Ticket,
    /// The batch's events, in order.
    pub events: Vec<Event>,
    /// The clock when the batch ran.
    pub now_ms: u64,
}

/// How the node is configured.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Memory for message content before persistent messages are paged out (bytes).
    pub message_memory_bytes: u64,
    /// The log's segment size.
    pub segment_bytes: u64,
}

/// A running broker process on a [`Disk`].
pub struct Node {
    broker: Broker,
    store: Store,
    fence: Fence,
    config: NodeConfig,
    events: Vec<Event>,
    outputs: Vec<Output>,
    held: VecDeque<(Ticket, Vec<Output>)>,
    last_ticket: Ticket,
    failed: Option<StoreError>,
    /// Every batch handed to the store since the last [`Node::take_logged`].
    logged: Vec<Logged>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("last_ticket", &self.last_ticket)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

fn chan(conn: u64) -> ChanRef {
    ChanRef::new(conn, CHANNEL)
}

impl Node {
    /// Starts a process on `disk`: recovery through the real path (the newest checkpoint,
    /// then the log replayed into a fresh broker, nothing firing). The caller inspects the
    /// recovered broker, then calls [`Node::open`].
    ///
    /// # Errors
    /// What recovery refused.
    pub fn start(disk: &Disk, config: NodeConfig) -> Result<(Node, RecoverySummary), StoreError> {
        let (storage, fence) = disk.mount();
        // The log's writer runs when the node waits for durability, on this thread (no
        // writer thread): which records share an fsync, and so which ones an injected fault or
        // a power loss takes, follows from the seed alone.
        let wal = WalConfig {
            segment_bytes_max: config.segment_bytes,
            inline_writer: true,
            ..WalConfig::default()
        };
        let store_config = StoreConfig {
            dir: PathBuf::from(DATA_DIR),
            salvage: false,
        };
        let (store, broker, summary) = Store::open_with(&store_config, storage, &wal)?;
        let node = Node {
            broker,
            store,
            fence,
            config,
            events: Vec::new(),
            outputs: Vec::new(),
            held: VecDeque::new(),
            last_ticket: 0,
            failed: None,
            logged: Vec::new(),
        };
        Ok((node, summary))
    }

    /// Ends the start as the server does before its listener opens: `Broker::recovered(now)`
    /// (what died while down expires, S-DUR-5; unacked messages come back, S-DUR-6; leases
    /// restart, S-QEXP-4), then a connection and a channel for each of `clients`. The batch
    /// is logged; the caller settles it.
    pub fn open(&mut self, now_ms: u64, clients: &[u64]) {
        let recovered = self.broker.recovered(now_ms);
        self.take(recovered);
        for &conn in clients {
            self.open_client(conn, now_ms);
        }
    }

    fn open_client(&mut self, conn: u64, now_ms: u64) {
        let open = Command::ConnectionOpen {
            conn: ConnId(conn),
            vhost: "/".into(),
        };
        let channel = Command::ChannelOpen { chan: chan(conn) };
        for cmd in [open, channel] {
            let out = self.broker.handle(cmd, now_ms);
            let out = out.unwrap_or_else(|e| panic!("opening client {conn}: {e:?}"));
            self.take(out);
        }
    }

    /// The broker (read-only), for the run's checks.
    #[must_use]
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Whether the log failed (fail-stop: the process must restart).
    #[must_use]
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Runs one client command. A refusal closes the client's channel (and reopens it, the
    /// client starts over), as the server does (S-ERR-1).
    ///
    /// # Errors
    /// The broker's refusal.
    pub fn handle(&mut self, conn: u64, cmd: Command, now_ms: u64) -> Result<Reply, BrokerError> {
        let get_queue = match &cmd {
            Command::Get { queue, .. } => queue.clone(),
            _ => String::new(),
        };
        match self.broker.handle(cmd, now_ms) {
            Ok(out) => {
                let reply = out.reply.clone();
                if let Reply::GetOk(g) = &reply {
                    self.outputs.push(Output::Deliver {
                        conn,
                        tag: g.delivery_tag.0,
                        queue: get_queue,
                        id: g.message.id,
                        body: g.message.body.to_vec(),
                        redelivered: g.redelivered,
                    });
                } else if reply == Reply::GetEmpty {
                    self.outputs.push(Output::GetEmpty { conn });
                }
                self.take(out);
                Ok(reply)
            }
            Err(err) => {
                self.outputs.push(Output::ChannelClosed {
                    conn,
                    text: err.text.clone(),
                });
                let close = Command::ChannelClose { chan: chan(conn) };
                let reopen = Command::ChannelOpen { chan: chan(conn) };
                for cmd in [close, reopen] {
                    if let Ok(out) = self.broker.handle(cmd, now_ms) {
                        self.take(out);
                    }
                }
                Err(err)
            }
        }
    }

    /// A publish in confirm mode: the confirm is an output, released with the batch (an
    /// unroutable message is acked too, as RabbitMQ does). Returns whether it was routed.
    pub fn publish(&mut self, conn: u64, seq: u64, cmd: Command, now_ms: u64) -> bool {
        let Ok(Reply::Published(r)) = self.handle(conn, cmd, now_ms) else {
            return false;
        };
        self.outputs.push(Output::Confirm {
            conn,
            seq,
            ack: !r.refused,
        });
        r.routed
    }

    /// Fires the expiry timer at every deadline up to `now_ms`, each at its own time (as
    /// the broker task's timer does), one batch per firing.
    pub fn advance_to(&mut self, from_ms: u64, now_ms: u64) {
        let mut at = from_ms;
        while let Some(due) = self.broker.next_deadline() {
            if due > now_ms {
                break;
            }
            at = at.max(due);
            let out = self.broker.expire_due(at);
            self.take(out);
            self.end_batch(at);
        }
    }

    fn take(&mut self, out: Outcome) {
        self.events.extend(out.events);
        for effect in out.effects {
            if let Effect::Deliver(d) = effect {
                self.outputs.push(Output::Deliver {
                    conn: d.chan.conn.0,
                    tag: d.delivery_tag.0,
                    queue: d.queue.to_string(),
                    id: d.message.id,
                    body: d.message.body.to_vec(),
                    redelivered: d.redelivered,
                });
            }
        }
    }

    /// Ends the batch: one `store.log` for its events, its outputs sealed with the ticket.
    pub fn end_batch(&mut self, now_ms: u64) {
        let events = std::mem::take(&mut self.events);
        let outputs = std::mem::take(&mut self.outputs);
        if self.failed.is_some() {
            return;
        }
        let mut logged = Vec::new();
        match self.store.log(&events, &mut logged) {
            Ok(Some(ticket)) => {
                self.last_ticket = ticket;
                self.broker.messages_logged(&logged);
            }
            Ok(None) => {}
            Err(err) => {
                // Some of the batch's records may have reached the log before the failure:
                // the run must know them, as possibly durable.
                self.failed = Some(err);
            }
        }
        if !events.is_empty() {
            self.logged.push(Logged {
                ticket: self.last_ticket,
                events,
                now_ms,
            });
        }
        if !outputs.is_empty() && self.failed.is_none() {
            self.held.push_back((self.last_ticket, outputs));
        }
    }

    /// The batches logged since the last call.
    pub fn take_logged(&mut self) -> Vec<Logged> {
        std::mem::take(&mut self.logged)
    }

    /// Makes everything logged durable and releases what was held for it, as the log's
    /// writer and the broker task do after each batch. `None` when nothing could be made
    /// durable: the disk is full (the log holds the records and retries at the next call, not
    /// fail-stop), or the log failed. A failure latches (fail-stop) and drops everything held:
    /// nothing of it will ever be durable. Returns the released outputs and the durable ticket.
    pub fn release(&mut self) -> Option<(Vec<Output>, Ticket)> {
        if self.failed.is_some() {
            return None;
        }
        match self.store.wait_durable(self.last_ticket) {
            Ok(()) => {}
            Err(StoreError::Wal(e)) if e.is_disk_full() => return None,
            Err(err) => {
                self.held.clear();
                self.failed = Some(err);
                return None;
            }
        }
        let mut out = Vec::new();
        while let Some((_, outputs)) = self.held.pop_front() {
            out.extend(outputs);
        }
        // As the broker task after each batch: page content out beyond the memory budget.
        self.broker
            .page_out(self.last_ticket, self.config.message_memory_bytes);
        Some((out, self.last_ticket))
    }

    /// A checkpoint now, synchronously (the store's thread does the same work).
    ///
    /// # Errors
    /// The store's error (a full disk: the partial file is gone, S-DISK-4).
    pub fn checkpoint(&mut self) -> Result<Option<CheckpointDone>, StoreError> {
        let result = self.store.checkpoint_now(self.broker.snapshot());
        // Compaction writes its copies to the log: a failed write or sync of them is a
        // failure of the log, fail-stop as any other (the server learns it from its next
        // durability wait).
        if self.failed.is_none()
            && let Some(err) = self.store.log_failure()
        {
            self.held.clear();
            self.failed = Some(err);
        }
        result
    }

    /// A clean stop as the server's: the shutdown checkpoint (unless the disk refuses it; it
    /// copies nothing forward, so it never writes to the log) and the log closed.
    ///
    /// # Errors
    /// The log's latched failure.
    pub fn stop(mut self) -> Result<(), StoreError> {
        let _ = self.store.checkpoint_at_shutdown(self.broker.snapshot());
        self.store.close()
    }

    /// The process dies: its file handles stop working, what it wrote stays.
    pub fn crash(self) {
        self.fence.crash();
        drop(self.store);
    }
}
