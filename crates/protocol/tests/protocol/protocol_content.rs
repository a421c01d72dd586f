//! Content assembly per channel (`protocol::ContentAssembler`): the happy paths (one frame,
//! many frames, empty body, zero copy) and every error path with the reply code RabbitMQ's
//! `rabbit_command_assembler` answers with.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "test code: a failed unwrap is a failed test; golden data and strategies are long lists"
)]

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel, queue};
use bytes::{Bytes, BytesMut};
use wharf_base::limits;
use wharf_protocol::{
    self as protocol, Assembled, ChannelId, ContentAssembler, Frame, ProtocolError, reply_code,
};

const CH: ChannelId = ChannelId(3);

fn publish() -> Frame {
    Frame::Method(
        CH,
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        })),
    )
}

fn header(class_id: u16, body_size: u64) -> Frame {
    Frame::Header(
        CH,
        Box::new(AMQPContentHeader {
            class_id,
            body_size,
            properties: BasicProperties::default().with_delivery_mode(2),
        }),
    )
}

fn body(bytes: &[u8]) -> Frame {
    Frame::Body(CH, Bytes::copy_from_slice(bytes))
}

fn other_method() -> Frame {
    Frame::Method(
        CH,
        AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close::default())),
    )
}

fn assembler() -> ContentAssembler {
    ContentAssembler::new(CH, limits::MESSAGE_BODY_BYTES_MAX)
}

fn content(result: Option<Assembled>) -> protocol::Content {
    match result {
        Some(Assembled::Content(c)) => c,
        other => panic!("expected a content, got {other:?}"),
    }
}

#[test]
fn methods_without_content_pass_straight_through() {
    let mut a = assembler();
    let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare::default()));
    assert_eq!(
        a.push(Frame::Method(CH, declare.clone())).unwrap(),
        Some(Assembled::Method(declare))
    );
    assert!(!a.is_mid_content());
}

#[test]
fn publish_header_and_one_body_frame_make_a_message() {
    let mut a = assembler();
    assert_eq!(a.push(publish()).unwrap(), None);
    assert!(a.is_mid_content());
    assert_eq!(a.push(header(60, 5)).unwrap(), None);
    let c = content(a.push(body(b"hello")).unwrap());
    assert_eq!(&c.body[..], b"hello");
    assert_eq!(c.header.properties.delivery_mode(), &Some(2));
    assert_eq!(c.header.body_size, 5);
    let Frame::Method(_, method) = publish() else {
        unreachable!()
    };
    assert_eq!(c.method, method);
    assert!(!a.is_mid_content());
}

#[test]
fn a_body_split_over_frames_is_gathered_in_order() {
    let mut a = assembler();
    a.push(publish()).unwrap();
    a.push(header(60, 10)).unwrap();
    assert_eq!(a.push(body(b"0123")).unwrap(), None);
    assert_eq!(
        a.push(Frame::Heartbeat).unwrap(),
        None,
        "heartbeats leave content alone"
    );
    assert_eq!(
        a.push(body(b"")).unwrap(),
        None,
        "an empty body frame is allowed"
    );
    assert_eq!(a.push(body(b"456")).unwrap(), None);
    let c = content(a.push(body(b"789")).unwrap());
    assert_eq!(&c.body[..], b"0123456789");
}

#[test]
fn an_empty_body_completes_at_the_header() {
    let mut a = assembler();
    a.push(publish()).unwrap();
    let c = content(a.push(header(60, 0)).unwrap());
    assert!(c.body.is_empty());
    // The next frame is a fresh method.
    assert!(a.push(publish()).unwrap().is_none());
}

#[test]
fn large_single_frame_bodies_are_not_copied_and_small_ones_are() {
    // Decode real frames: a large body must be the very octets of the read buffer (payload at
    // offset 7), a small one a copy that does not pin the buffer.
    for (len, zero_copy) in [(protocol::BODY_ZERO_COPY_BYTES_MIN, true), (16, false)] {
        let payload = vec![7u8; len];
        let mut wire = BytesMut::new();
        protocol::encode_body_frame(&mut wire, CH, &payload);
        let payload_in_buffer = wire.as_ptr().wrapping_add(7);
        let frame = protocol::decode(&mut wire, 0).unwrap().unwrap();
        let mut a = assembler();
        a.push(publish()).unwrap();
        a.push(header(60, len as u64)).unwrap();
        let c = content(a.push(frame).unwrap());
        assert_eq!(&c.body[..], &payload[..]);
        assert_eq!(
            c.body.as_ptr() == payload_in_buffer,
            zero_copy,
            "body of {len} octets"
        );
    }
}

fn expect_error(frames: Vec<Frame>, code: u16, text: &str) {
    let mut a = assembler();
    let mut result = Ok(None);
    for frame in frames {
        result = a.push(frame);
        if result.is_err() {
            break;
        }
    }
    let err = result.expect_err(text);
    assert_eq!(err.reply_code(), code, "{err}");
    assert!(err.to_string().contains(text), "{err}");
    // The close names the pending method (basic.publish), or none when there was none.
    let want_ids = if text.starts_with("expected method frame") {
        (0, 0)
    } else {
        (60, 40)
    };
    assert_eq!(err.method_ids(), want_ids, "{err}");
    // After an error the assembler expects a method again.
    assert!(!a.is_mid_content());
}

