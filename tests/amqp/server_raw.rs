//! Robustness over a raw socket (S-ERR-1, S-ERR-2): wrong protocol headers, garbage, cut,
//! oversized and malformed frames, methods in the wrong state, missed heartbeats. Each test
//! checks the close the server sends (reply code) and that a concurrently open lapin
//! connection keeps working.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amq_protocol::protocol::{AMQPClass, basic, channel};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BytesMut;
use lapin::options::*;
use support::TestServer;
use support::raw::Raw;
use wharf_protocol::{self as protocol, ChannelId};

/// The other connection still declares, publishes and gets.
async fn still_works(ch: &lapin::Channel) {
    ch.queue_declare(
        "alive".into(),
        QueueDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    ch.basic_publish(
        "".into(),
        "alive".into(),
        BasicPublishOptions::default(),
        b"ok",
        lapin::BasicProperties::default(),
    )
    .await
    .unwrap();
    let m = ch
        .basic_get("alive".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"ok");
}

fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind];
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    f.extend_from_slice(payload);
    f.push(0xCE);
    f
}

fn publish_method(channel: u16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    protocol::encode_method(
        &mut buf,
        ChannelId(channel),
        &AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        })),
    );
    buf.to_vec()
}

#[tokio::test]
async fn wrong_protocol_header_gets_ours_back_and_the_socket_closed() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::connect(server.handle.local_addr()).await;
    raw.send(b"GET / HTTP/1.1\r\n\r\n").await;
    let mut reply = [0u8; 8];
    tokio::io::AsyncReadExt::read_exact(&mut raw.sock, &mut reply)
        .await
        .unwrap();
    assert_eq!(&reply, b"AMQP\x00\x00\x09\x01");
    raw.expect_eof().await;
    still_works(&ch).await;
}

#[tokio::test]
async fn garbage_bytes_close_the_connection_with_501() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.send(&[0x41; 64]).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501);
    raw.expect_eof().await;
    still_works(&ch).await;
}

#[tokio::test]
async fn oversized_frame_is_refused_from_its_header_with_501() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    // A header announcing 64 MiB; the payload never comes.
    let mut header = vec![1u8, 0, 1];
    header.extend_from_slice(&(64u32 << 20).to_be_bytes());
    raw.send(&header).await;
    let (code, text) = raw.expect_connection_close().await;
    assert_eq!(code, 501, "{text}");
    still_works(&ch).await;
}

#[tokio::test]
async fn bad_frame_end_is_501() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    let mut f = frame(8, 0, &[]);
    *f.last_mut().unwrap() = 0x00;
    raw.send(&f).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501);
    still_works(&ch).await;
}

#[tokio::test]
async fn truncated_method_payload_is_501() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    // queue.declare (50, 10) whose arguments stop after two octets.
    raw.send(&frame(1, 1, &[0, 50, 0, 10, 0, 0])).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501);
    still_works(&ch).await;
}

#[tokio::test]
async fn cut_frame_then_hang_up_harms_no_one() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    let f = publish_method(1);
    raw.send(&f[..f.len() / 2]).await;
    drop(raw);
    still_works(&ch).await;
}

#[tokio::test]
async fn publish_before_channel_open_is_504() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.send(&publish_method(1)).await;
    let (code, text) = raw.expect_connection_close().await;
    assert_eq!(code, 504);
    assert_eq!(text, "CHANNEL_ERROR - expected 'channel.open'");
    still_works(&ch).await;
}

#[tokio::test]
async fn second_channel_open_is_504() {
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send_method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
    .await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 504);
}

#[tokio::test]
async fn content_header_without_a_method_is_505() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    let mut buf = BytesMut::new();
    protocol::encode_content_header(
        &mut buf,
        ChannelId(1),
        60,
        3,
        &amq_protocol::protocol::BasicProperties::default(),
    );
    raw.send(&buf).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 505);
    still_works(&ch).await;
}

#[tokio::test]
async fn body_without_a_method_is_505() {
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send(&frame(3, 1, b"abc")).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 505);
}

#[tokio::test]
async fn unknown_method_is_540() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send(&frame(1, 1, &[0, 99, 0, 1])).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 540);
    still_works(&ch).await;
}

#[tokio::test]
async fn server_only_method_from_a_client_is_503() {
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send_method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})),
    )
    .await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 503);
}

