//! The outgoing side of one connection: a byte buffer that the broker task and the
//! connection's reader encode frames into, and the writer task that flushes it to the socket
//! in one `write_all` per batch (STYLE 2.3: batch socket writes). Must not depend on the broker
//! model: it moves bytes, nothing else.
//!
//! # The release gate (S-DUR-4, S-DLX-7)
//!
//! Nothing a client sees may run ahead of the log. The broker task appends a batch's frames
//! as an *open* segment ([`Outbox::append`]) and, once the batch's events are logged, seals it
//! with the store ticket that covers them ([`Outbox::seal`]). The writer writes only the
//! *released* prefix: sealed segments whose ticket the store reported durable
//! ([`Outbox::release`]). Segments are released strictly in order, so a frame never overtakes
//! an earlier held one of the same connection; frames the reader or the writer add themselves
//! ([`Outbox::send`]: handshake, heartbeats, a crossing `close-ok`) queue behind whatever is
//! held. The ticket is a plain number here; what it means is the broker task's business.
//!
//! Nothing here blocks the broker task: appending is a short critical section on a std mutex
//! (nothing is awaited while it is held, as mini-redis's `db.rs` explains). The buffer is
//! bounded by flow control instead of by blocking: when `queued_bytes` (held bytes included)
//! passes [`OUTBOX_HIGH_BYTES`] the broker task pauses the connection's channels
//! (`ChannelFlow`), and the writer reports when it has drained below [`OUTBOX_LOW_BYTES`].

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use wharf_protocol as protocol;
use wharf_store::Ticket;

/// Above this many queued outgoing bytes a connection's channels get no more deliveries.
pub const OUTBOX_HIGH_BYTES: usize = 4 * 1024 * 1024;
/// Above this many queued bytes the reader stops reading the client's socket until the writer
/// catches up (a client that publishes with confirms but never reads).
pub const OUTBOX_HARD_BYTES: usize = 4 * OUTBOX_HIGH_BYTES;
/// Bodies at least this large go out from where they are, not copied into the outbox.
pub const BODY_SPLICE_BYTES_MIN: usize = 64 * 1024;
/// Deliveries resume once the queued bytes fall below this.
pub const OUTBOX_LOW_BYTES: usize = 1024 * 1024;

/// Invariant: the outgoing bytes, `buf` with `splices` inserted, are
/// `[released | held segments | open]`, so
/// `buf.len() + spliced_bytes == released + sum(held lengths) + open`.
#[derive(Debug, Default)]
struct OutState {
    /// Frames not yet handed to the socket.
    buf: BytesMut,
    /// Large body payloads sent from where they are instead of copied into `buf` (S-BIG-3):
    /// each goes out just before the byte of `buf` numbered `at` (counting every byte ever
    /// appended to `buf`), in order.
    splices: VecDeque<(u64, Bytes)>,
    /// Bytes of `splices`.
    spliced_bytes: usize,
    /// Bytes of `buf` already taken by the writer (so `buf[0]` is byte number `taken`).
    taken: u64,
    /// Bytes at the front of `buf` the writer may write.
    released: usize,
    /// Sealed segments after the released prefix, in order: (bytes, ticket).
    held: VecDeque<(usize, Ticket)>,
    /// Bytes at the end of `buf` appended by the broker task in its current batch.
    open: usize,
    /// Bytes appended and not yet written (includes a chunk being written and held bytes).
    queued_bytes: usize,
    /// The broker task paused deliveries because of this connection's backlog.
    throttled: bool,
    /// The server sent `connection.close`: the reader must only wait for `close-ok`.
    closing: bool,
    /// Write what is released, then stop.
    finished: bool,
}

impl OutState {
    /// Moves held segments whose ticket is durable to the released prefix, in order; true if
    /// anything was released.
    fn release(&mut self, watermark: Ticket) -> bool {
        let before = self.released;
        while let Some(&(len, ticket)) = self.held.front() {
            if ticket > watermark {
                break;
            }
            self.released += len;
            self.held.pop_front();
        }
        self.released > before
    }