#[test]
fn a_header_or_body_without_a_method_is_an_unexpected_frame() {
    let text = "expected method frame, got non method frame instead";
    expect_error(vec![header(60, 1)], reply_code::UNEXPECTED_FRAME, text);
    expect_error(vec![body(b"x")], reply_code::UNEXPECTED_FRAME, text);
    // A body after a complete message has no method either.
    expect_error(
        vec![publish(), header(60, 1), body(b"x"), body(b"y")],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
}

#[test]
fn a_method_instead_of_the_content_header_is_an_unexpected_frame() {
    let text = "expected content header for class 60, got non content header frame instead";
    expect_error(
        vec![publish(), other_method()],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
    expect_error(
        vec![publish(), publish()],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
    expect_error(
        vec![publish(), body(b"x")],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
}

#[test]
fn a_method_in_the_middle_of_a_body_is_an_unexpected_frame() {
    let text = "expected content body, got non content body frame instead";
    expect_error(
        vec![publish(), header(60, 2), body(b"x"), other_method()],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
    expect_error(
        vec![publish(), header(60, 2), header(60, 2)],
        reply_code::UNEXPECTED_FRAME,
        text,
    );
}

#[test]
fn a_content_header_of_another_class_is_an_unexpected_frame() {
    expect_error(
        vec![publish(), header(50, 1)],
        reply_code::UNEXPECTED_FRAME,
        "expected content header for class 60, got one for class 50 instead",
    );
}

#[test]
fn more_body_than_announced_is_a_frame_error() {
    expect_error(
        vec![publish(), header(60, 3), body(b"ab"), body(b"cd")],
        reply_code::FRAME_ERROR,
        "content body frame exceeds remaining content size",
    );
}

#[test]
fn s_err_1_a_body_over_the_configured_limit_is_refused_at_the_header_as_a_channel_error() {
    // Configured lower than the hard limit: 406 on the channel, as RabbitMQ's
    // max_message_size, decided from the header before any body octet is buffered.
    let mut a = ContentAssembler::new(CH, 1000);
    a.push(publish()).unwrap();
    assert_eq!(
        a.push(header(60, 1000)).unwrap(),
        None,
        "exactly the limit is fine"
    );
    let mut a = ContentAssembler::new(CH, 1000);
    a.push(publish()).unwrap();
    let err = a.push(header(60, 1001)).unwrap_err();
    assert_eq!(
        err,
        ProtocolError::MessageTooLarge {
            channel: 3,
            body_size_bytes: 1001,
            body_bytes_max: 1000,
            method_ids: (60, 40),
        }
    );
    assert_eq!(
        err.method_ids(),
        (60, 40),
        "basic.publish, as RabbitMQ reports it"
    );
    assert_eq!(err.reply_code(), reply_code::PRECONDITION_FAILED);
    assert!(!err.is_connection_error());
    assert_eq!(err.channel(), Some(3));

    // A configured limit above the hard one is capped to it.
    let mut a = ContentAssembler::new(CH, u32::MAX);
    assert_eq!(a.body_bytes_max(), limits::MESSAGE_BODY_BYTES_MAX);
    a.push(publish()).unwrap();
    let err = a.push(header(60, u64::MAX)).unwrap_err();
    assert!(matches!(err, ProtocolError::MessageTooLarge { .. }));
}

#[test]
fn s_big_2_the_body_of_a_refused_message_is_discarded_and_the_channel_carries_on() {
    // RabbitMQ reads the whole refused message before it closes the channel; so do we, without
    // keeping it: the body frames that follow a refused header are not unexpected frames.
    let mut a = ContentAssembler::new(CH, 1000);
    a.push(publish()).unwrap();
    let err = a.push(header(60, 2500)).unwrap_err();
    assert!(
        matches!(err, ProtocolError::MessageTooLarge { .. }),
        "{err:?}"
    );
    assert_eq!(a.push(body(&[7; 1000])).unwrap(), None);
    assert_eq!(a.gathering_capacity_bytes(), 0, "nothing is kept");
    assert!(a.is_mid_content());
    assert_eq!(a.push(body(&[7; 1500])).unwrap(), None);
    assert!(!a.is_mid_content(), "the announced size arrived");
    assert!(matches!(
        a.push(other_method()).unwrap(),
        Some(Assembled::Method(_))
    ));
    // Only the announced size is discarded: a longer body is still an overrun (501), and
    // anything but a body frame meanwhile is unexpected (505).
    let mut a = ContentAssembler::new(CH, 10);
    a.push(publish()).unwrap();
    a.push(header(60, 20)).unwrap_err();
    let overrun = a.push(body(&[0; 21])).unwrap_err();
    assert!(
        matches!(overrun, ProtocolError::BodyOverrun { .. }),
        "{overrun:?}"
    );
    let mut a = ContentAssembler::new(CH, 10);
    a.push(publish()).unwrap();
    a.push(header(60, 20)).unwrap_err();
    let unexpected = a.push(other_method()).unwrap_err();
    assert_eq!(unexpected.reply_code(), reply_code::UNEXPECTED_FRAME);
}

#[test]
fn a_header_announcing_the_maximum_and_sending_nothing_reserves_nothing_up_front() {
    // Memory follows what arrives: a 16 MiB announcement then small frames must not make the
    // assembler hold 16 MiB.
    let mut a = assembler();
    a.push(publish()).unwrap();
    a.push(header(60, u64::from(limits::MESSAGE_BODY_BYTES_MAX)))
        .unwrap();
    assert_eq!(a.gathering_capacity_bytes(), 0);
    assert_eq!(a.push(body(&[1u8; 4000])).unwrap(), None);
    assert!(a.is_mid_content());
    let held = a.gathering_capacity_bytes();
    assert!(held >= 4000, "{held}");
    assert!(held <= protocol::BODY_PREALLOC_BYTES_MAX, "{held}");
}

#[test]
#[should_panic(expected = "wrong channel")]
fn frames_of_another_channel_are_a_caller_bug() {
    let mut a = assembler();
    let _ = a.push(Frame::Body(ChannelId(4), Bytes::new()));
}
