//! The outgoing side of one connection: a byte buffer that the broker task and the
//! connection's reader encode frames into, and the writer task that flushes it to the socket
//! in one `write_all` per batch (STYLE 2.3: batch socket writes). Must not depend on the broker
//! model: it moves bytes, nothing else.
//!
//! Nothing here blocks the broker task: appending is a short critical section on a std mutex
//! (nothing is awaited while it is held, as mini-redis's `db.rs` explains). The buffer is
//! bounded by flow control instead of by blocking: when `queued_bytes` passes
//! [`OUTBOX_HIGH_BYTES`] the broker task pauses the connection's channels (`ChannelFlow`), and
//! the writer reports when it has drained below [`OUTBOX_LOW_BYTES`].

use std::sync::Mutex;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use super::core::CoreMsg;
use crate::protocol;

/// Above this many queued outgoing bytes a connection's channels get no more deliveries.
pub const OUTBOX_HIGH_BYTES: usize = 4 * 1024 * 1024;
/// Above this many queued bytes the reader stops reading the client's socket until the writer
/// catches up (a client that publishes with confirms but never reads).
pub const OUTBOX_HARD_BYTES: usize = 4 * OUTBOX_HIGH_BYTES;
/// Deliveries resume once the queued bytes fall below this.
pub const OUTBOX_LOW_BYTES: usize = 1024 * 1024;

#[derive(Debug, Default)]
struct OutState {
    /// Frames not yet handed to the socket.
    buf: BytesMut,
    /// Bytes appended and not yet written (includes a chunk being written).
    queued_bytes: usize,
    /// The broker task paused deliveries because of this connection's backlog.
    throttled: bool,
    /// The server sent `connection.close`: the reader must only wait for `close-ok`.
    closing: bool,
    /// Write what is queued, then stop.
    finished: bool,
}

/// The shared outgoing buffer of one connection.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<OutState>,
    /// Wakes the writer: bytes were appended, or `finished` was set.
    wake_writer: Notify,
    /// Wakes the reader: `closing` was set.
    wake_reader: Notify,
    /// Wakes a reader waiting in [`Outbox::wait_below`]: the writer wrote a chunk.
    wrote: Notify,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        // A panic while holding this lock would be our bug; the buffer is still consistent
        // bytes (appends are single calls), so carry on with it rather than poison everyone.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends frames written by `encode` and returns the bytes now queued. The writer is not
    /// woken: call [`Outbox::flush`] once a batch is complete.
    pub fn append(&self, encode: impl FnOnce(&mut BytesMut)) -> usize {
        let mut s = self.lock();
        if s.finished {
            return s.queued_bytes;
        }
        let before = s.buf.len();
        encode(&mut s.buf);
        s.queued_bytes += s.buf.len() - before;
        s.queued_bytes
    }

    /// Wakes the writer to send what was appended.
    pub fn flush(&self) {
        self.wake_writer.notify_one();
    }

    /// Appends and flushes at once (for the reader's own replies).
    pub fn send(&self, encode: impl FnOnce(&mut BytesMut)) {
        self.append(encode);
        self.flush();
    }

    /// Marks the connection as paused for backlog; the writer reports when it drained.
    pub fn set_throttled(&self) {
        self.lock().throttled = true;
    }

    /// Marks that the server sent `connection.close` and wakes the reader.
    pub fn set_closing(&self) {
        self.lock().closing = true;
        self.wake_reader.notify_one();
        self.flush();
    }

    /// True once the server sent `connection.close`.
    pub fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// Resolves when the server starts closing the connection (see [`Outbox::set_closing`]).
    pub async fn closing(&self) {
        loop {
            let notified = self.wake_reader.notified();
            if self.is_closing() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once fewer than `bytes_max` bytes are queued (or the outbox is finished).
    pub async fn wait_below(&self, bytes_max: usize) {
        loop {
            let wrote = self.wrote.notified();
            {
                let s = self.lock();
                if s.queued_bytes < bytes_max || s.finished || s.closing {
                    return;
                }
            }
            wrote.await;
        }
    }

    /// Tells the writer to write what is queued and then stop; later appends are dropped.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.wake_writer.notify_one();
    }
}

/// What the writer needs besides the outbox.
pub struct WriterCtx {
    /// The connection's id, for `CoreMsg::Drained`.
    pub conn: u64,
    /// To tell the broker task that a throttled connection drained.
    pub core: mpsc::Sender<CoreMsg>,
    /// Send a heartbeat after this long without writing anything (None: heartbeats off).
    pub heartbeat: tokio::sync::watch::Receiver<Option<Duration>>,
}

/// The writer task: flushes the outbox to the socket (TCP or TLS), one `write_all` per batch, and sends
/// heartbeats when idle. Ends when the outbox is finished and empty, or on a write error
/// (then the reader notices the closed socket).
pub async fn run_writer<W: AsyncWrite + Unpin>(
    outbox: std::sync::Arc<Outbox>,
    mut sock: W,
    ctx: WriterCtx,
) {
    loop {
        let (chunk, finished) = {
            let mut s = outbox.lock();
            (s.buf.split(), s.finished)
        };
        if chunk.is_empty() {
            if finished {
                break;
            }
            let idle = *ctx.heartbeat.borrow();
            let notified = outbox.wake_writer.notified();
            match idle {
                Some(interval) => {
                    if tokio::time::timeout(interval, notified).await.is_err() {
                        outbox.append(protocol::encode_heartbeat);
                    }
                }
                None => notified.await,
            }
            continue;
        }
        if sock.write_all(&chunk).await.is_err() {
            break;
        }
        outbox.wrote.notify_one();
        let drained = {
            let mut s = outbox.lock();
            s.queued_bytes = s.queued_bytes.saturating_sub(chunk.len());
            let drained = s.throttled && s.queued_bytes < OUTBOX_LOW_BYTES;
            if drained {
                s.throttled = false;
            }
            drained
        };
        if drained && ctx.core.send(CoreMsg::Drained(ctx.conn)).await.is_err() {
            break;
        }
    }
    let _ = sock.shutdown().await;
    outbox.finish();
    outbox.wrote.notify_one();
}