    /// Takes the released prefix for the writer: its pieces in order (stretches of `buf` and
    /// the splices between them) and their total length.
    fn take_released(&mut self) -> (Vec<Bytes>, usize) {
        let total = std::mem::take(&mut self.released);
        let mut left = total;
        let mut pieces = Vec::new();
        while left > 0 {
            let next = self.splices.front().map(|(at, data)| {
                let before = usize::try_from(at - self.taken).unwrap_or(usize::MAX);
                (before, data.len())
            });
            match next {
                // A splice inside the prefix (a release never ends inside a frame).
                Some((before, len)) if before + len <= left => {
                    if before > 0 {
                        pieces.push(self.buf.split_to(before).freeze());
                    }
                    let (_, data) = self.splices.pop_front().unwrap_or_default();
                    self.taken += before as u64;
                    self.spliced_bytes -= len;
                    left -= before + len;
                    pieces.push(data);
                }
                _ => {
                    pieces.push(self.buf.split_to(left).freeze());
                    self.taken += left as u64;
                    left = 0;
                }
            }
        }
        (pieces, total)
    }

    /// Appends a message body as body frames on `channel`: a large one is not copied, its
    /// frames' payloads are slices of `body`, spliced between their headers and frame ends.
    fn put_body(&mut self, channel: protocol::ChannelId, body: &Bytes, frame_max: u32) {
        if body.len() < BODY_SPLICE_BYTES_MIN {
            for chunk in body.chunks(protocol::body_chunk_bytes_max(frame_max)) {
                protocol::encode_body_frame(&mut self.buf, channel, chunk);
            }
            return;
        }
        let step = protocol::body_chunk_bytes_max(frame_max);
        let mut from = 0;
        while from < body.len() {
            let to = body.len().min(from + step);
            let (header, end) = protocol::body_frame_envelope(channel, to - from);
            self.buf.extend_from_slice(&header);
            let at = self.taken + self.buf.len() as u64;
            self.splices.push_back((at, body.slice(from..to)));
            self.spliced_bytes += to - from;
            self.buf.extend_from_slice(&[end]);
            from = to;
        }
    }

    /// Outgoing bytes not yet taken by the writer.
    fn len(&self) -> usize {
        self.buf.len() + self.spliced_bytes
    }

    fn check(&self) {
        let held: usize = self.held.iter().map(|&(len, _)| len).sum();
        debug_assert_eq!(
            self.buf.len() + self.spliced_bytes,
            self.released + held + self.open,
            "outbox segments do not add up"
        );
    }
}

/// The shared outgoing buffer of one connection.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<OutState>,
    /// Wakes the writer: bytes were released, or `finished` was set.
    wake_writer: Notify,
    /// Wakes the reader: `closing` was set.
    wake_reader: Notify,
    /// Wakes a reader waiting in [`Outbox::wait_below`]: the writer wrote a chunk.
    wrote: Notify,
    /// The reader holds a publish back because of a resource alarm (RabbitMQ's `blocked`
    /// connection state, shown by the management API).
    blocked: std::sync::atomic::AtomicBool,
    /// Bytes read from the socket (the reader counts them) and written to it (the writer).
    received_bytes: std::sync::atomic::AtomicU64,
    sent_bytes: std::sync::atomic::AtomicU64,
    /// The broker task slows this connection's publishes (S-FLOW-1): the reader reads its
    /// socket no further until this clears (RabbitMQ's `flow` connection state).
    flow: std::sync::atomic::AtomicBool,
    /// Wakes a reader pausing in [`Outbox::flow_pause`]: `flow` cleared, or `closing` set.
    flow_off: Notify,
}

