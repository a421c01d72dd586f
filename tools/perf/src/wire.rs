//! AMQP 0-9-1 frames for the load generator: splitting a byte stream into raw frames,
//! pre-encoding a publish, and hand-decoding the few methods on the hot path (basic.deliver,
//! basic.ack/nack from confirms). Everything else goes through amq-protocol's codec. No tokio,
//! no sockets: this file is pure so it can be tested against amq-protocol's own encoder.

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use anyhow::{Result, anyhow, bail};

use crate::rng::SplitMix64;

/// Frame type octets (AMQP 0-9-1, 4.2.3).
pub const FRAME_METHOD: u8 = 1;
/// Content header frame type.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame type.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame type.
pub const FRAME_HEARTBEAT: u8 = 8;
/// Every frame ends with this octet.
pub const FRAME_END: u8 = 0xCE;
/// Type (1) + channel (2) + size (4).
pub const FRAME_HEAD_BYTES: usize = 7;
/// Head plus the end octet: what a frame costs besides its payload.
pub const FRAME_OVERHEAD_BYTES: usize = FRAME_HEAD_BYTES + 1;

const CLASS_BASIC: u16 = 60;
const METHOD_DELIVER: u16 = 60;
const METHOD_ACK: u16 = 80;
const METHOD_NACK: u16 = 120;

/// One frame borrowed from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrame<'a> {
    /// Frame type octet.
    pub kind: u8,
    /// Channel number.
    pub channel: u16,
    /// Payload, without head and end octet.
    pub payload: &'a [u8],
}

/// Splits the next whole frame off the front of `buf`. `Ok(None)` means "not enough bytes yet",
/// which is a state, not an error. A frame larger than `frame_max` (as negotiated; 0 means no
/// limit beyond our own) or without its end octet is an error.
pub fn split_frame(buf: &[u8], frame_max: u32) -> Result<Option<(RawFrame<'_>, usize)>> {
    let Some(head) = buf.get(..FRAME_HEAD_BYTES) else {
        return Ok(None);
    };
    let kind = head[0];
    let channel = u16::from_be_bytes([head[1], head[2]]);
    let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]);
    if frame_max > 0 && size > frame_max {
        bail!("frame of {size} bytes exceeds frame-max {frame_max}");
    }
    let size = usize::try_from(size)?;
    let total = FRAME_OVERHEAD_BYTES + size;
    let Some(frame) = buf.get(..total) else {
        return Ok(None);
    };
    if frame.last() != Some(&FRAME_END) {
        bail!("frame without its end octet (type {kind}, channel {channel})");
    }
    let payload = &frame[FRAME_HEAD_BYTES..total - 1];
    Ok(Some((
        RawFrame {
            kind,
            channel,
            payload,
        },
        total,
    )))
}

/// Appends the encoding of `frame` to `out`.
pub fn encode(frame: &AMQPFrame, out: &mut Vec<u8>) -> Result<()> {
    let buf = std::mem::take(out);
    let (buf, _) = gen_frame(frame)(WriteContext::from(buf))
        .map_err(|e| anyhow!("encoding {frame}: {e:?}"))?
        .into_inner();
    *out = buf;
    Ok(())
}

/// Decodes a method frame's payload with amq-protocol (the slow, general path).
pub fn decode_method(payload: &[u8]) -> Result<AMQPClass> {
    let (_, class) = amq_protocol::protocol::parse_class(payload)
        .map_err(|e| anyhow!("undecodable method frame: {e:?}"))?;
    Ok(class)
}

fn class_method(payload: &[u8]) -> Option<(u16, u16)> {
    let class = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    let method = u16::from_be_bytes([*payload.get(2)?, *payload.get(3)?]);
    Some((class, method))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let slice = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_be_bytes(slice.try_into().ok()?))
}

/// A publisher confirm: basic.ack or basic.nack from the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirm {
    /// Delivery tag (publish sequence number).
    pub tag: u64,
    /// Covers every tag up to and including `tag`.
    pub multiple: bool,
    /// basic.nack rather than basic.ack.
    pub nack: bool,
}

