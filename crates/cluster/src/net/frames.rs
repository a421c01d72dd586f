//! Reading and writing length-prefixed frames on a socket (docs/CLUSTER-WIRE.md). A frame's
//! length is checked against its bound before any of its body is read, and the body
//! is read as it arrives (never allocated from the length alone), so a peer sending garbage
//! costs what it sends.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use wharf_wal::le;

use super::wire::FRAME_HEADER_BYTES;

/// What a read buffer starts with at most (it grows as bytes arrive).
const READ_CHUNK: usize = 64 * 1024;

/// Reads one frame (without its length field) of at most `max` bytes (`wire::FRAME_BYTES_MAX`,
/// or `wire::HELLO_BYTES_MAX` for a connection's first frame); `None` at a clean end of the stream.
///
/// # Errors
/// The socket's errors; a length under the header or over `max` (`InvalidData`); a stream
/// that ends inside a frame (`UnexpectedEof`).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = le::u32_at(&len, 0).map_or(0, |l| usize::try_from(l).unwrap_or(usize::MAX));
    if !(FRAME_HEADER_BYTES..=max).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame length {len} outside {FRAME_HEADER_BYTES}..={max}"),
        ));
    }
    let mut buf = Vec::with_capacity(len.min(READ_CHUNK));
    r.take(len as u64).read_to_end(&mut buf).await?;
    if buf.len() == len {
        Ok(Some(buf))
    } else {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the stream ended inside a frame",
        ))
    }
}

/// Writes the frames `rx` hands it (each already length-prefixed), in order, flushing when
/// none is waiting; ends when every sender is gone or the socket fails.
pub async fn write_frames<W: AsyncWrite + Unpin>(w: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut w = BufWriter::new(w);
    while let Some(frame) = rx.recv().await {
        if w.write_all(&frame).await.is_err() {
            return;
        }
        while let Ok(frame) = rx.try_recv() {
            if w.write_all(&frame).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}