impl Outbox {
    /// Counts `n` bytes read from the connection's socket.
    pub fn count_received(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.received_bytes
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes read from the socket and written to it so far: RabbitMQ's `recv_oct`, `send_oct`.
    pub fn traffic(&self) -> (u64, u64) {
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        (load(&self.received_bytes), load(&self.sent_bytes))
    }

    /// Records whether the reader is holding a publish back for a resource alarm.
    pub fn set_blocked(&self, on: bool) {
        self.blocked.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the reader is holding a publish back for a resource alarm.
    pub fn is_blocked(&self) -> bool {
        self.blocked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// S-FLOW-1: the broker task slows (or lets go) this connection's publishes.
    pub fn set_flow(&self, on: bool) {
        self.flow.store(on, std::sync::atomic::Ordering::Relaxed);
        if !on {
            self.flow_off.notify_waiters();
        }
    }

    /// Whether the broker task slows this connection's publishes (S-FLOW-1).
    pub fn in_flow(&self) -> bool {
        self.flow.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// S-FLOW-1/2: the reader's pause while the connection is in flow: until the broker task
    /// lets it go, the server closes it, or `max` passed (S-FLOW-2), whichever comes first.
    /// Returns at once when not in flow.
    pub async fn flow_pause(&self, max: Duration) {
        let released = async {
            loop {
                let off = self.flow_off.notified();
                if !self.in_flow() || self.is_closing() {
                    return;
                }
                off.await;
            }
        };
        if self.in_flow() {
            let _ = tokio::time::timeout(max, released).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        // A panic while holding this lock would be our bug; the buffer is still consistent
        // bytes (appends are single calls), so carry on with it rather than poison everyone.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The broker task appends frames written by `encode` to its open batch segment and gets
    /// the bytes now queued (held ones included). Nothing is written before the batch is
    /// sealed ([`Outbox::seal`]) and released.
    pub fn append(&self, encode: impl FnOnce(&mut BytesMut)) -> usize {
        let mut s = self.lock();
        if s.finished {
            return s.queued_bytes;
        }
        let before = s.buf.len();
        encode(&mut s.buf);
        let added = s.buf.len() - before;
        s.open += added;
        s.queued_bytes += added;
        s.queued_bytes
    }

    /// As [`Outbox::append`] for a content: `head` encodes what comes before the body (the
    /// method and content header frames), then the body goes out in frames of at most
    /// `frame_max` on `channel`, its payload sent from `body` itself when it is large, not
    /// copied (S-BIG-3).
    pub fn append_content(
        &self,
        head: impl FnOnce(&mut BytesMut),
        channel: protocol::ChannelId,
        body: &Bytes,
        frame_max: u32,
    ) -> usize {
        let mut s = self.lock();
        if s.finished {
            return s.queued_bytes;
        }
        let before = s.len();
        head(&mut s.buf);
        s.put_body(channel, body, frame_max);
        let added = s.len() - before;
        s.open += added;
        s.queued_bytes += added;
        s.queued_bytes
    }

    /// Seals the broker task's open batch segment with `ticket` (the log position that must be
    /// durable before its frames may be seen), releases what `watermark` allows and wakes the
    /// writer if anything was released. Returns true while anything stays held.
    pub fn seal(&self, ticket: Ticket, watermark: Ticket) -> bool {
        let mut s = self.lock();
        if s.open > 0 {
            let open = std::mem::take(&mut s.open);
            match s.held.back_mut() {
                // Same ticket as the segment before: one segment (tickets never decrease).
                Some(last) if last.1 >= ticket => last.0 += open,
                _ => s.held.push_back((open, ticket)),
            }
        }
        let released = s.release(watermark);
        s.check();
        let holding = !s.held.is_empty();
        drop(s);
        if released {
            self.wake_writer.notify_one();
        }
        holding
    }

    /// Releases the held segments whose ticket is at most `watermark` (durable), in order, and
    /// wakes the writer if anything was released. Returns true while anything stays held.
    pub fn release(&self, watermark: Ticket) -> bool {
        let mut s = self.lock();
        let released = s.release(watermark);
        let holding = !s.held.is_empty();
        drop(s);
        if released {
            self.wake_writer.notify_one();
        }
        holding
    }

    /// Drops every byte not yet released (the log failed: what they showed will never be
    /// durable), so that what is appended next (the connection's close) is all that follows.
    pub fn discard_unreleased(&self) {
        let mut s = self.lock();
        let dropped = s.len() - s.released;
        // The splices inside the released prefix stay; the rest go with the bytes around them.
        let mut kept_spliced = 0;
        let mut kept = 0;
        for (at, data) in &s.splices {
            let before = usize::try_from(at - s.taken).unwrap_or(usize::MAX);
            if before + kept_spliced >= s.released {
                break;
            }
            kept_spliced += data.len();
            kept += 1;
        }
        s.splices.truncate(kept);
        s.spliced_bytes = kept_spliced;
        let keep = s.released - kept_spliced;
        s.buf.truncate(keep);
        s.held.clear();
        s.open = 0;
        s.queued_bytes = s.queued_bytes.saturating_sub(dropped);
        s.check();
    }

    /// Wakes the writer (after a batch, or for the close frame).
    pub fn flush(&self) {
        self.wake_writer.notify_one();
    }

    /// Appends frames of the reader or the writer (handshake, heartbeat, a crossing
    /// `close-ok`) and wakes the writer. They keep the connection's order: behind the broker
    /// task's open segment (sealed with it) or behind the last held segment (released with
    /// it), and released at once when nothing is held.
    pub fn send(&self, encode: impl FnOnce(&mut BytesMut)) {
        {
            let mut s = self.lock();
            if s.finished {
                return;
            }
            let before = s.buf.len();
            encode(&mut s.buf);
            let added = s.buf.len() - before;
            s.queued_bytes += added;
            if s.open > 0 {
                s.open += added;
            } else if let Some(last) = s.held.back_mut() {
                last.0 += added;
            } else {
                s.released += added;
            }
            s.check();
        }
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
        self.flow_off.notify_waiters();
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

    /// Tells the writer to write what is released and then stop; later appends are dropped,
    /// and so are bytes still held (the peer is gone or done).
    pub fn finish(&self) {
        self.lock().finished = true;
        self.wake_writer.notify_one();
    }
}

/// What the writer needs besides the outbox. `M` is the message type of whoever throttles the
/// connection (the broker task); the outbox only hands it `drained(conn)` and knows nothing
/// of what it means.
pub struct WriterCtx<M> {
    /// The connection's id, passed to `drained`.
    pub conn: u64,
    /// Where to tell that a throttled connection drained below [`OUTBOX_LOW_BYTES`].
    pub notify: mpsc::Sender<M>,
    /// The message that says so.
    pub drained: fn(u64) -> M,
    /// Send a heartbeat after this long without writing anything (None: heartbeats off).
    pub heartbeat: tokio::sync::watch::Receiver<Option<Duration>>,
}

/// The writer task: flushes the outbox to the socket (TCP or TLS), one `write_all` per batch, and sends
/// heartbeats when idle. Ends when the outbox is finished and empty, or on a write error
/// (then the reader notices the closed socket).
pub async fn run_writer<W: AsyncWrite + Unpin, M>(
    outbox: std::sync::Arc<Outbox>,
    mut sock: W,
    ctx: WriterCtx<M>,
) {
    let mut beats = Heartbeats::default();
    loop {
        let (pieces, written, finished) = {
            let mut s = outbox.lock();
            let (pieces, written) = s.take_released();
            (pieces, written, s.finished)
        };
        if written == 0 {
            if finished {
                break;
            }
            let notified = outbox.wake_writer.notified();
            let interval = *ctx.heartbeat.borrow();
            match beats.follow(interval) {
                Some(tick) => {
                    tokio::select! {
                        () = notified => {}
                        () = tick => {
                            if beats.ticked() {
                                outbox.send(protocol::encode_heartbeat);
                            }
                        }
                    }
                }
                None => notified.await,
            }
            continue;
        }
        beats.wrote = true;
        if write_pieces(&mut sock, pieces).await.is_err() {
            break;
        }
        outbox
            .sent_bytes
            .fetch_add(written as u64, std::sync::atomic::Ordering::Relaxed);
        outbox.wrote.notify_one();
        let drained = {
            let mut s = outbox.lock();
            s.queued_bytes = s.queued_bytes.saturating_sub(written);
            let drained = s.throttled && s.queued_bytes < OUTBOX_LOW_BYTES;
            if drained {
                s.throttled = false;
            }
            drained
        };
        if drained && ctx.notify.send((ctx.drained)(ctx.conn)).await.is_err() {
            break;
        }
    }
    let _ = sock.shutdown().await;
    outbox.finish();
    outbox.wrote.notify_one();
}

/// The writer's heartbeats with one timer per connection, not one per wait (issue 18: the
/// writer waits once per batch it writes): the timer ticks every half interval, and a tick
/// that finds nothing written since the one before sends a heartbeat, so the client hears
/// from us at least once per interval (RabbitMQ sends them about every half interval).
#[derive(Default)]
struct Heartbeats {
    /// The negotiated interval and its ticking timer.
    timer: Option<(Duration, std::pin::Pin<Box<tokio::time::Sleep>>)>,
    /// Something was written since the last tick.
    wrote: bool,
}

impl Heartbeats {
    /// Follows the negotiated interval (`None`: heartbeats off); the tick to wait for.
    fn follow(
        &mut self,
        interval: Option<Duration>,
    ) -> Option<&mut std::pin::Pin<Box<tokio::time::Sleep>>> {
        match interval {
            None => self.timer = None,
            Some(interval) if self.timer.as_ref().is_none_or(|(i, _)| *i != interval) => {
                self.timer = Some((interval, Box::pin(tokio::time::sleep(interval / 2))));
            }
            Some(_) => {}
        }
        self.timer.as_mut().map(|(_, tick)| tick)
    }

    /// The timer ticked: re-armed for the next half interval; whether to send a heartbeat.
    fn ticked(&mut self) -> bool {
        if let Some((interval, tick)) = self.timer.as_mut() {
            tick.set(tokio::time::sleep(*interval / 2));
        }
        !std::mem::take(&mut self.wrote)
    }
}

/// Writes `pieces` in order, one `write_all` each: a batch without a spliced body is one
/// piece; a spliced body's payloads go out from the message itself.
async fn write_pieces<W: AsyncWrite + Unpin>(
    sock: &mut W,
    pieces: Vec<Bytes>,
) -> std::io::Result<()> {
    for piece in pieces {
        sock.write_all(&piece).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the writer may write now (what `run_writer` would take).
    fn writable(outbox: &Outbox) -> Vec<u8> {
        let mut s = outbox.lock();
        let (pieces, written) = s.take_released();
        s.queued_bytes -= written;
        pieces.concat()
    }

    fn put(bytes: &'static [u8]) -> impl FnOnce(&mut BytesMut) {
        move |buf: &mut BytesMut| buf.extend_from_slice(bytes)
    }

    #[test]
    fn s_dur_4_a_batch_is_written_only_once_its_ticket_is_durable() {
        let outbox = Outbox::default();
        outbox.append(put(b"deliver"));
        assert!(writable(&outbox).is_empty(), "nothing before the seal");
        assert!(outbox.seal(7, 6), "ticket 7 is not durable at watermark 6");
        assert!(writable(&outbox).is_empty());
        assert!(!outbox.release(7));
        assert_eq!(writable(&outbox), b"deliver");
    }

    #[test]
    fn held_segments_are_released_in_order_and_never_overtaken() {
        let outbox = Outbox::default();
        outbox.append(put(b"a"));
        assert!(outbox.seal(5, 0));
        outbox.append(put(b"b"));
        assert!(outbox.seal(9, 0));
        // The reader's own frame (a crossing close-ok) queues behind the held ones.
        outbox.send(put(b"c"));
        // A batch that logged nothing still waits behind earlier held frames.
        outbox.append(put(b"d"));
        assert!(outbox.seal(9, 0));
        assert!(outbox.release(5));
        assert_eq!(writable(&outbox), b"a");
        assert!(!outbox.release(9));
        assert_eq!(writable(&outbox), b"bcd");
        // Nothing held: the reader's frames go at once.
        outbox.send(put(b"e"));
        assert_eq!(writable(&outbox), b"e");
    }

    #[test]
    fn frames_sent_during_an_open_batch_are_sealed_with_it() {
        let outbox = Outbox::default();
        outbox.append(put(b"reply"));
        outbox.send(put(b"heartbeat"));
        assert!(writable(&outbox).is_empty(), "the open batch is not sealed");
        assert!(!outbox.seal(3, 3));
        assert_eq!(writable(&outbox), b"replyheartbeat");
    }

    #[test]
    fn held_bytes_count_towards_the_flow_control_bounds() {
        let outbox = Outbox::default();
        let queued = outbox.append(|buf| buf.extend_from_slice(&[0; 100]));
        assert_eq!(queued, 100);
        outbox.seal(2, 1);
        assert_eq!(outbox.append(put(b"x")), 101);
        assert_eq!(outbox.lock().queued_bytes, 101);
    }

    #[test]
    fn a_failed_log_discards_what_is_held_and_keeps_what_was_released() {
        let outbox = Outbox::default();
        outbox.append(put(b"old"));
        outbox.seal(1, 1);
        outbox.append(put(b"held"));
        outbox.seal(2, 1);
        outbox.append(put(b"open"));
        outbox.discard_unreleased();
        outbox.append(put(b"close"));
        assert!(!outbox.seal(0, 0));
        assert_eq!(writable(&outbox), b"oldclose");
        assert_eq!(outbox.lock().queued_bytes, 0);
    }

    /// S-BIG-3: a large body goes out as body frames whose payloads are slices of the body
    /// itself (not copied into the buffer), in order with the frames around it, held and
    /// released like any other; a discarded batch takes its spliced body with it.
    #[test]
    fn s_big_3_a_large_body_is_sent_from_where_it_is_in_frame_order() {
        let outbox = Outbox::default();
        let body: Bytes = (0..=250u8).cycle().take(300_000).collect::<Vec<_>>().into();
        let frame_max = 131_072;
        let ch = protocol::ChannelId(5);
        outbox.append(put(b"before"));
        let queued =
            outbox.append_content(|buf| buf.extend_from_slice(b"head"), ch, &body, frame_max);
        let mut expected = BytesMut::new();
        expected.extend_from_slice(b"beforehead");
        for chunk in body.chunks(protocol::body_chunk_bytes_max(frame_max)) {
            protocol::encode_body_frame(&mut expected, ch, chunk);
        }
        assert_eq!(queued, expected.len());
        assert!(outbox.lock().buf.len() < 1024, "the body was not copied");
        outbox.append(put(b"after"));
        assert!(outbox.seal(4, 3));
        assert!(
            writable(&outbox).is_empty(),
            "held until its ticket is durable"
        );
        assert!(!outbox.release(4));
        outbox.append_content(|_| {}, ch, &body, frame_max);
        outbox.discard_unreleased();
        expected.extend_from_slice(b"after");
        assert_eq!(writable(&outbox), expected.to_vec());
        let s = outbox.lock();
        assert_eq!(
            (s.queued_bytes, s.spliced_bytes, s.splices.len()),
            (0, 0, 0)
        );
    }
}
