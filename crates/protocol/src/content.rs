//! Content assembly for one channel: a content-bearing method (`basic.publish`, and for a client
//! `basic.deliver`, `basic.return`, `basic.get-ok`), then a content header, then body frames
//! until the announced size is reached, yield one [`Content`]. The state machine follows
//! RabbitMQ's `rabbit_command_assembler` (same checks, same reply codes, same texts), with the
//! body size checked against the configured maximum when the header arrives, before any body
//! octet is buffered. One difference: RabbitMQ refuses a content header whose weight is not 0;
//! amq-protocol's parser ignores the weight, and so does ours, which must accept what it
//! accepts. No tokio, no broker.
//!
//! A body of at least [`SPOOL_BODY_BYTES_MIN`] octets goes to a [`BodySpool`] as it arrives
//! when the assembler was given a [`BodySpooler`] (the server's: a file in the log directory,
//! S-BIG-3), so that it is not held in memory on its way to the log; without one, or when the
//! spooler has no room, it is gathered in memory.

use std::sync::Arc;

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, basic};
use bytes::Bytes;

use super::error::{FrameMismatch, ProtocolError};
use super::frame::{ChannelId, Frame};
use wharf_base::limits;

/// A body split over several frames is gathered into a buffer that starts at most this large
/// and grows with what actually arrives, so a header announcing 16 MiB followed by nothing
/// costs nothing: memory follows the octets received, not the octets announced.
pub const BODY_PREALLOC_BYTES_MAX: usize = 1024 * 1024;

/// Bodies at least this long are spooled as they arrive, when a spooler is set (S-BIG-3): the
/// size from which S-BIG-3 calls a message large. Below it a body is at most one allocation
/// of this size, and a few frames of the default `frame_max`.
pub const SPOOL_BODY_BYTES_MIN: u64 = 1024 * 1024;

/// Opens a spool for a large body when its content header arrives (S-BIG-3).
pub trait BodySpooler: Send + Sync + std::fmt::Debug {
    /// A spool for a body of `body_bytes` octets, or `None` when there is no room for it (the
    /// body is then gathered in memory).
    fn open(&self, body_bytes: u64) -> Option<Box<dyn BodySpool>>;
}

/// Where a large body is written as it arrives.
pub trait BodySpool: Send + Sync + std::fmt::Debug {
    /// Writes the next body frame's octets.
    ///
    /// # Errors
    /// The write failed (the caller reads back what was written and gathers the rest).
    fn write(&mut self, piece: &[u8]) -> std::io::Result<()>;

    /// The whole body, once every octet was written.
    ///
    /// # Errors
    /// It cannot be made into one.
    fn finish(self: Box<Self>) -> std::io::Result<Bytes>;

    /// What was written so far, back in memory; the spool is given up.
    ///
    /// # Errors
    /// It cannot be read.
    fn read_back(self: Box<Self>) -> std::io::Result<Vec<u8>>;
}

/// One complete message as it came over the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    /// The content-bearing method (for the server: `basic.publish`).
    pub method: AMQPClass,
    /// The content header as decoded: class id, body size and the basic properties
    /// (`header.properties`). Boxed, as it is in [`Frame::Header`], so that it moves as a
    /// pointer from the decoder to the broker.
    pub header: Box<AMQPContentHeader>,
    /// The body, exactly as many octets as the content header announced.
    pub body: Bytes,
}

/// What one frame completed, if anything.
#[derive(Debug, Clone, PartialEq)]
pub enum Assembled {
    /// A method without content, ready to handle.
    Method(AMQPClass),
    /// A content-bearing method with its properties and body.
    Content(Content),
}

/// The state of one channel's content assembly.
#[derive(Debug, Default)]
enum State {
    /// Expecting a method.
    #[default]
    Method,
    /// A content-bearing method came; expecting its content header.
    Header { method: AMQPClass },
    /// Header came; expecting `remaining_bytes` more body octets.
    Body {
        method: AMQPClass,
        header: Box<AMQPContentHeader>,
        remaining_bytes: u64,
        body: BodyBuffer,
    },
    /// The header announced a body over the limit (refused with a channel error): its
    /// `remaining_bytes` body octets are read and dropped, so the connection stays usable.
    Discarding {
        method_ids: (u16, u16),
        remaining_bytes: u64,
    },
}

/// The fields of `State::Body`, moved out while a body frame is handled.
struct Pending {
    method: AMQPClass,
    header: Box<AMQPContentHeader>,
    remaining_bytes: u64,
    body: BodyBuffer,
}