/// Decodes basic.ack / basic.nack without allocating; `None` for any other method.
pub fn fast_confirm(payload: &[u8]) -> Option<Confirm> {
    let nack = match class_method(payload)? {
        (CLASS_BASIC, METHOD_ACK) => false,
        (CLASS_BASIC, METHOD_NACK) => true,
        _ => return None,
    };
    let tag = read_u64(payload, 4)?;
    let bits = *payload.get(12)?;
    Some(Confirm {
        tag,
        multiple: bits & 1 == 1,
        nack,
    })
}

/// Decodes basic.deliver's delivery tag without allocating; `None` for any other method.
pub fn fast_deliver_tag(payload: &[u8]) -> Option<u64> {
    if class_method(payload)? != (CLASS_BASIC, METHOD_DELIVER) {
        return None;
    }
    // consumer-tag is a short string: one length octet, then the bytes.
    let tag_len = usize::from(*payload.get(4)?);
    read_u64(payload, 5 + tag_len)
}

/// The body size announced by a content header frame's payload.
pub fn header_body_size(payload: &[u8]) -> Option<u64> {
    // class-id (2), weight (2), body-size (8).
    read_u64(payload, 4)
}

/// Appends a basic.ack for `tag` on `channel`, hand-encoded (13-byte payload).
pub fn push_ack(out: &mut Vec<u8>, channel: u16, tag: u64, multiple: bool) {
    out.push(FRAME_METHOD);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&13u32.to_be_bytes());
    out.extend_from_slice(&CLASS_BASIC.to_be_bytes());
    out.extend_from_slice(&METHOD_ACK.to_be_bytes());
    out.extend_from_slice(&tag.to_be_bytes());
    out.push(u8::from(multiple));
    out.push(FRAME_END);
}

/// A basic.publish with fixed exchange, routing key, properties and body size, encoded once;
/// each message then costs a copy of these bytes plus its body frames.
#[derive(Clone, Debug)]
pub struct PublishTemplate {
    /// Method frame and content header frame.
    prefix: Vec<u8>,
    channel: u16,
    body_bytes: usize,
    /// Largest body chunk per body frame (frame-max minus frame overhead).
    chunk_bytes: usize,
}

impl PublishTemplate {
    /// Encodes the method and header frames once. `frame_max` is the negotiated frame-max
    /// (0: unlimited, then bodies go in one frame).
    pub fn new(
        channel: u16,
        routing_key: &str,
        properties: BasicProperties,
        body_bytes: usize,
        frame_max: u32,
    ) -> Result<Self> {
        let publish = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: amq_protocol::types::ShortString::try_new(routing_key)
                .map_err(|e| anyhow!("routing key {routing_key:?}: {e}"))?,
            mandatory: false,
            immediate: false,
        }));
        let mut prefix = Vec::new();
        encode(&AMQPFrame::Method(channel, publish), &mut prefix)?;
        let header = AMQPContentHeader {
            class_id: CLASS_BASIC,
            body_size: u64::try_from(body_bytes)?,
            properties,
        };
        encode(&AMQPFrame::Header(channel, header), &mut prefix)?;
        let frame_max = usize::try_from(frame_max)?;
        let chunk_bytes = if frame_max == 0 {
            usize::MAX
        } else {
            frame_max
                .checked_sub(FRAME_OVERHEAD_BYTES)
                .filter(|&c| c > 0)
                .ok_or_else(|| anyhow!("frame-max {frame_max} leaves no room for a body"))?
        };
        Ok(Self {
            prefix,
            channel,
            body_bytes,
            chunk_bytes,
        })
    }

    /// Appends one publish of `body` (whose length must be the template's body size).
    pub fn push(&self, out: &mut Vec<u8>, body: &[u8]) {
        assert_eq!(
            body.len(),
            self.body_bytes,
            "body size differs from the header"
        );
        out.extend_from_slice(&self.prefix);
        for chunk in body.chunks(self.chunk_bytes) {
            out.push(FRAME_BODY);
            out.extend_from_slice(&self.channel.to_be_bytes());
            let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(chunk);
            out.push(FRAME_END);
        }
    }

    /// The body size every publish of this template carries.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// Bytes one publish adds to the output.
    pub fn encoded_bytes(&self) -> usize {
        let frames = self
            .body_bytes
            .div_ceil(self.chunk_bytes.min(usize::MAX - 1));
        self.prefix.len() + self.body_bytes + frames * FRAME_OVERHEAD_BYTES
    }
}

