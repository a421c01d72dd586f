//! Wire corners real clients and bad peers hit (S-BIG, S-PROTO): a message over
//! `max_message_size` closes only its channel, `connection.update-secret`, unbinds of what
//! does not exist, `basic.qos` with a prefetch size, `tune-ok` values outside the offer, and
//! the close frame of a protocol error reaching a client that keeps sending. Texts and codes
//! as RabbitMQ 3.10 answers them (docs/SEMANTICS.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::LongString;
use bytes::BytesMut;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, ExchangeKind};
use support::raw::Raw;
use support::{TestServer, reply_code, reply_text};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_protocol::{self as protocol, Frame};

#[tokio::test]
async fn s_big_2_an_oversized_message_closes_only_its_channel() {
    let server = TestServer::start_with(|c| c.message_bytes_max = 1000).await;
    let (conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    // Three body frames at lapin's frame size: the ones after the refused header must not be
    // taken for unexpected frames (which would close the connection with 505).
    let body = vec![1u8; 300_000];
    let sent = ch
        .basic_publish(
            "".into(),
            "anywhere".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await;
    let err = match sent {
        Ok(pending) => support::within(5, pending).await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - message size 300000 is larger than configured max size 1000"
    );
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            q.name().as_str().into(),
            BasicPublishOptions::default(),
            b"small",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    assert!(conn.status().connected());
}

#[tokio::test]
async fn s_proto_1_update_secret_is_answered_with_update_secret_ok() {
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.send_method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(
            connection::UpdateSecret {
                new_secret: LongString::from("token-2"),
                reason: "refresh".into(),
            },
        )),
    )
    .await;
    let ok = raw.method().await;
    assert!(
        matches!(
            ok,
            AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(_))
        ),
        "{ok:?}"
    );
    raw.open_channel(1).await;
}

#[tokio::test]
async fn s_proto_2_unbinding_what_does_not_exist_answers_ok() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_declare(
        "x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let none = FieldTable::default;
    // A missing binding, a missing queue, a missing exchange: all unbind-ok.
    for (queue, exchange) in [("q", "x"), ("no-such-q", "x"), ("q", "no-such-x")] {
        ch.queue_unbind(queue.into(), exchange.into(), "k".into(), none())
            .await
            .unwrap();
    }
    for (dest, source) in [
        ("x", "amq.direct"),
        ("no-such-x", "amq.direct"),
        ("x", "nope"),
    ] {
        ch.exchange_unbind(
            dest.into(),
            source.into(),
            "k".into(),
            ExchangeUnbindOptions::default(),
            none(),
        )
        .await
        .unwrap();
    }
    // Binding to a missing queue is still 404.
    let err = ch
        .queue_bind(
            "no-such-q".into(),
            "x".into(),
            "k".into(),
            QueueBindOptions::default(),
            none(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(404), "{err:?}");
}

#[tokio::test]
async fn s_proto_3_a_qos_prefetch_size_is_not_implemented() {
    let server = TestServer::start().await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    // basic.qos (60, 10): prefetch_size 123, prefetch_count 10, global false.
    let mut payload = vec![0, 60, 0, 10, 0, 0, 0, 123, 0, 10, 0];
    let mut frame = vec![1, 0, 1];
    frame.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    frame.append(&mut payload);
    frame.push(0xCE);
    raw.send(&frame).await;
    let (code, text) = raw.expect_connection_close().await;
    assert_eq!(code, 540);
    assert_eq!(text, "NOT_IMPLEMENTED - prefetch_size!=0 (123)");
}

/// Runs the handshake up to `tune-ok` with the given values (`None`: the offer).
async fn tune_ok(server: &TestServer, frame_max: Option<u32>, channel_max: Option<u16>) -> Raw {
    let sock = tokio::net::TcpStream::connect(server.handle.local_addr())
        .await
        .unwrap();
    let (mut raw, tune) = Raw::login(sock).await;
    let channel_max = channel_max.unwrap_or(tune.channel_max);
    raw.tune_ok(channel_max, frame_max.unwrap_or(tune.frame_max), 0)
        .await;
    raw
}

#[tokio::test]
async fn s_proto_4_tune_ok_outside_the_offer_closes_without_a_negotiated_close() {
    let server = TestServer::start().await;
    let refused = [
        (Some(1024), None),
        (Some(u32::MAX), None),
        (Some(0), None),
        (None, Some(u16::MAX)),
        (None, Some(0)),
    ];
    for (frame_max, channel_max) in refused {
        let mut raw = tune_ok(&server, frame_max, channel_max).await;
        assert_eq!(
            raw.frame().await,
            None,
            "frame_max {frame_max:?} channel_max {channel_max:?}: no close frame, only EOF"
        );
    }
    // The smallest frame_max the spec allows, and a lower channel_max, are fine.
    let mut raw = tune_ok(&server, Some(4096), Some(3)).await;
    raw.send_method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        })),
    )
    .await;
    let ok = raw.method().await;
    assert!(
        matches!(ok, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))),
        "{ok:?}"
    );
}

