//! Reading and writing length-prefixed frames on a socket (docs/CLUSTER-WIRE.md). A frame's
//! length is checked against its bound before any of its body is read, and the body
//! is read as it arrives (never allocated from the length alone), so a peer sending garbage
//! costs what it sends.

use std::io;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use wharf_wal::le;

use super::wire::{self, FRAME_HEADER_BYTES, Frame};

/// The most a connection's read buffer grows by for one read: a frame's length alone never
/// allocates more than this before its bytes come.
const READ_CHUNK: usize = 64 * 1024;
/// Spare room below which the read buffer makes more before a read, so that the small frames
/// that arrived together (replies, votes) are taken in one read.
const READ_SPARE_MIN: usize = 16 * 1024;
/// The most a connection's read buffer keeps between frames: room for the entries a leader
/// sends at once (`wire::APPEND_BYTES_SOFT`) and their framing; a larger one is let go at the
/// next read (the frame it holds is the caller's until then).
const READ_KEEP_BYTES: usize = wire::APPEND_BYTES_SOFT + 64 * 1024;

/// Reads a connection's frames through one buffer, kept from frame to frame: a frame's bytes
/// are not allocated again each time (a leader's appends are hundreds of kilobytes each, and a
/// fresh buffer that size costs more to fault in than to fill), and the frames that arrived
/// together come in one read (reading a length, then its frame, took three system calls a
/// frame).
#[derive(Default)]
pub struct FrameReader {
    buf: BytesMut,
    /// The bytes of the frame handed out last (its length field included), let go at the next
    /// read.
    taken: usize,
}

impl FrameReader {
    /// Reads one frame (without its length field) of at most `max` bytes
    /// (`wire::FRAME_BYTES_MAX`, or `wire::HELLO_BYTES_MAX` for a connection's first frame);
    /// `None` at a clean end of the stream. The frame is valid until the next read. Bytes
    /// after the frame may be read with it and are kept for the next: the reader must stay
    /// the stream's only reader ([`read_frame`] reads exactly one frame).
    ///
    /// # Errors
    /// The socket's errors; a length under the header or over `max` (`InvalidData`); a stream
    /// that ends inside a frame (`UnexpectedEof`).
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        max: usize,
    ) -> io::Result<Option<&[u8]>> {
        self.buf.advance(self.taken);
        self.taken = 0;
        if self.buf.capacity() > READ_KEEP_BYTES && self.buf.len() <= READ_CHUNK {
            let mut kept = BytesMut::with_capacity(READ_CHUNK);
            kept.extend_from_slice(&self.buf);
            self.buf = kept;
        }
        // The stream may end cleanly before a frame, never inside its length.
        while self.buf.len() < 4 {
            if self.fill(r, 4).await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(ended_inside("a frame's length"));
            }
        }
        let whole = 4 + frame_len(&self.buf, max)?;
        while self.buf.len() < whole {
            if self.fill(r, whole).await? == 0 {
                return Err(ended_inside("a frame"));
            }
        }
        self.taken = whole;
        Ok(self.buf.get(4..whole))
    }

    /// One read of what the stream has, toward `want` bytes buffered: the buffer grows only
    /// when little room is left, by what the frame still lacks, at most [`READ_CHUNK`].
    async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R, want: usize) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_SPARE_MIN {
            let lacking = want.saturating_sub(self.buf.len());
            self.buf.reserve(lacking.clamp(READ_SPARE_MIN, READ_CHUNK));
        }
        r.read_buf(&mut self.buf).await
    }
}

/// Reads exactly one frame as [`FrameReader::next`] does, into a buffer of its own, and not a
/// byte past it: a caller may go on using the stream (a connection reading frame after frame
/// keeps a [`FrameReader`]).
///
/// # Errors
/// [`FrameReader::next`]'s.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let [first, rest @ ..] = &mut len;
    match r.read_u8().await {
        Ok(byte) => *first = byte,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(rest).await.map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ended_inside("a frame's length"),
        _ => e,
    })?;
    let len = frame_len(&len, max)?;
    let mut frame = Vec::with_capacity(len.min(READ_CHUNK));
    r.take(len as u64).read_to_end(&mut frame).await?;
    if frame.len() == len {
        Ok(Some(frame))
    } else {
        Err(ended_inside("a frame"))
    }
}

/// The length a frame's first four bytes give, if within `FRAME_HEADER_BYTES..=max`.
fn frame_len(prefix: &[u8], max: usize) -> io::Result<usize> {
    let len = le::u32_at(prefix, 0).map_or(0, |l| usize::try_from(l).unwrap_or(usize::MAX));
    if (FRAME_HEADER_BYTES..=max).contains(&len) {
        Ok(len)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame length {len} outside {FRAME_HEADER_BYTES}..={max}"),
        ))
    }
}

/// The error of a stream that ended inside `what`.
fn ended_inside(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the stream ended inside {what}"),
    )
}