/// The publishes one publisher sends: one template, or with `priorities` N > 0 one per
/// priority 0..N, picked at random per message (`--priorities`; the hot path stays a copy).
pub struct PublishTemplates {
    each: Vec<PublishTemplate>,
    rng: SplitMix64,
}

impl PublishTemplates {
    /// Encodes every template once; `seed` seeds the choice of priorities.
    pub fn new(
        channel: u16,
        routing_key: &str,
        properties: BasicProperties,
        priorities: u8,
        body_bytes: usize,
        frame_max: u32,
        seed: u64,
    ) -> Result<Self> {
        let each: Vec<BasicProperties> = match priorities {
            0 => vec![properties],
            n => (0..n)
                .map(|p| properties.clone().with_priority(p))
                .collect(),
        };
        let each = each
            .into_iter()
            .map(|props| PublishTemplate::new(channel, routing_key, props, body_bytes, frame_max))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            each,
            rng: SplitMix64(seed),
        })
    }

    /// The first template: every one has the same body size and encoded size.
    pub fn first(&self) -> &PublishTemplate {
        &self.each[0]
    }

    /// The template of the next message.
    pub fn pick(&mut self) -> &PublishTemplate {
        if self.each.len() == 1 {
            return &self.each[0];
        }
        let len = self.each.len() as u64;
        let i = usize::try_from(self.rng.next() % len).unwrap_or(0);
        &self.each[i]
    }
}

/// Writes the send time into the first 8 bytes of a body (if it has room).
pub fn stamp(body: &mut [u8], sent_us: u64) {
    if let Some(head) = body.get_mut(..8) {
        head.copy_from_slice(&sent_us.to_be_bytes());
    }
}