/// A client that keeps sending after its frame was refused still reads the close frame:
/// the server stops decoding, drains what arrives, and does not reset the socket under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_proto_5_the_close_frame_reaches_a_client_that_keeps_sending() {
    let server = TestServer::start().await;
    let raw = Raw::open(server.handle.local_addr(), 0).await;
    let (mut read, mut write) = raw.sock.into_split();
    let sender = tokio::spawn(async move {
        // A method frame announcing 1 MiB (over frame_max), then garbage, on and on.
        let mut header = vec![1, 0, 0];
        header.extend_from_slice(&(1024u32 * 1024).to_be_bytes());
        if write.write_all(&header).await.is_err() {
            return;
        }
        let garbage = vec![0xAB; 64 * 1024];
        for _ in 0..2000 {
            if write.write_all(&garbage).await.is_err() {
                return;
            }
        }
    });
    let mut buf = BytesMut::new();
    let close = support::within(10, async {
        loop {
            if let Some(frame) = protocol::decode(&mut buf, 0).unwrap() {
                return frame;
            }
            buf.reserve(4096);
            let n = read
                .read_buf(&mut buf)
                .await
                .expect("no reset before the close");
            assert!(n > 0, "the socket closed before the close frame");
        }
    })
    .await;
    let Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Close(c))) = close else {
        panic!("expected connection.close, got {close:?}");
    };
    assert_eq!(c.reply_code, 501);
    sender.abort();
}

/// True when this host can listen on IPv6 loopback.
fn ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

/// An AMQP URL of the default user and vhost at `addr`.
fn url_at(addr: std::net::SocketAddr) -> String {
    format!("amqp://guest:guest@{addr}/%2f")
}

#[tokio::test]
async fn s_net_1_one_port_serves_every_listed_address() {
    if !ipv6_loopback() {
        println!("SKIPPED s_net_1 list test: this host has no IPv6 loopback");
        return;
    }
    let server = TestServer::start_with(|c| c.bind = "127.0.0.1:0,[::1]:0".into()).await;
    let port = server.handle.local_addr().port();
    for host in ["127.0.0.1", "[::1]"] {
        let addr = format!("{host}:{port}").parse().unwrap();
        let conn =
            lapin::Connection::connect(&url_at(addr), lapin::ConnectionProperties::default())
                .await
                .unwrap_or_else(|e| panic!("{addr}: {e}"));
        let ch = conn.create_channel().await.unwrap();
        ch.queue_declare(
            "".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    server.handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn s_net_1_an_optional_address_that_cannot_be_bound_is_skipped() {
    // 192.0.2.1 (TEST-NET-1) is nobody's address here: binding it fails, and the server goes
    // on with the required one. An optional ::1 joins when the host has it.
    let server = TestServer::start_with(|c| {
        c.bind_if_available = vec!["192.0.2.1:0".into(), "[::1]:0".into()];
    })
    .await;
    let addr = server.handle.local_addr();
    let conn = lapin::Connection::connect(&url_at(addr), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    conn.create_channel().await.unwrap();
    if ipv6_loopback() {
        let v6 = format!("[::1]:{}", addr.port()).parse().unwrap();
        lapin::Connection::connect(&url_at(v6), lapin::ConnectionProperties::default())
            .await
            .unwrap();
    }
    // A required address that cannot be bound stops the start.
    let dir = tempfile::tempdir().unwrap();
    let config = wharf_server::ServerConfig::new("127.0.0.1:0,192.0.2.1:0", dir.path());
    assert!(wharf_server::Server::start(config).await.is_err());
    server.handle.shutdown().await.unwrap();
}
