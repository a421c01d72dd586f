//! Frame decoding and encoding against bytes written by hand from the AMQP 0-9-1 spec (what a
//! client such as lapin or pika sends during a handshake and a publish), plus the limit checks
//! that must happen before buffering or parsing: oversized frames, cut frames, deep tables.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "test code: a failed unwrap is a failed test; golden data and strategies are long lists"
)]

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel, connection, queue};
use amq_protocol::types::{AMQPValue, FieldTable, ShortString};
use bytes::{Bytes, BytesMut};
use wharf_base::limits;
use wharf_protocol::{
    self as protocol, ChannelId, DeliverRef, Frame, ProtocolError, ProtocolHeaderCheck, reply_code,
};

const CH1: ChannelId = ChannelId(1);

/// Hand-written golden frames, each with the frame it decodes to.
fn golden() -> Vec<(&'static str, Vec<u8>, Frame)> {
    vec![
        (
            "connection.tune-ok channel_max 2047 frame_max 131072 heartbeat 60",
            vec![
                1, 0, 0, 0, 0, 0, 12, // method frame, channel 0, 12 octets
                0, 10, 0, 31, // connection.tune-ok
                0x07, 0xFF, 0, 2, 0, 0, 0, 60, 0xCE,
            ],
            Frame::Method(
                ChannelId(0),
                AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                    channel_max: 2047,
                    frame_max: 131_072,
                    heartbeat: 60,
                })),
            ),
        ),
        (
            "connection.open vhost /",
            vec![
                1, 0, 0, 0, 0, 0, 8, 0, 10, 0, 40, // connection.open
                1, b'/', // virtual-host
                0,    // reserved-1 (capabilities), empty short string
                0,    // reserved-2 (insist) bit
                0xCE,
            ],
            Frame::Method(
                ChannelId(0),
                AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                    virtual_host: "/".into(),
                })),
            ),
        ),
        (
            "channel.open on channel 1",
            vec![1, 0, 1, 0, 0, 0, 5, 0, 20, 0, 10, 0, 0xCE],
            Frame::Method(
                CH1,
                AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
            ),
        ),
        (
            "basic.publish exchange \"\" routing-key q",
            vec![
                1, 0, 1, 0, 0, 0, 10, 0, 60, 0, 40, // basic.publish
                0, 0, // reserved-1 (ticket)
                0, // exchange ""
                1, b'q', // routing-key
                0,    // mandatory, immediate
                0xCE,
            ],
            Frame::Method(CH1, publish("", "q", false)),
        ),
        (
            "content header: class 60, body size 5, delivery-mode 2",
            vec![
                2, 0, 1, 0, 0, 0, 15, 0, 60, 0, 0, // class, weight
                0, 0, 0, 0, 0, 0, 0, 5, // body size
                0x10, 0x00, // property flags: bit 12 = delivery-mode
                2, 0xCE,
            ],
            Frame::Header(
                CH1,
                header(5, BasicProperties::default().with_delivery_mode(2)),
            ),
        ),
        (
            "content body hello",
            vec![3, 0, 1, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0xCE],
            Frame::Body(CH1, Bytes::from_static(b"hello")),
        ),
        (
            "basic.ack tag 1",
            vec![
                1, 0, 1, 0, 0, 0, 13, 0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xCE,
            ],
            Frame::Method(CH1, ack(1, false)),
        ),
        (
            "basic.deliver ctag tag 1 exchange \"\" routing-key q",
            vec![
                1, 0, 1, 0, 0, 0, 21, 0, 60, 0, 60, // basic.deliver
                4, b'c', b't', b'a', b'g', // consumer-tag
                0, 0, 0, 0, 0, 0, 0, 1, // delivery-tag
                0, // redelivered
                0, // exchange
                1, b'q', 0xCE,
            ],
            Frame::Method(
                CH1,
                AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                    consumer_tag: "ctag".into(),
                    delivery_tag: 1,
                    redelivered: false,
                    exchange: "".into(),
                    routing_key: "q".into(),
                })),
            ),
        ),
        (
            "heartbeat",
            vec![8, 0, 0, 0, 0, 0, 0, 0xCE],
            Frame::Heartbeat,
        ),
        (
            "connection.start-ok with client properties as lapin sends them",
            start_ok_golden_bytes(),
            Frame::Method(
                ChannelId(0),
                AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                    client_properties: client_properties(),
                    mechanism: "PLAIN".into(),
                    response: "\0guest\0guest".into(),
                    locale: "en_US".into(),
                })),
            ),
        ),
    ]
}