/// Reads the send time written by [`stamp`], if the body has room for one.
pub fn read_stamp(body: &[u8]) -> Option<u64> {
    read_u64(body, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::frame::parse_frame;

    fn encoded(frame: &AMQPFrame) -> Vec<u8> {
        let mut out = Vec::new();
        encode(frame, &mut out).unwrap();
        out
    }

    #[test]
    fn hand_encoded_ack_matches_amq_protocol() {
        for (tag, multiple) in [(1, false), (u64::MAX, true), (0x0102_0304_0506_0708, false)] {
            let reference = encoded(&AMQPFrame::Method(
                7,
                AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                    delivery_tag: tag,
                    multiple,
                })),
            ));
            let mut mine = Vec::new();
            push_ack(&mut mine, 7, tag, multiple);
            assert_eq!(mine, reference);
            // The confirm decoder reads the same bytes back.
            let (frame, used) = split_frame(&mine, 4096).unwrap().unwrap();
            assert_eq!(used, mine.len());
            assert_eq!(
                fast_confirm(frame.payload),
                Some(Confirm {
                    tag,
                    multiple,
                    nack: false
                })
            );
        }
    }

    #[test]
    fn fast_decoders_agree_with_amq_protocol_encoding() {
        let nack = encoded(&AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
                delivery_tag: 99,
                multiple: true,
                requeue: false,
            })),
        ));
        let (frame, _) = split_frame(&nack, 0).unwrap().unwrap();
        assert_eq!(
            fast_confirm(frame.payload),
            Some(Confirm {
                tag: 99,
                multiple: true,
                nack: true
            })
        );
        assert_eq!(fast_deliver_tag(frame.payload), None);

        let deliver = encoded(&AMQPFrame::Method(
            3,
            AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                consumer_tag: "amq.ctag-abcdef".into(),
                delivery_tag: 123_456_789,
                redelivered: true,
                exchange: "".into(),
                routing_key: "q".into(),
            })),
        ));
        let (frame, _) = split_frame(&deliver, 0).unwrap().unwrap();
        assert_eq!(frame.kind, FRAME_METHOD);
        assert_eq!(frame.channel, 3);
        assert_eq!(fast_deliver_tag(frame.payload), Some(123_456_789));
        assert_eq!(fast_confirm(frame.payload), None);
    }

    #[test]
    fn split_frame_waits_for_whole_frames_and_refuses_bad_ones() {
        let mut two = Vec::new();
        push_ack(&mut two, 1, 5, false);
        push_ack(&mut two, 1, 6, true);
        let one_len = two.len() / 2;
        for cut in 0..one_len {
            assert_eq!(split_frame(&two[..cut], 0).unwrap(), None, "cut at {cut}");
        }
        let (_, used) = split_frame(&two, 0).unwrap().unwrap();
        assert_eq!(used, one_len);
        let (second, _) = split_frame(&two[used..], 0).unwrap().unwrap();
        assert_eq!(fast_confirm(second.payload).unwrap().tag, 6);

        assert!(
            split_frame(&two, 12).is_err(),
            "13-byte payload over frame-max 12"
        );
        let mut broken = two[..one_len].to_vec();
        *broken.last_mut().unwrap() = 0;
        assert!(split_frame(&broken, 0).is_err(), "missing end octet");
    }

    #[test]
    fn publish_template_round_trips_through_amq_protocol_parser() {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_expiration("100".into());
        let body: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        // frame-max 408 leaves 400 bytes per body frame: 1000 bytes go in 3 frames.
        let template = PublishTemplate::new(1, "queue-a", properties.clone(), 1000, 408).unwrap();
        let mut out = Vec::new();
        template.push(&mut out, &body);
        assert_eq!(out.len(), template.encoded_bytes());

        let mut rest: &[u8] = &out;
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let (next, frame) = parse_frame(rest).unwrap();
            frames.push(frame);
            rest = next;
        }
        assert_eq!(frames.len(), 5);
        let AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))) =
            &frames[0]
        else {
            panic!("not a publish: {:?}", frames[0]);
        };
        assert_eq!(publish.routing_key.as_str(), "queue-a");
        let AMQPFrame::Header(1, header) = &frames[1] else {
            panic!("not a header");
        };
        assert_eq!(header.body_size, 1000);
        assert_eq!(header.properties, properties);
        let mut joined = Vec::new();
        for frame in &frames[2..] {
            let AMQPFrame::Body(1, chunk) = frame else {
                panic!("not a body frame");
            };
            assert!(chunk.len() <= 400);
            joined.extend_from_slice(chunk);
        }
        assert_eq!(joined, body);
    }

    #[test]
    fn content_header_body_size_is_read() {
        let frame = encoded(&AMQPFrame::Header(
            1,
            AMQPContentHeader {
                class_id: 60,
                body_size: 65_536,
                properties: BasicProperties::default().with_delivery_mode(2),
            },
        ));
        let (raw, _) = split_frame(&frame, 0).unwrap().unwrap();
        assert_eq!(raw.kind, FRAME_HEADER);
        assert_eq!(header_body_size(raw.payload), Some(65_536));
    }

    #[test]
    fn stamps_round_trip_and_short_bodies_carry_none() {
        let mut body = [0u8; 16];
        stamp(&mut body, 1_700_000_000_123_456);
        assert_eq!(read_stamp(&body), Some(1_700_000_000_123_456));
        let mut short = [0u8; 7];
        stamp(&mut short, 5);
        assert_eq!(short, [0; 7]);
        assert_eq!(read_stamp(&short), None);
    }

    /// The priority in the header of one encoded publish.
    fn priority_of(publish: &[u8]) -> Option<u8> {
        let (rest, _method) = parse_frame(publish).unwrap();
        let (_, header) = parse_frame(rest).unwrap();
        let AMQPFrame::Header(1, header) = header else {
            panic!("not a header: {header:?}");
        };
        *header.properties.priority()
    }

    #[test]
    fn priorities_are_picked_at_random_among_n_of_one_size() {
        let props = BasicProperties::default().with_delivery_mode(2);
        let mut seen = std::collections::BTreeMap::new();
        for (priorities, want) in [(0u8, vec![None]), (10, (0..10).map(Some).collect())] {
            let mut t =
                PublishTemplates::new(1, "q", props.clone(), priorities, 100, 4096, 7).unwrap();
            let size = t.first().encoded_bytes();
            seen.clear();
            for _ in 0..1000 {
                let one = t.pick();
                assert_eq!(one.encoded_bytes(), size, "one size for every priority");
                let mut out = Vec::new();
                one.push(&mut out, &[0; 100]);
                *seen.entry(priority_of(&out)).or_insert(0) += 1;
            }
            assert_eq!(seen.keys().copied().collect::<Vec<_>>(), want);
            assert!(
                seen.values().all(|&n| n > 1000 / (want.len() * 2)),
                "{seen:?}"
            );
        }
    }
}
