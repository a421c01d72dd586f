//! Property tests for the protocol layer (STYLE 2.4): decode(encode(x)) = x for frames, the
//! hand-written encoders and the `basic.publish` decoder agree with amq-protocol's, streams cut
//! anywhere decode the same, and arbitrary or mutated bytes never panic any decoder (S-ERR-2).
//! Case counts are bounded so the suite stays fast; `fuzz/` runs the decoders for longer.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "test code: a failed unwrap is a failed test; golden data and strategies are long lists"
)]

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{
    AMQPClass, BasicProperties, basic, channel, confirm, connection, exchange, parse_class, queue,
};
use amq_protocol::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use wharf_protocol::{
    self as protocol, Assembled, ChannelId, ContentAssembler, DeliverRef, Frame, ProtocolError,
    ProtocolHeaderCheck, reply_code,
};

fn short() -> impl Strategy<Value = ShortString> {
    prop_oneof!["[a-zA-Z0-9._-]{0,20}", "\\PC{0,40}"].prop_map(|s: String| ShortString::from(s))
}

fn long() -> impl Strategy<Value = LongString> {
    proptest::collection::vec(any::<u8>(), 0..40).prop_map(LongString::from)
}

/// Values that round-trip through the wire: no `ShortString` (tables cannot carry one) and no
/// NaN (`PartialEq` would call it unequal to itself).
fn value() -> impl Strategy<Value = AMQPValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<f32>().prop_map(AMQPValue::Float),
        any::<f64>().prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        long().prop_map(AMQPValue::LongString),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        proptest::collection::vec(any::<u8>(), 0..20)
            .prop_map(|b| AMQPValue::ByteArray(ByteArray::from(b))),
        Just(AMQPValue::Void),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
            table_of(inner).prop_map(AMQPValue::FieldTable),
        ]
    })
}

fn table_of(values: impl Strategy<Value = AMQPValue>) -> impl Strategy<Value = FieldTable> {
    proptest::collection::btree_map(short(), values, 0..4).prop_map(FieldTable::from)
}

fn table() -> impl Strategy<Value = FieldTable> {
    table_of(value())
}