/// `{capabilities: {publisher_confirms: true}, product: "lapin"}`; keys in byte order, as a
/// wire table holds them.
fn client_properties() -> FieldTable {
    let mut capabilities = FieldTable::default();
    capabilities.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    props.insert("product".into(), AMQPValue::LongString("lapin".into()));
    props
}

fn start_ok_golden_bytes() -> Vec<u8> {
    let mut b = vec![1, 0, 0, 0, 0, 0, 93, 0, 10, 0, 11]; // 93 octets of payload
    b.extend_from_slice(&[0, 0, 0, 57]); // client-properties: 57 octets of entries
    b.push(12);
    b.extend_from_slice(b"capabilities");
    b.extend_from_slice(&[b'F', 0, 0, 0, 21, 18]); // nested table of 21 octets
    b.extend_from_slice(b"publisher_confirms");
    b.extend_from_slice(&[b't', 1]);
    b.push(7);
    b.extend_from_slice(b"product");
    b.extend_from_slice(&[b'S', 0, 0, 0, 5]);
    b.extend_from_slice(b"lapin");
    b.push(5);
    b.extend_from_slice(b"PLAIN"); // mechanism
    b.extend_from_slice(&[0, 0, 0, 12]);
    b.extend_from_slice(b"\0guest\0guest"); // response (long string)
    b.push(5);
    b.extend_from_slice(b"en_US"); // locale
    b.push(0xCE);
    b
}

fn publish(exchange: &str, routing_key: &str, mandatory: bool) -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory,
        immediate: false,
    }))
}

fn ack(delivery_tag: u64, multiple: bool) -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
        delivery_tag,
        multiple,
    }))
}

fn header(body_size: u64, properties: BasicProperties) -> Box<AMQPContentHeader> {
    Box::new(AMQPContentHeader {
        class_id: 60,
        body_size,
        properties,
    })
}

fn decode_all(bytes: &[u8], frame_max: u32) -> Result<Vec<Frame>, ProtocolError> {
    let mut buf = BytesMut::from(bytes);
    let mut frames = Vec::new();
    while let Some(frame) = protocol::decode(&mut buf, frame_max)? {
        frames.push(frame);
    }
    assert!(buf.is_empty(), "{} octets left undecoded", buf.len());
    Ok(frames)
}

#[test]
fn golden_frames_decode_to_their_values() {
    for (name, bytes, frame) in golden() {
        assert_eq!(decode_all(&bytes, 0).unwrap(), vec![frame], "{name}");
    }
}

#[test]
fn golden_frames_encode_to_their_bytes() {
    for (name, bytes, frame) in golden() {
        let mut buf = BytesMut::new();
        protocol::encode_frame(&mut buf, &frame);
        assert_eq!(&buf[..], &bytes[..], "{name}");
    }
}

#[test]
fn hand_written_encoders_match_amq_protocol_on_the_golden_frames() {
    for (name, _, frame) in golden() {
        let (mut ours, mut theirs) = (BytesMut::new(), BytesMut::new());
        match &frame {
            Frame::Method(c, m) => {
                protocol::encode_method(&mut ours, *c, m);
                protocol::encode_method_generic(&mut theirs, *c, m);
            }
            Frame::Header(c, h) => {
                protocol::encode_content_header(&mut ours, *c, 60, h.body_size, &h.properties);
                protocol::encode_content_header_generic(
                    &mut theirs,
                    *c,
                    60,
                    h.body_size,
                    &h.properties,
                );
            }
            _ => continue,
        }
        assert_eq!(ours, theirs, "{name}");
    }
}

