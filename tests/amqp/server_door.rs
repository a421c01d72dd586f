//! Connections without a socket (S-NET-2): `ServerHandle::connect_in_memory` gives the caller
//! one end of an in-memory byte stream that the server serves as an accepted TCP connection
//! from 127.0.0.1: the same handshake (guest, a loopback user, logs in), the same broker, the
//! same protocol checks; hanging up is seen at once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amq_protocol::protocol::{AMQPClass, connection, queue};
use amq_protocol::types::FieldTable;
use lapin::options::QueueDeclareOptions;
use support::TestServer;
use support::raw::Raw;
use tokio::io::AsyncWriteExt;

fn declare(name: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

#[tokio::test]
async fn s_net_2_an_in_memory_connection_is_served_as_a_loopback_socket() {
    let server = TestServer::start().await;
    let stream = server.handle.connect_in_memory().unwrap();
    // guest may log in only from loopback: the in-memory peer is local.
    let mut raw = Raw::handshake(stream, 0).await;
    raw.open_channel(1).await;
    raw.send_method(1, declare("door")).await;
    let ok = raw.method().await;
    let AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) = ok else {
        panic!("expected declare-ok, got {ok:?}");
    };
    assert_eq!(ok.queue.as_str(), "door");
    // The same broker as the socket clients': a lapin connection sees the queue.
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "door".into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    // Protocol errors are handled as on a socket: garbage closes with 501.
    raw.send(&[0x41; 32]).await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501);
    raw.expect_eof().await;
}

#[tokio::test]
async fn s_net_2_hanging_up_an_in_memory_connection_ends_it_at_once() {
    let server = TestServer::start().await;
    let mut stream = server.handle.connect_in_memory().unwrap();
    // Half a protocol header, then the client hangs up: the server sees end of stream at
    // once (no handshake timeout to wait for) and closes its end.
    stream.write_all(b"AMQP").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut raw = Raw {
        sock: stream,
        buf: bytes::BytesMut::new(),
    };
    // Within expect_eof's 5 s: before the 10 s handshake wait could have ended it.
    assert!(wharf_base::limits::HANDSHAKE_WAIT.as_secs() > 5);
    raw.expect_eof().await;
    // And a full connection still opens and closes cleanly after it.
    let mut raw = Raw::handshake(server.handle.connect_in_memory().unwrap(), 0).await;
    let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    }));
    raw.send_method(0, close).await;
    let m = raw.method().await;
    assert!(
        matches!(m, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))),
        "{m:?}"
    );
    raw.expect_eof().await;
}
