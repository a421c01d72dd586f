//! Large bodies written to the log's directory as they arrive (S-BIG-3): the content
//! assemblers' [`BodySpooler`] over the WAL's [`Spooler`]. A spool that cannot be opened (a
//! full disk) leaves the body to be gathered in memory, as any other, so the disk alarm and
//! the log's own full-disk handling (S-DISK) decide what happens next, unchanged.
//!
//! The spool's writes are plain positional writes into the page cache, made on the
//! connection's task: one per body frame (at most `frame_max` octets).

use bytes::Bytes;
use wharf_protocol::{BodySpool, BodySpooler};
use wharf_wal::{Spool, Spooler};

/// The WAL's spooler, as the content assemblers see it.
#[derive(Debug)]
pub(crate) struct LogSpooler(pub(crate) Spooler);

impl BodySpooler for LogSpooler {
    fn open(&self, body_bytes: u64) -> Option<Box<dyn BodySpool>> {
        match self.0.open(body_bytes) {
            Ok(spool) => Some(Box::new(LogSpool(spool))),
            Err(error) => {
                tracing::debug!(%error, body_bytes, "no spool for a large body; gathered in memory");
                None
            }
        }
    }
}

#[derive(Debug)]
struct LogSpool(Spool);

impl BodySpool for LogSpool {
    fn write(&mut self, piece: &[u8]) -> std::io::Result<()> {
        self.0.write(piece).inspect_err(|error| {
            tracing::warn!(%error, "writing a large body to its spool failed; gathered in memory");
        })
    }

    fn finish(self: Box<Self>) -> std::io::Result<Bytes> {
        self.0.finish()
    }

    fn read_back(self: Box<Self>) -> std::io::Result<Vec<u8>> {
        self.0.read_back()
    }
}
