//! A raw AMQP client over a plain TCP socket (or any byte stream, e.g. a TLS session), for
//! the tests that must send what no client library would: garbage, cut frames, methods in the
//! wrong state, no heartbeats. Frames are encoded and decoded with wharf's own `protocol`
//! module.

use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, channel, connection};
use amq_protocol::types::{FieldTable, LongString};
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use wharf_protocol::{self as protocol, ChannelId, Frame};

/// A raw connection.
pub struct Raw<S = TcpStream> {
    /// The socket.
    pub sock: S,
    /// Bytes read and not yet decoded.
    pub buf: BytesMut,
}

impl Raw<TcpStream> {
    /// Connects without sending anything.
    pub async fn connect(addr: std::net::SocketAddr) -> Raw {
        Raw {
            sock: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
        }
    }

    /// Connects and completes the handshake (PLAIN guest/guest) with `heartbeat_secs`.
    pub async fn open(addr: std::net::SocketAddr, heartbeat_secs: u16) -> Raw {
        Raw::handshake(TcpStream::connect(addr).await.unwrap(), heartbeat_secs).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Raw<S> {
    /// Completes the handshake (PLAIN guest/guest) with `heartbeat_secs` over `sock`.
    pub async fn handshake(sock: S, heartbeat_secs: u16) -> Raw<S> {
        let (mut raw, tune) = Raw::login(sock).await;
        raw.tune_ok(tune.channel_max, tune.frame_max, heartbeat_secs)
            .await;
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
        raw
    }

    /// Sends the protocol header and logs in (PLAIN guest/guest) over `sock`; returns the
    /// server's `connection.tune`, not answered yet.
    pub async fn login(sock: S) -> (Raw<S>, connection::Tune) {
        let mut raw = Raw {
            sock,
            buf: BytesMut::new(),
        };
        raw.send(&protocol::frame::PROTOCOL_HEADER).await;
        let start = raw.method().await;
        assert!(matches!(
            start,
            AMQPClass::Connection(connection::AMQPMethod::Start(_))
        ));
        raw.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: LongString::from(b"\0guest\0guest".to_vec()),
                locale: "en_US".into(),
            })),
        )
        .await;
        let tune = raw.method().await;
        let AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) = tune else {
            panic!("expected tune, got {tune:?}");
        };
        (raw, tune)
    }

    /// Answers `connection.tune` with these values.
    pub async fn tune_ok(&mut self, channel_max: u16, frame_max: u32, heartbeat: u16) {
        let tune_ok = connection::TuneOk {
            channel_max,
            frame_max,
            heartbeat,
        };
        let method = AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok));
        self.send_method(0, method).await;
    }

    /// Writes raw bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).await.unwrap();
    }

    /// Writes one method frame.
    pub async fn send_method(&mut self, channel: u16, method: AMQPClass) {
        let mut buf = BytesMut::new();
        protocol::encode_method(&mut buf, ChannelId(channel), &method);
        self.send(&buf).await;
    }

    /// Opens channel `n` and waits for open-ok.
    pub async fn open_channel(&mut self, n: u16) {
        self.send_method(
            n,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        )
        .await;
        let ok = self.method().await;
        assert!(
            matches!(ok, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))),
            "{ok:?}"
        );
    }

    /// The next frame (heartbeats skipped), or None at end of stream; fails after 5 s.
    pub async fn frame(&mut self) -> Option<Frame> {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match protocol::decode(&mut self.buf, 0).unwrap() {
                    Some(Frame::Heartbeat) => continue,
                    Some(f) => return Some(f),
                    None => {}
                }
                self.buf.reserve(4096);
                let n = self.sock.read_buf(&mut self.buf).await.unwrap_or(0);
                if n == 0 {
                    return None;
                }
            }
        })
        .await
        .expect("no frame from the server in time")
    }

    /// The next method frame's method.
    pub async fn method(&mut self) -> AMQPClass {
        match self.frame().await {
            Some(Frame::Method(_, m)) => m,
            other => panic!("expected a method frame, got {other:?}"),
        }
    }

    /// Expects `connection.close` and returns its reply code (answers with close-ok).
    pub async fn expect_connection_close(&mut self) -> (u16, String) {
        let m = self.method().await;
        let AMQPClass::Connection(connection::AMQPMethod::Close(c)) = m else {
            panic!("expected connection.close, got {m:?}");
        };
        self.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
        )
        .await;
        (c.reply_code, c.reply_text.to_string())
    }

    /// Expects `channel.close` and returns its reply code.
    pub async fn expect_channel_close(&mut self) -> (u16, String) {
        let m = self.method().await;
        let AMQPClass::Channel(channel::AMQPMethod::Close(c)) = m else {
            panic!("expected channel.close, got {m:?}");
        };
        (c.reply_code, c.reply_text.to_string())
    }

    /// Reads until the server closes the socket; fails after 5 s.
    pub async fn expect_eof(&mut self) {
        tokio::time::timeout(Duration::from_secs(5), async {
            let mut scratch = [0u8; 4096];
            loop {
                match self.sock.read(&mut scratch).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("the server did not close the socket");
    }
}