#[test]
fn golden_bytes_are_what_lapin_writes() {
    // lapin serialises every frame with amq-protocol's `gen_frame`; running it on the golden
    // frames shows the hand-written bytes are what a real client sends.
    use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame};
    for (name, bytes, frame) in golden() {
        let amqp = match frame {
            Frame::Method(c, m) => AMQPFrame::Method(c.0, m),
            Frame::Header(c, h) => AMQPFrame::Header(c.0, *h),
            Frame::Body(c, b) => AMQPFrame::Body(c.0, b.to_vec()),
            Frame::Heartbeat => AMQPFrame::Heartbeat,
        };
        let (written, _) = gen_frame(&amqp)(WriteContext::from(Vec::new()))
            .unwrap()
            .into_inner();
        assert_eq!(written, bytes, "{name}");
    }
}

#[test]
fn a_whole_golden_stream_decodes_in_order() {
    let stream: Vec<u8> = golden().iter().flat_map(|(_, b, _)| b.clone()).collect();
    let want: Vec<Frame> = golden().into_iter().map(|(_, _, f)| f).collect();
    assert_eq!(decode_all(&stream, 0).unwrap(), want);
}

#[test]
fn every_prefix_of_a_stream_is_incomplete_until_the_frame_is_whole() {
    // Feed the golden stream one octet at a time: each frame appears exactly when its last
    // octet (the frame-end) arrives, never earlier, and nothing is consumed before.
    let golden = golden();
    let stream: Vec<u8> = golden.iter().flat_map(|(_, b, _)| b.clone()).collect();
    let mut ends = Vec::new();
    let mut at = 0;
    for (_, bytes, _) in &golden {
        at += bytes.len();
        ends.push(at);
    }
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for (i, octet) in stream.iter().enumerate() {
        buf.extend_from_slice(&[*octet]);
        match protocol::decode(&mut buf, 0).unwrap() {
            Some(frame) => {
                assert!(
                    ends.contains(&(i + 1)),
                    "frame completed early at octet {i}"
                );
                assert!(buf.is_empty());
                got.push(frame);
            }
            None => assert!(!ends.contains(&(i + 1)), "frame missing at octet {i}"),
        }
    }
    assert_eq!(
        got,
        golden.into_iter().map(|(_, _, f)| f).collect::<Vec<_>>()
    );
}

#[test]
fn protocol_headers_follow_rabbitmq() {
    use ProtocolHeaderCheck::{Accepted, Incomplete, Refused};
    assert_eq!(protocol::check_protocol_header(b""), Incomplete);
    assert_eq!(protocol::check_protocol_header(b"AMQ"), Incomplete);
    assert_eq!(
        protocol::check_protocol_header(b"AMQP\x00\x00\x09"),
        Incomplete
    );
    assert_eq!(
        protocol::check_protocol_header(b"AMQP\x00\x00\x09\x01"),
        Accepted
    );
    // 0-9, which RabbitMQ treats as 0-9-1.
    assert_eq!(
        protocol::check_protocol_header(b"AMQP\x01\x01\x00\x09"),
        Accepted
    );
    // Followed by the first frame: only the first 8 octets matter.
    assert_eq!(
        protocol::check_protocol_header(b"AMQP\x00\x00\x09\x01\x01\x00"),
        Accepted
    );
    for refused in [
        &b"AMQP\x00\x00\x08\x00"[..], // 0-8
        b"AMQP\x03\x01\x00\x00",      // AMQP 1.0 SASL
        b"AMQP\x00\x01\x00\x00",      // AMQP 1.0
        b"AMQP\x00\x00\x09\x02",
        b"GET / HT", // HTTP: refused at the first octet
        b"G",
        b"\x16\x03\x01", // TLS client hello
    ] {
        assert_eq!(
            protocol::check_protocol_header(refused),
            Refused,
            "{refused:?}"
        );
    }
    let mut buf = BytesMut::new();
    protocol::encode_protocol_header(&mut buf);
    assert_eq!(&buf[..], b"AMQP\x00\x00\x09\x01");
}