/// A body being gathered.
#[derive(Debug)]
enum BodyBuffer {
    /// No body frame yet.
    Empty,
    /// Octets so far, copied; the capacity never exceeds the announced body size, so the
    /// finished body keeps no slack (S-BIG-3).
    Gathering(Vec<u8>),
    /// Octets so far, written to a spool (S-BIG-3).
    Spooling(Box<dyn BodySpool>),
}

/// Assembles the frames of one channel into methods and contents. Invariant: in state `Body`,
/// `remaining_bytes > 0` and the octets gathered plus `remaining_bytes` equal the header's
/// body size, which is at most `body_bytes_max`.
#[derive(Debug)]
pub struct ContentAssembler {
    channel: ChannelId,
    body_bytes_max: u32,
    state: State,
    spooler: Option<Arc<dyn BodySpooler>>,
}

impl ContentAssembler {
    /// An assembler for `channel` refusing bodies larger than `body_bytes_max`, itself capped at
    /// `limits::MESSAGE_BODY_BYTES_MAX` (configuration may lower a limit, never raise it).
    pub fn new(channel: ChannelId, body_bytes_max: u32) -> Self {
        Self {
            channel,
            body_bytes_max: body_bytes_max.min(limits::MESSAGE_BODY_BYTES_MAX),
            state: State::Method,
            spooler: None,
        }
    }

    /// The same assembler, spooling bodies of at least [`SPOOL_BODY_BYTES_MIN`] octets to
    /// `spooler` as they arrive (S-BIG-3).
    #[must_use]
    pub fn with_spooler(mut self, spooler: Arc<dyn BodySpooler>) -> Self {
        self.spooler = Some(spooler);
        self
    }

    /// The body limit in force.
    pub fn body_bytes_max(&self) -> u32 {
        self.body_bytes_max
    }

    /// Octets held for a body being gathered, for the per-connection bound on partly received
    /// bodies: in memory, its buffer's capacity (at most `max(BODY_PREALLOC_BYTES_MAX, 2 ×
    /// octets received)`); spooled, the disk space its spool reserved (the announced size).
    pub fn gathering_capacity_bytes(&self) -> usize {
        match &self.state {
            State::Body {
                body: BodyBuffer::Gathering(b),
                ..
            } => b.capacity(),
            State::Body {
                body: BodyBuffer::Spooling(_),
                header,
                ..
            } => usize::try_from(header.body_size).unwrap_or(usize::MAX),
            _ => 0,
        }
    }

    /// True between a content-bearing method and the last octet of its body.
    pub fn is_mid_content(&self) -> bool {
        !matches!(self.state, State::Method)
    }

    /// Takes the next frame of this channel. Heartbeats are connection-level and leave the
    /// state alone. After an error the assembler is back to expecting a method (the caller
    /// closes the connection), except after [`ProtocolError::MessageTooLarge`] (the caller
    /// closes the channel): then the body frames the header announced are read and dropped
    /// first, so they are not unexpected frames (S-BIG-2).
    ///
    /// # Errors
    /// [`ProtocolError::UnexpectedFrame`] (505) for a frame the state does not allow,
    /// [`ProtocolError::BodyOverrun`] (501) for a body frame beyond the announced size, and
    /// [`ProtocolError::MessageTooLarge`] (406, a channel error) for a header announcing a body
    /// over the limit.
    ///
    /// # Panics
    /// If `frame` belongs to another channel: routing frames is the caller's job, and mixing
    /// channels up would corrupt messages.
    pub fn push(&mut self, frame: Frame) -> Result<Option<Assembled>, ProtocolError> {
        if frame == Frame::Heartbeat {
            return Ok(None);
        }
        assert_eq!(
            frame.channel(),
            self.channel,
            "frame routed to the wrong channel's assembler"
        );
        let result = match (std::mem::take(&mut self.state), frame) {
            (State::Method, Frame::Method(_, method)) => Ok(self.on_method(method)),
            (State::Method, _) => Err(self.unexpected((0, 0), FrameMismatch::ExpectedMethod)),
            (State::Header { method }, Frame::Header(_, header)) => self.on_header(method, header),
            (State::Header { method }, _) => Err(self.unexpected(
                ids(&method),
                FrameMismatch::ExpectedHeader {
                    class_id: method.get_amqp_class_id(),
                },
            )),
            (
                State::Body {
                    method,
                    header,
                    remaining_bytes,
                    body,
                },
                Frame::Body(_, chunk),
            ) => self.on_body(
                Pending {
                    method,
                    header,
                    remaining_bytes,
                    body,
                },
                chunk,
            ),
            (State::Body { method, .. }, _) => {
                Err(self.unexpected(ids(&method), FrameMismatch::ExpectedBody))
            }
            (
                State::Discarding {
                    method_ids,
                    remaining_bytes,
                },
                Frame::Body(_, chunk),
            ) => self.on_discarded_body(method_ids, remaining_bytes, chunk.len()),
            (State::Discarding { method_ids, .. }, _) => {
                Err(self.unexpected(method_ids, FrameMismatch::ExpectedBody))
            }
        };
        let discarding = matches!(self.state, State::Discarding { .. });
        if result.is_err() && !discarding {
            self.state = State::Method;
        }
        result
    }