fn properties() -> impl Strategy<Value = BasicProperties> {
    let strings = proptest::collection::vec(proptest::option::of(short()), 10);
    (
        strings,
        proptest::option::of(table()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(s, headers, mode, priority, timestamp)| {
            let mut p = BasicProperties::default();
            let setters: [fn(BasicProperties, ShortString) -> BasicProperties; 10] = [
                BasicProperties::with_content_type,
                BasicProperties::with_content_encoding,
                BasicProperties::with_correlation_id,
                BasicProperties::with_reply_to,
                BasicProperties::with_expiration,
                BasicProperties::with_message_id,
                BasicProperties::with_type,
                BasicProperties::with_user_id,
                BasicProperties::with_app_id,
                BasicProperties::with_cluster_id,
            ];
            for (value, set) in s.into_iter().zip(setters) {
                if let Some(v) = value {
                    p = set(p, v);
                }
            }
            if let Some(h) = headers {
                p = p.with_headers(h);
            }
            if let Some(m) = mode {
                p = p.with_delivery_mode(m);
            }
            if let Some(pr) = priority {
                p = p.with_priority(pr);
            }
            if let Some(t) = timestamp {
                p = p.with_timestamp(t);
            }
            p
        })
}

fn method() -> impl Strategy<Value = AMQPClass> {
    use basic::AMQPMethod as B;
    prop_oneof![
        (short(), short(), any::<bool>(), any::<bool>()).prop_map(
            |(exchange, routing_key, mandatory, immediate)| {
                AMQPClass::Basic(B::Publish(basic::Publish {
                    exchange,
                    routing_key,
                    mandatory,
                    immediate,
                }))
            }
        ),
        (short(), any::<u64>(), any::<bool>(), short(), short()).prop_map(
            |(consumer_tag, delivery_tag, redelivered, exchange, routing_key)| {
                AMQPClass::Basic(B::Deliver(basic::Deliver {
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange,
                    routing_key,
                }))
            }
        ),
        (any::<u64>(), any::<bool>()).prop_map(|(delivery_tag, multiple)| AMQPClass::Basic(
            B::Ack(basic::Ack {
                delivery_tag,
                multiple
            })
        )),
        (any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
            |(delivery_tag, multiple, requeue)| {
                AMQPClass::Basic(B::Nack(basic::Nack {
                    delivery_tag,
                    multiple,
                    requeue,
                }))
            }
        ),
        (any::<u16>(), any::<bool>()).prop_map(|(prefetch_count, global)| AMQPClass::Basic(
            B::Qos(basic::Qos {
                prefetch_count,
                global
            })
        )),
        (short(), short(), any::<[bool; 4]>(), table()).prop_map(
            |(queue, consumer_tag, f, arguments)| {
                AMQPClass::Basic(B::Consume(basic::Consume {
                    queue,
                    consumer_tag,
                    no_local: f[0],
                    no_ack: f[1],
                    exclusive: f[2],
                    nowait: f[3],
                    arguments,
                }))
            }
        ),
        (short(), any::<[bool; 5]>(), table()).prop_map(|(queue, f, arguments)| {
            AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue,
                passive: f[0],
                durable: f[1],
                exclusive: f[2],
                auto_delete: f[3],
                nowait: f[4],
                arguments,
            }))
        }),
        (short(), short(), any::<[bool; 5]>(), table()).prop_map(
            |(exchange, kind, f, arguments)| {
                AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
                    exchange,
                    kind,
                    passive: f[0],
                    durable: f[1],
                    auto_delete: f[2],
                    internal: f[3],
                    nowait: f[4],
                    arguments,
                }))
            }
        ),
        (short(), short(), short(), table()).prop_map(
            |(queue, exchange, routing_key, arguments)| {
                AMQPClass::Queue(queue::AMQPMethod::Unbind(queue::Unbind {
                    queue,
                    exchange,
                    routing_key,
                    arguments,
                }))
            }
        ),
        (any::<u16>(), short(), any::<u16>(), any::<u16>()).prop_map(
            |(reply_code, reply_text, class_id, method_id)| {
                AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                    reply_code,
                    reply_text,
                    class_id,
                    method_id,
                }))
            }
        ),
        (table(), short(), long(), short()).prop_map(
            |(client_properties, mechanism, response, locale)| {
                AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                    client_properties,
                    mechanism,
                    response,
                    locale,
                }))
            }
        ),
        (any::<u16>(), any::<u32>(), any::<u16>()).prop_map(
            |(channel_max, frame_max, heartbeat)| {
                AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                    channel_max,
                    frame_max,
                    heartbeat,
                }))
            }
        ),
        any::<bool>().prop_map(|nowait| AMQPClass::Confirm(confirm::AMQPMethod::Select(
            confirm::Select { nowait }
        ))),
    ]
}

/// A byte for mutations: often a type tag or a boundary value, so that rare tags (`U`, `L`)
/// and length edge cases are hit, not only random octets.
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        prop::sample::select(b"tbBsUuIiLlfdDSATFxV_\x00\x01\x04\xff".to_vec()),
    ]
}