#[test]
fn s_err_1_oversized_frames_are_refused_from_the_header_before_buffering() {
    // Only the 7-octet header of a frame announcing 1 GiB: refused at once, nothing reserved.
    let mut buf = BytesMut::from(&[3u8, 0, 1, 0x40, 0, 0, 0][..]);
    let capacity_before = buf.capacity();
    let err = protocol::decode(&mut buf, 0).unwrap_err();
    assert_eq!(
        err,
        ProtocolError::FrameTooLarge {
            size_bytes: 1 << 30,
            frame_max_bytes: limits::FRAME_BYTES_MAX
        }
    );
    assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
    assert!(err.is_connection_error());
    assert_eq!(buf.capacity(), capacity_before);

    // Negotiated frame_max 4096: a payload of 4096 is tolerated (RabbitMQ's fudge), 4097 not.
    for (size, ok) in [(4096u32, true), (4097, false)] {
        let mut header = vec![3u8, 0, 1];
        header.extend_from_slice(&size.to_be_bytes());
        let mut buf = BytesMut::from(&header[..]);
        let result = protocol::decode(&mut buf, 4096);
        assert_eq!(result.is_ok(), ok, "payload {size}");
        if ok {
            // Incomplete, with room reserved for this frame only: at most frame_max + 8 octets
            // (amortised growth may double, never more).
            assert_eq!(result.unwrap(), None);
            assert!(buf.capacity() >= 4096 + 8);
            assert!(buf.capacity() <= 2 * (4096 + 8));
        }
    }

    // frame_max above the hard limit is clamped to it.
    let mut header = vec![3u8, 0, 1];
    header.extend_from_slice(&(limits::FRAME_BYTES_MAX + 1).to_be_bytes());
    let mut buf = BytesMut::from(&header[..]);
    assert!(matches!(
        protocol::decode(&mut buf, u32::MAX),
        Err(ProtocolError::FrameTooLarge { .. })
    ));
}

#[test]
fn s_err_1_frame_level_errors_carry_rabbitmq_reply_codes() {
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "unknown frame type",
            vec![4, 0, 1, 0, 0, 0, 0, 0xCE],
            reply_code::FRAME_ERROR,
        ),
        (
            "bad frame end",
            vec![8, 0, 0, 0, 0, 0, 0, 0xCD],
            reply_code::FRAME_ERROR,
        ),
        (
            "heartbeat with payload",
            vec![8, 0, 0, 0, 0, 0, 1, 0, 0xCE],
            reply_code::FRAME_ERROR,
        ),
        (
            "heartbeat on channel 1",
            vec![8, 0, 1, 0, 0, 0, 0, 0xCE],
            reply_code::UNEXPECTED_FRAME,
        ),
        (
            "content header on channel 0",
            vec![
                2, 0, 0, 0, 0, 0, 14, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0xCE,
            ],
            reply_code::UNEXPECTED_FRAME,
        ),
        (
            "content body on channel 0",
            vec![3, 0, 0, 0, 0, 0, 1, b'x', 0xCE],
            reply_code::UNEXPECTED_FRAME,
        ),
        (
            "unknown method",
            vec![1, 0, 1, 0, 0, 0, 4, 0, 60, 0, 99, 0xCE],
            reply_code::NOT_IMPLEMENTED,
        ),
        (
            "method payload too short",
            vec![1, 0, 1, 0, 0, 0, 2, 0, 60, 0xCE],
            reply_code::FRAME_ERROR,
        ),
        (
            "basic.publish with a trailing octet",
            vec![
                1, 0, 1, 0, 0, 0, 11, 0, 60, 0, 40, 0, 0, 0, 1, b'q', 0, 0, 0xCE,
            ],
            reply_code::FRAME_ERROR,
        ),
        (
            "basic.publish routing key not UTF-8",
            vec![
                1, 0, 1, 0, 0, 0, 10, 0, 60, 0, 40, 0, 0, 0, 1, 0xFF, 0, 0xCE,
            ],
            reply_code::FRAME_ERROR,
        ),
        (
            "truncated channel.open",
            vec![1, 0, 1, 0, 0, 0, 4, 0, 20, 0, 10, 0xCE],
            reply_code::FRAME_ERROR,
        ),
        (
            "content header with trailing octets",
            vec![
                2, 0, 1, 0, 0, 0, 15, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 9, 0xCE,
            ],
            reply_code::FRAME_ERROR,
        ),
    ];
    for (name, bytes, code) in cases {
        let err = decode_all(&bytes, 0).expect_err(name);
        if name.starts_with("basic.publish") {
            assert_eq!(err.method_ids(), (60, 40), "{name}");
        }
        if name == "unknown method" {
            assert_eq!(err.method_ids(), (60, 99), "{name}");
        }
        assert_eq!(err.reply_code(), code, "{name}: {err}");
        assert!(err.is_connection_error(), "{name}");
        assert!(!err.to_string().is_empty());
    }
}