    fn unexpected(&self, method_ids: (u16, u16), detail: FrameMismatch) -> ProtocolError {
        ProtocolError::UnexpectedFrame {
            channel: self.channel.0,
            detail,
            method_ids,
        }
    }

    fn on_method(&mut self, method: AMQPClass) -> Option<Assembled> {
        if carries_content(&method) {
            self.state = State::Header { method };
            None
        } else {
            Some(Assembled::Method(method))
        }
    }

    fn on_header(
        &mut self,
        method: AMQPClass,
        header: Box<AMQPContentHeader>,
    ) -> Result<Option<Assembled>, ProtocolError> {
        let class_id = method.get_amqp_class_id();
        if header.class_id != class_id {
            return Err(self.unexpected(
                ids(&method),
                FrameMismatch::HeaderClass {
                    class_id,
                    found: header.class_id,
                },
            ));
        }
        if header.body_size > u64::from(self.body_bytes_max) {
            if header.body_size > 0 {
                self.state = State::Discarding {
                    method_ids: ids(&method),
                    remaining_bytes: header.body_size,
                };
            }
            return Err(ProtocolError::MessageTooLarge {
                channel: self.channel.0,
                body_size_bytes: header.body_size,
                body_bytes_max: self.body_bytes_max,
                method_ids: ids(&method),
            });
        }
        if header.body_size == 0 {
            return Ok(Some(complete(method, header, Bytes::new())));
        }
        let spool = match &self.spooler {
            Some(spooler) if header.body_size >= SPOOL_BODY_BYTES_MIN => {
                spooler.open(header.body_size)
            }
            _ => None,
        };
        self.state = State::Body {
            method,
            remaining_bytes: header.body_size,
            header,
            body: spool.map_or(BodyBuffer::Empty, BodyBuffer::Spooling),
        };
        Ok(None)
    }

    fn on_body(
        &mut self,
        pending: Pending,
        chunk: Bytes,
    ) -> Result<Option<Assembled>, ProtocolError> {
        let Pending {
            method,
            header,
            remaining_bytes,
            body,
        } = pending;
        let chunk_bytes = chunk.len() as u64;
        let Some(remaining_bytes) = remaining_bytes.checked_sub(chunk_bytes) else {
            return Err(ProtocolError::BodyOverrun {
                channel: self.channel.0,
                method_ids: ids(&method),
            });
        };
        let body = match body {
            BodyBuffer::Spooling(spool) => match spool_chunk(spool, &chunk, &method)? {
                Spooled::Going(spool) if remaining_bytes == 0 => {
                    let body = spool.finish().map_err(|e| storage_error(&method, &e))?;
                    return Ok(Some(complete(method, header, body)));
                }
                Spooled::Going(spool) => {
                    self.state = State::Body {
                        method,
                        header,
                        remaining_bytes,
                        body: BodyBuffer::Spooling(spool),
                    };
                    return Ok(None);
                }
                // Given up: what it held is back in memory, and this chunk still to add.
                Spooled::GaveUp(gathered) => BodyBuffer::Gathering(gathered),
            },
            other => other,
        };
        if remaining_bytes == 0 {
            let body = match body {
                // The whole body in one frame: kept as decoded (`decode` already copied small
                // payloads out of the read buffer and left large ones in place).
                BodyBuffer::Empty => chunk,
                BodyBuffer::Gathering(mut gathered) => {
                    gathered.extend_from_slice(&chunk);
                    Bytes::from(gathered)
                }
                BodyBuffer::Spooling(_) => unreachable!("a spooled body was handled above"),
            };
            return Ok(Some(complete(method, header, body)));
        }
        let total = usize::try_from(header.body_size).unwrap_or(usize::MAX);
        let mut gathered = match body {
            // Bounded by body_bytes_max (checked at the header) and by what arrived.
            BodyBuffer::Empty => Vec::with_capacity(total.min(BODY_PREALLOC_BYTES_MAX)),
            BodyBuffer::Gathering(gathered) => gathered,
            BodyBuffer::Spooling(_) => unreachable!("a spooled body was handled above"),
        };
        grow_for(&mut gathered, chunk.len(), total);
        gathered.extend_from_slice(&chunk);
        assert_eq!(
            gathered.len() as u64 + remaining_bytes,
            header.body_size,
            "gathered + remaining must equal the announced size"
        );
        self.state = State::Body {
            method,
            header,
            remaining_bytes,
            body: BodyBuffer::Gathering(gathered),
        };
        Ok(None)
    }
}