/// Raw table octets with a correct outer length and entries of any tag, mostly with the right
/// amount of payload for that tag (so whole tables are often valid, including the rare tags
/// `U` and `L`), sometimes with 0-9 random octets instead.
fn raw_table() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        (
            "[a-z]{0,3}",
            interesting_byte(),
            proptest::collection::vec(interesting_byte(), 0..10),
            prop::bool::weighted(0.8),
        ),
        0..5,
    )
    .prop_map(|entries| {
        let mut inner = Vec::new();
        for (key, tag, random, sized) in entries {
            inner.push(u8::try_from(key.len()).unwrap());
            inner.extend_from_slice(key.as_bytes());
            inner.push(tag);
            let fixed = match tag {
                b'V' => Some(0),
                b't' | b'b' | b'B' => Some(1),
                b's' | b'U' | b'u' => Some(2),
                b'I' | b'i' | b'f' => Some(4),
                b'D' => Some(5),
                b'L' | b'l' | b'd' | b'T' => Some(8),
                _ => None,
            };
            match (sized, fixed, tag) {
                (true, Some(n), _) => inner.extend(
                    random
                        .iter()
                        .copied()
                        .cycle()
                        .take(n)
                        .chain(std::iter::repeat(7))
                        .take(n),
                ),
                (true, None, b'S' | b'x' | b'F' | b'A') => inner.extend_from_slice(&[0, 0, 0, 0]),
                _ => inner.extend_from_slice(&random),
            }
        }
        let mut table = u32::try_from(inner.len()).unwrap().to_be_bytes().to_vec();
        table.extend_from_slice(&inner);
        table
    })
}

fn channel() -> impl Strategy<Value = ChannelId> {
    (1u16..=u16::MAX).prop_map(ChannelId)
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u16>(), method()).prop_map(|(c, m)| Frame::Method(ChannelId(c), m)),
        (channel(), any::<u64>(), properties()).prop_map(|(c, body_size, properties)| {
            Frame::Header(
                c,
                Box::new(AMQPContentHeader {
                    class_id: 60,
                    body_size,
                    properties,
                }),
            )
        }),
        (channel(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(c, b)| Frame::Body(c, Bytes::from(b))),
        Just(Frame::Heartbeat),
    ]
}

fn encode_all(frames: &[Frame]) -> BytesMut {
    let mut buf = BytesMut::new();
    for f in frames {
        protocol::encode_frame(&mut buf, f);
    }
    buf
}

fn decode_all(buf: &mut BytesMut) -> Result<Vec<Frame>, ProtocolError> {
    let mut frames = Vec::new();
    while let Some(f) = protocol::decode(buf, 0)? {
        frames.push(f);
    }
    Ok(frames)
}