/// Field-table bytes (length-prefixed) whose single entry `k` holds `depth - 1` nested arrays,
/// so the whole table is `depth` levels deep. Built by hand, because amq-protocol's own
/// generator and parser recurse and would overflow on the deep cases.
fn nested_table(depth: usize) -> Vec<u8> {
    let mut inner: Vec<u8> = Vec::new();
    for _ in 1..depth {
        let mut outer = vec![b'A'];
        outer.extend_from_slice(&u32::try_from(inner.len()).unwrap().to_be_bytes());
        outer.extend_from_slice(&inner);
        inner = outer;
    }
    let mut entries = Vec::new();
    if depth > 1 {
        entries.extend_from_slice(&[1, b'k']);
        entries.extend_from_slice(&inner);
    }
    let mut table = u32::try_from(entries.len()).unwrap().to_be_bytes().to_vec();
    table.extend_from_slice(&entries);
    table
}

fn frame_bytes(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![frame_type];
    bytes.extend_from_slice(&channel.to_be_bytes());
    bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes.push(0xCE);
    bytes
}

fn queue_declare_with(table: &[u8]) -> Vec<u8> {
    let mut payload = vec![0, 50, 0, 10, 0, 0, 1, b'q', 0];
    payload.extend_from_slice(table);
    frame_bytes(1, 1, &payload)
}

fn header_with(table: &[u8]) -> Vec<u8> {
    // content-type "t" (bit 15) and headers (bit 13): the scan must skip the short string.
    let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xA0, 0x00, 1, b't'];
    payload.extend_from_slice(table);
    frame_bytes(2, 1, &payload)
}

fn start_ok_with(table: &[u8]) -> Vec<u8> {
    let mut payload = vec![0, 10, 0, 11];
    payload.extend_from_slice(table);
    payload.extend_from_slice(&[
        5, b'P', b'L', b'A', b'I', b'N', 0, 0, 0, 0, 5, b'e', b'n', b'_', b'U', b'S',
    ]);
    frame_bytes(1, 0, &payload)
}

#[test]
fn tables_nested_up_to_the_limit_decode_and_deeper_ones_are_refused() {
    let max = limits::FIELD_TABLE_DEPTH_MAX;
    for build in [queue_declare_with, header_with, start_ok_with] {
        let ok = decode_all(&build(&nested_table(max)), 0);
        assert!(ok.is_ok(), "depth {max}: {ok:?}");
        let err = decode_all(&build(&nested_table(max + 1)), 0).unwrap_err();
        assert!(matches!(err, ProtocolError::TableTooDeep { .. }), "{err}");
        assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
    }
}

#[test]
fn standalone_tables_obey_the_same_depth_limit() {
    let max = limits::FIELD_TABLE_DEPTH_MAX;
    assert!(protocol::decode_field_table(&nested_table(max)).is_ok());
    let err = protocol::decode_field_table(&nested_table(max + 1)).unwrap_err();
    assert!(matches!(err, ProtocolError::TableTooDeep { .. }), "{err}");
    let mut trailing = nested_table(2);
    trailing.push(0);
    assert!(matches!(
        protocol::decode_field_table(&trailing),
        Err(ProtocolError::Undecodable { .. })
    ));
}

#[test]
fn s_err_2_a_full_frame_of_nested_tables_is_refused_without_recursing() {
    // ~26 000 levels in 128 KiB: amq-protocol's recursive parser would overflow the stack. Run
    // on a thread with a deliberately small stack (64 KiB) to show decode never recurses per
    // level, for a method argument table and for message headers.
    let levels = (limits::FRAME_BYTES_MAX as usize - 64) / 5;
    let table = nested_table(levels);
    let frames = [
        queue_declare_with(&table),
        header_with(&table),
        start_ok_with(&table),
    ];
    for frame in frames {
        assert!(frame.len() <= limits::FRAME_BYTES_MAX as usize);
        let result = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || decode_all(&frame, 0))
            .unwrap()
            .join()
            .unwrap();
        assert!(
            matches!(result, Err(ProtocolError::TableTooDeep { .. })),
            "{result:?}"
        );
    }
}