impl ContentAssembler {
    /// A body frame of a refused message (S-BIG-2): dropped; back to expecting a method once
    /// the announced size has arrived.
    fn on_discarded_body(
        &mut self,
        method_ids: (u16, u16),
        remaining_bytes: u64,
        chunk_bytes: usize,
    ) -> Result<Option<Assembled>, ProtocolError> {
        let Some(remaining_bytes) = remaining_bytes.checked_sub(chunk_bytes as u64) else {
            return Err(ProtocolError::BodyOverrun {
                channel: self.channel.0,
                method_ids,
            });
        };
        if remaining_bytes > 0 {
            self.state = State::Discarding {
                method_ids,
                remaining_bytes,
            };
        }
        Ok(None)
    }
}

/// A spool after one more write.
enum Spooled {
    /// Written: spooling goes on.
    Going(Box<dyn BodySpool>),
    /// The write failed and the spool was given up: what it held, read back into memory (the
    /// chunk not included); the body is gathered from there as any other.
    GaveUp(Vec<u8>),
}

/// Writes `chunk` to `spool`.
fn spool_chunk(
    mut spool: Box<dyn BodySpool>,
    chunk: &[u8],
    method: &AMQPClass,
) -> Result<Spooled, ProtocolError> {
    match spool.write(chunk) {
        Ok(()) => Ok(Spooled::Going(spool)),
        Err(_) => match spool.read_back() {
            Ok(gathered) => Ok(Spooled::GaveUp(gathered)),
            Err(e) => Err(storage_error(method, &e)),
        },
    }
}

fn storage_error(method: &AMQPClass, e: &std::io::Error) -> ProtocolError {
    ProtocolError::BodyStorage {
        method_ids: ids(method),
        reason: e.to_string(),
    }
}

fn complete(method: AMQPClass, header: Box<AMQPContentHeader>, body: Bytes) -> Assembled {
    // Pair of the header's size check: what we hand out is exactly what was announced.
    assert_eq!(body.len() as u64, header.body_size, "assembled body size");
    Assembled::Content(Content {
        method,
        header,
        body,
    })
}

/// Class and method id of `method`, for errors.
fn ids(method: &AMQPClass) -> (u16, u16) {
    (method.get_amqp_class_id(), method.get_amqp_method_id())
}

/// True for the methods that are followed by content: `basic.publish`, `basic.return`,
/// `basic.deliver` and `basic.get-ok` (the spec's `content="1"` methods).
pub fn carries_content(method: &AMQPClass) -> bool {
    matches!(
        method,
        AMQPClass::Basic(
            basic::AMQPMethod::Publish(_)
                | basic::AMQPMethod::Return(_)
                | basic::AMQPMethod::Deliver(_)
                | basic::AMQPMethod::GetOk(_)
        )
    )
}

/// Makes room in `gathered` for `chunk_bytes` more octets of a body of `total` octets: the
/// capacity doubles (memory follows what arrived, at most twice it) but never passes `total`,
/// so the last step lands on the body's exact size and the body holds no unused tail. Large
/// steps are reallocations the allocator does by remapping pages, not by copying them.
fn grow_for(gathered: &mut Vec<u8>, chunk_bytes: usize, total: usize) {
    let len = gathered.len();
    if gathered.capacity() - len >= chunk_bytes {
        return;
    }
    let step = len
        .max(BODY_PREALLOC_BYTES_MAX)
        .min(total.saturating_sub(len));
    gathered.reserve_exact(step.max(chunk_bytes));
}