/// Runs every decoder over `bytes`: protocol header check, frame decode, and content assembly
/// per channel. Returns normally whatever the bytes; errors must carry a sensible code.
fn run_all_decoders(bytes: &[u8], frame_max: u32) {
    let _ = protocol::check_protocol_header(bytes);
    let mut buf = BytesMut::from(bytes);
    let mut assemblers: std::collections::HashMap<ChannelId, ContentAssembler> =
        std::collections::HashMap::default();
    loop {
        match protocol::decode(&mut buf, frame_max) {
            Ok(Some(Frame::Heartbeat)) => {}
            Ok(Some(frame)) => {
                let c = frame.channel();
                let a = assemblers
                    .entry(c)
                    .or_insert_with(|| ContentAssembler::new(c, 1 << 16));
                if let Err(e) = a.push(frame) {
                    assert!(
                        e.is_connection_error()
                            || e.reply_code() == reply_code::PRECONDITION_FAILED
                    );
                }
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.is_connection_error(), "{e}");
                break;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_of_encode_is_identity(frames in proptest::collection::vec(frame(), 1..6)) {
        let mut buf = encode_all(&frames);
        prop_assert_eq!(decode_all(&mut buf).unwrap(), frames);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_stream_cut_anywhere_decodes_the_same(
        frames in proptest::collection::vec(frame(), 1..5),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        // Deliver the stream in pieces split at random points: same frames, same order.
        let stream = encode_all(&frames);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for w in points.windows(2) {
            buf.extend_from_slice(&stream[w[0]..w[1]]);
            got.extend(decode_all(&mut buf).unwrap());
        }
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn hand_written_encoders_match_amq_protocol(
        c in channel(), m in method(), body_size in any::<u64>(), props in properties(),
    ) {
        let (mut ours, mut theirs) = (BytesMut::new(), BytesMut::new());
        protocol::encode_method(&mut ours, c, &m);
        protocol::encode_method_generic(&mut theirs, c, &m);
        prop_assert_eq!(&ours, &theirs);
        let (mut ours, mut theirs) = (BytesMut::new(), BytesMut::new());
        protocol::encode_content_header(&mut ours, c, 60, body_size, &props);
        protocol::encode_content_header_generic(&mut theirs, c, 60, body_size, &props);
        prop_assert_eq!(ours, theirs);
    }

    #[test]
    fn encode_deliver_is_method_then_content(
        c in channel(), tag in any::<u64>(), redelivered in any::<bool>(),
        names in (short(), short(), short()), props in properties(),
        body in proptest::collection::vec(any::<u8>(), 0..10_000),
    ) {
        let mut buf = BytesMut::new();
        let d = DeliverRef {
            consumer_tag: &names.0, delivery_tag: tag, redelivered,
            exchange: &names.1, routing_key: &names.2,
        };
        protocol::encode_deliver(&mut buf, c, d, &props, &body, 4096);
        let frames = decode_all(&mut buf).unwrap();
        let mut a = ContentAssembler::new(c, u32::MAX);
        let mut out = None;
        for f in frames {
            if let Frame::Body(_, b) = &f {
                prop_assert!(b.len() <= 4096 - 8);
            }
            out = a.push(f).unwrap();
        }
        let Some(Assembled::Content(content)) = out else { panic!("no content") };
        prop_assert_eq!(content.body.as_ref(), &body[..]);
        prop_assert_eq!(content.header.properties, props);
        let want = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: names.0, delivery_tag: tag, redelivered, exchange: names.1, routing_key: names.2,
        }));
        prop_assert_eq!(content.method, want);
    }

    #[test]
    fn the_publish_decoder_agrees_with_amq_protocol(
        args in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..12),
            // Near-valid arguments: reserved, two short strings, bits, then a mutation.
            (short(), short(), any::<u8>(), any::<prop::sample::Index>(), any::<u8>(), any::<bool>())
                .prop_map(|(e, r, bits, at, val, mutate)| {
                    let mut v = vec![0, 0];
                    for s in [&e, &r] {
                        v.push(u8::try_from(s.as_str().len()).unwrap());
                        v.extend_from_slice(s.as_str().as_bytes());
                    }
                    v.push(bits);
                    if mutate {
                        let i = at.index(v.len());
                        v[i] = val;
                    }
                    v
                }),
        ],
    ) {
        let mut payload = vec![0, 60, 0, 40];
        payload.extend_from_slice(&args);
        let reference = match parse_class(&payload[..]) {
            Ok(([], m)) => Some(m),
            _ => None,
        };
        let mut frame = vec![1, 0, 1];
        frame.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(0xCE);
        let ours = protocol::decode(&mut BytesMut::from(&frame[..]), 0);
        match (reference, ours) {
            (Some(m), Ok(Some(Frame::Method(_, ours)))) => prop_assert_eq!(ours, m),
            (None, Err(e)) => prop_assert_eq!(e.reply_code(), reply_code::FRAME_ERROR),
            (r, o) => prop_assert!(false, "amq-protocol {:?}, ours {:?}", r, o),
        }
    }

    #[test]
    fn the_content_header_decoder_agrees_with_amq_protocol(
        props in properties(),
        body_size in any::<u64>(),
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), interesting_byte()), 0..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        garbage in proptest::collection::vec(any::<u8>(), 12..40),
        raw in raw_table(),
        choice in 0u8..3,
    ) {
        let mut wire = BytesMut::new();
        protocol::encode_content_header(&mut wire, ChannelId(1), 60, body_size, &props);
        let mut payload = wire[7..wire.len() - 1].to_vec();
        for (at, val) in mutations {
            let i = at.index(payload.len());
            payload[i] = val;
        }
        if let Some(cut) = cut {
            payload.truncate(cut.index(payload.len() + 1));
        }
        match choice {
            0 => {}
            1 => payload = garbage,
            _ => {
                // A valid prefix with the headers flag, then a raw table.
                payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x20, 0];
                payload.extend_from_slice(&raw);
            }
        }
        let reference = match amq_protocol::frame::parsing::parse_content_header(&payload[..]) {
            Ok(([], h)) => Some(h),
            _ => None,
        };
        let mut frame = vec![2, 0, 1];
        frame.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(0xCE);
        let ours = protocol::decode(&mut BytesMut::from(&frame[..]), 0);
        match (reference, ours) {
            // Debug text: floats compare as written, NaN included.
            (Some(h), Ok(Some(Frame::Header(_, ours)))) => {
                prop_assert_eq!(format!("{ours:?}"), format!("{h:?}"));
            }
            (_, Err(ProtocolError::TableTooDeep { .. })) => {}
            (None, Err(e)) => prop_assert_eq!(e.reply_code(), reply_code::FRAME_ERROR),
            (r, o) => prop_assert!(false, "amq-protocol {:?}, ours {:?}", r, o),
        }
    }

    #[test]
    fn the_field_table_decoder_agrees_with_amq_protocol(
        t in table(),
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), interesting_byte()), 0..4),
        garbage in proptest::option::of(prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            raw_table(),
        ]),
    ) {
        let mut buf = BytesMut::new();
        protocol::put_table(&mut buf, &t);
        let mut bytes = buf.to_vec();
        for (at, val) in mutations {
            let i = at.index(bytes.len());
            bytes[i] = val;
        }
        if let Some(g) = garbage {
            bytes = g;
        }
        let reference = match amq_protocol::types::parsing::parse_field_table(&bytes[..]) {
            Ok(([], t)) => Some(t),
            _ => None,
        };
        match (reference, protocol::decode_field_table(&bytes)) {
            (Some(r), Ok(ours)) => prop_assert_eq!(format!("{ours:?}"), format!("{r:?}")),
            (_, Err(ProtocolError::TableTooDeep { .. })) | (None, Err(_)) => {}
            (r, o) => prop_assert!(false, "amq-protocol {:?}, ours {:?}", r, o),
        }
    }

    #[test]
    fn s_err_2_arbitrary_bytes_never_panic_a_decoder(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        frame_max in prop_oneof![Just(0u32), any::<u32>()],
    ) {
        run_all_decoders(&bytes, frame_max);
    }

    #[test]
    fn s_err_2_mutated_valid_streams_never_panic_a_decoder(
        frames in proptest::collection::vec(frame(), 1..5),
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode_all(&frames).to_vec();
        for (at, val) in mutations {
            let i = at.index(bytes.len());
            bytes[i] = val;
        }
        let end = cut.index(bytes.len() + 1);
        run_all_decoders(&bytes[..end], 0);
        run_all_decoders(&bytes, 4096);
    }

    #[test]
    fn field_tables_round_trip_and_garbage_tables_never_panic(
        t in table(),
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        garbage in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut buf = BytesMut::new();
        protocol::put_table(&mut buf, &t);
        prop_assert_eq!(protocol::decode_field_table(&buf).unwrap(), t);
        let mut bytes = buf.to_vec();
        for (at, val) in mutations {
            let i = at.index(bytes.len());
            bytes[i] = val;
        }
        let _ = protocol::decode_field_table(&bytes);
        let _ = protocol::decode_field_table(&garbage);
    }

    #[test]
    fn protocol_header_check_is_a_prefix_test(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
        let got = protocol::check_protocol_header(&bytes);
        let n = bytes.len().min(8);
        let could_be = [&b"AMQP\x00\x00\x09\x01"[..], b"AMQP\x01\x01\x00\x09"]
            .iter()
            .any(|h| h[..n] == bytes[..n]);
        let want = match (could_be, n == 8) {
            (false, _) => ProtocolHeaderCheck::Refused,
            (true, true) => ProtocolHeaderCheck::Accepted,
            (true, false) => ProtocolHeaderCheck::Incomplete,
        };
        prop_assert_eq!(got, want);
    }
}