#[test]
fn content_is_split_at_frame_max_minus_eight() {
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let props = BasicProperties::default().with_content_type("text/plain".into());
    let mut buf = BytesMut::new();
    let deliver_fields = (
        ShortString::from("ctag"),
        ShortString::from("ex"),
        ShortString::from("rk"),
    );
    protocol::encode_deliver(
        &mut buf,
        CH1,
        DeliverRef {
            consumer_tag: &deliver_fields.0,
            delivery_tag: 7,
            redelivered: true,
            exchange: &deliver_fields.1,
            routing_key: &deliver_fields.2,
        },
        &props,
        &body,
        4096,
    );
    let frames = decode_all(&buf, 4096).unwrap();
    assert_eq!(frames.len(), 2 + 3, "method, header, 4088 + 4088 + 1824");
    let sizes: Vec<usize> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Body(_, b) => Some(b.len()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [4088, 4088, 1824]);
    let gathered: Vec<u8> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Body(_, b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(gathered, body);
    assert_eq!(frames[1], Frame::Header(CH1, header(10_000, props)));

    // An empty body has a header and no body frame, as RabbitMQ sends it.
    let mut buf = BytesMut::new();
    protocol::encode_content(&mut buf, CH1, &BasicProperties::default(), b"", 4096);
    assert_eq!(decode_all(&buf, 4096).unwrap().len(), 1);
}

#[test]
fn short_strings_inside_tables_go_out_as_long_strings() {
    // amq-protocol would tag them '_', which no peer reads.
    let mut headers = FieldTable::default();
    headers.insert("s".into(), AMQPValue::ShortString("v".into()));
    let props = BasicProperties::default().with_headers(headers);
    let mut buf = BytesMut::new();
    protocol::encode_content_header(&mut buf, CH1, 60, 0, &props);
    let Frame::Header(_, decoded) = decode_all(&buf, 0).unwrap().remove(0) else {
        panic!("not a header");
    };
    let value = decoded
        .properties
        .headers()
        .as_ref()
        .unwrap()
        .inner()
        .get("s")
        .cloned();
    assert_eq!(value, Some(AMQPValue::LongString("v".into())));
}

#[test]
fn short_strings_inside_method_tables_go_out_as_long_strings() {
    let mut server_properties = FieldTable::default();
    let mut capabilities = FieldTable::default();
    capabilities.insert("deep".into(), AMQPValue::ShortString("x".into()));
    server_properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    server_properties.insert("product".into(), AMQPValue::ShortString("wharf".into()));
    let start = |props: FieldTable| {
        AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: "PLAIN".into(),
            locales: "en_US".into(),
        }))
    };
    let mut buf = BytesMut::new();
    protocol::encode_method(&mut buf, ChannelId(0), &start(server_properties));
    // A `_` type tag would make this decode fail; it must come back with long strings.
    let mut capabilities = FieldTable::default();
    capabilities.insert("deep".into(), AMQPValue::LongString("x".into()));
    let mut want = FieldTable::default();
    want.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    want.insert("product".into(), AMQPValue::LongString("wharf".into()));
    assert_eq!(
        decode_all(&buf, 0).unwrap(),
        vec![Frame::Method(ChannelId(0), start(want))]
    );
}

#[test]
fn queue_declare_arguments_round_trip() {
    let mut arguments = FieldTable::default();
    arguments.insert("x-message-ttl".into(), AMQPValue::LongInt(60_000));
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("dlx".into()),
    );
    let method = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: "orders".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments,
    }));
    let mut buf = BytesMut::new();
    protocol::encode_method(&mut buf, CH1, &method);
    assert_eq!(
        decode_all(&buf, 0).unwrap(),
        vec![Frame::Method(CH1, method)]
    );
}