/// Writes the frames `rx` hands it, in order, each with one vectored write of its head and
/// body (or through the buffer, a small one), flushing when none is waiting; ends when every
/// sender is gone or the socket fails.
pub async fn write_frames<W: AsyncWrite + Unpin>(w: W, mut rx: mpsc::Receiver<Frame>) {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, w);
    while let Some(frame) = rx.recv().await {
        if write_frame(&mut w, frame).await.is_err() {
            return;
        }
        while let Ok(frame) = rx.try_recv() {
            if write_frame(&mut w, frame).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// What a connection's writer gathers before a write: small frames (replies, votes) share
/// one; a larger frame goes out in a write of its own.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut BufWriter<W>, frame: Frame) -> io::Result<()> {
    let mut bytes = Buf::chain(frame.head.as_slice(), frame.body);
    w.write_all_buf(&mut bytes).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::wire::{FRAME_BYTES_MAX, Kind};

    fn frame(id: u64, body_len: usize) -> Frame {
        let body: Vec<u8> = (0..body_len).map(|i| (i % 251).to_le_bytes()[0]).collect();
        wire::frame(Kind::Vote, id, 1, 2, body.into()).unwrap()
    }

    /// Frames written by `write_frames` read back whole and in order through one reader, a
    /// large one between small ones included: the kept buffer never shows a byte of the frame
    /// before, and a frame past what it keeps is let go after it.
    #[tokio::test]
    async fn frames_read_back_whole_and_in_order_through_one_buffer() {
        let sizes = [0, 700_000, 10, READ_KEEP_BYTES + 1, 3, 300_000, 0];
        let (w, mut r) = tokio::io::duplex(64 * 1024);
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_frames(w, rx));
        let sent: Vec<Frame> = (0u64..).zip(sizes).map(|(id, n)| frame(id, n)).collect();
        let feeding = {
            let sent = sent.clone();
            tokio::spawn(async move {
                for f in sent {
                    tx.send(f).await.unwrap();
                }
            })
        };
        let mut frames = FrameReader::default();
        for (f, n) in sent.iter().zip(sizes) {
            let got = frames.next(&mut r, FRAME_BYTES_MAX).await.unwrap().unwrap();
            assert_eq!(got, &f.to_vec()[4..], "a frame of {n} bytes");
            let (header, body) = wire::split(got).unwrap();
            assert_eq!(
                (header.kind, header.group, header.target, body.len()),
                (Kind::Vote, 1, 2, n)
            );
        }
        assert!(
            frames.buf.capacity() <= READ_KEEP_BYTES,
            "the large frame's buffer is let go"
        );
        feeding.await.unwrap();
        writer.await.unwrap();
        assert!(
            frames
                .next(&mut r, FRAME_BYTES_MAX)
                .await
                .unwrap()
                .is_none(),
            "a clean end"
        );
    }

    /// Counts the reads made of a byte slice.
    struct Counted<'a> {
        inner: &'a [u8],
        reads: usize,
    }

    impl tokio::io::AsyncRead for Counted<'_> {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let this = self.get_mut();
            this.reads += 1;
            std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
        }
    }

    /// Small frames that arrived together are taken in one read (replies and votes came at
    /// three reads a frame); `read_frame` takes one frame and not a byte more.
    #[tokio::test]
    async fn frames_that_came_together_take_one_read_and_read_frame_takes_one() {
        let bytes: Vec<u8> = (0..50).flat_map(|id| frame(id, 27).to_vec()).collect();
        let mut r = Counted {
            inner: &bytes,
            reads: 0,
        };
        let mut frames = FrameReader::default();
        for id in 0..50 {
            let got = frames.next(&mut r, FRAME_BYTES_MAX).await.unwrap().unwrap();
            assert_eq!(wire::split(got).unwrap().0.id, id);
        }
        assert!(
            frames
                .next(&mut r, FRAME_BYTES_MAX)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(r.reads, 2, "one read for the 50 frames, one for the end");

        let mut rest: &[u8] = &bytes;
        let first = read_frame(&mut rest, FRAME_BYTES_MAX)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wire::split(&first).unwrap().0.id, 0);
        assert_eq!(
            rest.len(),
            bytes.len() - first.len() - 4,
            "nothing read past it"
        );
    }

    /// S-ERR-2: a length under the header or over the bound is refused before a byte of the
    /// body is read, a stream cut inside a frame is an error, and a length alone never
    /// allocates more than a chunk beyond the bytes that came.
    #[tokio::test]
    async fn a_frame_out_of_bounds_or_cut_short_is_an_error() {
        for len in [0, FRAME_HEADER_BYTES - 1, 65].map(|l| u32::try_from(l).unwrap()) {
            let mut bytes: &[u8] = &len.to_le_bytes();
            let e = FrameReader::default()
                .next(&mut bytes, 64)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "length {len}");
        }

        let mut cut = u32::try_from(FRAME_BYTES_MAX)
            .unwrap()
            .to_le_bytes()
            .to_vec();
        cut.extend_from_slice(&[0x11; 40]);
        let mut frames = FrameReader::default();
        let e = frames
            .next(&mut cut.as_slice(), FRAME_BYTES_MAX)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(
            frames.buf.capacity() <= cut.len() + READ_CHUNK,
            "allocated from the length alone: {}",
            frames.buf.capacity()
        );

        let whole = frame(1, 5).to_vec();
        let mut half: &[u8] = &whole[..2];
        let e = FrameReader::default()
            .next(&mut half, FRAME_BYTES_MAX)
            .await
            .unwrap_err();
        assert_eq!(
            e.kind(),
            io::ErrorKind::UnexpectedEof,
            "cut inside the length"
        );
    }
}