#[tokio::test]
async fn message_over_the_size_limit_closes_only_the_channel_with_406() {
    // S-BIG-2: the refused message's body frames are read and dropped (RabbitMQ reads the
    // whole message before refusing it), so the connection stays usable.
    let server = TestServer::start_with(|c| c.message_bytes_max = 1000).await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send(&publish_method(1)).await;
    let mut buf = BytesMut::new();
    protocol::encode_content_header(
        &mut buf,
        ChannelId(1),
        60,
        1001,
        &amq_protocol::protocol::BasicProperties::default(),
    );
    protocol::encode_body_frame(&mut buf, ChannelId(1), &[0; 600]);
    protocol::encode_body_frame(&mut buf, ChannelId(1), &[0; 401]);
    raw.send(&buf).await;
    let (code, text) = raw.expect_channel_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000"
    );
    raw.send_method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )
    .await;
    // The connection is still usable: the channel can be opened again.
    raw.open_channel(1).await;
}

#[tokio::test]
async fn amqplain_login_works() {
    let server = TestServer::start().await;
    let mut raw = Raw::connect(server.handle.local_addr()).await;
    raw.send(&protocol::frame::PROTOCOL_HEADER).await;
    let _start = raw.method().await;
    let mut creds = FieldTable::default();
    creds.insert(
        "LOGIN".into(),
        AMQPValue::LongString(LongString::from("guest")),
    );
    creds.insert(
        "PASSWORD".into(),
        AMQPValue::LongString(LongString::from("guest")),
    );
    let mut table = BytesMut::new();
    protocol::encode::put_table(&mut table, &creds);
    raw.send_method(
        0,
        AMQPClass::Connection(amq_protocol::protocol::connection::AMQPMethod::StartOk(
            amq_protocol::protocol::connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "AMQPLAIN".into(),
                response: LongString::from(table[4..].to_vec()),
                locale: "en_US".into(),
            },
        )),
    )
    .await;
    let tune = raw.method().await;
    assert!(
        matches!(
            tune,
            AMQPClass::Connection(amq_protocol::protocol::connection::AMQPMethod::Tune(_))
        ),
        "{tune:?}"
    );
}

#[tokio::test]
async fn a_silent_peer_is_closed_after_two_missed_heartbeats() {
    // Real time is unavoidable here: heartbeats are a wire-level timer. 1 s interval, so the
    // server gives up after ~2 s.
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 1).await;
    let mut heartbeats = 0;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match protocol::decode(&mut raw.buf, 0).unwrap() {
                Some(protocol::Frame::Heartbeat) => heartbeats += 1,
                Some(other) => panic!("unexpected {other:?}"),
                None => {
                    raw.buf.reserve(64);
                    let n = tokio::io::AsyncReadExt::read_buf(&mut raw.sock, &mut raw.buf)
                        .await
                        .unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the server kept a silent peer open");
    assert!(heartbeats >= 1, "the server sends heartbeats while idle");
    still_works(&ch).await;
}

#[tokio::test]
async fn partly_received_bodies_are_bounded_per_connection_506() {
    // Three channels each in the middle of a 16 MiB message: more than a connection may hold.
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    let max = u64::from(wharf_base::limits::MESSAGE_BODY_BYTES_MAX);
    for n in 1..=3u16 {
        raw.open_channel(n).await;
        raw.send(&publish_method(n)).await;
        let mut buf = BytesMut::new();
        protocol::encode_content_header(
            &mut buf,
            ChannelId(n),
            60,
            max,
            &amq_protocol::protocol::BasicProperties::default(),
        );
        raw.send(&buf).await;
    }
    let chunk = vec![0u8; 128 * 1024 - 8];
    let mut frames = BytesMut::new();
    for n in 1..=3u16 {
        for _ in 0..90 {
            protocol::encode_body_frame(&mut frames, ChannelId(n), &chunk);
        }
    }
    // The server may stop reading once it has closed; ignore a write error.
    let _ = tokio::io::AsyncWriteExt::write_all(&mut raw.sock, &frames).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 506);
    still_works(&ch).await;
}

#[tokio::test]
async fn client_close_is_answered_after_everything_sent_before_it() {
    use amq_protocol::protocol::{connection, queue};
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    let mut burst = BytesMut::new();
    let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
    protocol::encode_method(&mut burst, ChannelId(1), &open);
    let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: "late".into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: FieldTable::default(),
    }));
    protocol::encode_method(&mut burst, ChannelId(1), &declare);
    let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    }));
    protocol::encode_method(&mut burst, ChannelId(0), &close);
    raw.send(&burst).await;
    let m = raw.method().await;
    assert!(
        matches!(m, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))),
        "{m:?}"
    );
    let m = raw.method().await;
    assert!(
        matches!(m, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_))),
        "{m:?}"
    );
    let m = raw.method().await;
    assert!(
        matches!(m, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))),
        "{m:?}"
    );
}
