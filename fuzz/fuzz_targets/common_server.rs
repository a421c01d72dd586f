//! Shared by the fuzz targets that drive a whole server: one in-process `TestBroker` (manual
//! clock, simulated disk, management API) on 127.0.0.1, started once per fuzzing process.
//! AMQP connections go through the server's in-memory door (`connect_in_memory`, S-NET-2: no
//! socket, and the end of the input is seen at once, so a run never waits out a timeout);
//! the management API through blocking loopback sockets. A panic anywhere in the server (any
//! task, any thread) aborts the process through libFuzzer's panic hook, so it is reported as
//! a crash.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_server::testing::TestBroker;

// Shared by two targets (`mod common_server;` in each): each reads only its own address.
#[allow(dead_code)]
pub struct Fixture {
    pub amqp: SocketAddr,
    pub mgmt: SocketAddr,
    broker: TestBroker,
    runtime: tokio::runtime::Runtime,
}

pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let broker = runtime
            .block_on(
                TestBroker::builder()
                    .manual_clock(1_700_000_000_000)
                    .configure(|c| {
                        c.bind = "127.0.0.1:0".into();
                        c.mgmt_bind = Some("127.0.0.1:0".into());
                        c.prometheus_bind = None;
                    })
                    .start(),
            )
            .expect("test broker starts");
        let server = broker.server().expect("running");
        Fixture {
            amqp: server.local_addr(),
            mgmt: server.mgmt_addr().expect("management API"),
            broker,
            runtime,
        }
    })
}

/// `connection.close-ok`'s class and method ids, as they stand in its frame.
#[allow(dead_code)]
const CLOSE_OK: [u8; 4] = [0, 10, 0, 51];

/// How a client ends its side of an in-memory exchange.
#[allow(dead_code)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Hang up right after sending: the server sees the end of its input at once, and, as
    /// RabbitMQ does on a closed socket, may drop what it had not yet written (frames still
    /// waiting for the log to be durable).
    HangUp,
    /// Keep the sending side open and read until the server's `close-ok` (or until it closes
    /// the connection), then hang up, as a well-behaved client does.
    AwaitClose,
}

/// Over a new in-memory AMQP connection: sends `bytes`, then `tail`, then ends as `ending`
/// says, reading meanwhile until the server closes its end (or `timeout`, a bound that a
/// correct server never reaches). Returns what was read.
#[allow(dead_code)]
pub fn exchange_amqp(
    fx: &Fixture,
    bytes: &[u8],
    tail: &[u8],
    ending: Ending,
    timeout: Duration,
) -> Vec<u8> {
    fx.runtime.block_on(async {
        let server = fx.broker.server().expect("running");
        let stream = server
            .connect_in_memory()
            .expect("the server still accepts connections");
        let (mut read, mut write) = tokio::io::split(stream);
        let send = async {
            let _ = write.write_all(bytes).await;
            let _ = write.write_all(tail).await;
            // Dropping only the write half leaves the stream open (the read half holds it).
            if ending == Ending::HangUp {
                let _ = write.shutdown().await;
            }
        };
        let receive = async {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while out.len() < (1 << 20) {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                }
                // A client that awaits the close hangs up once it has read `close-ok` (the
                // server, as RabbitMQ, waits for it to).
                if ending == Ending::AwaitClose && out.windows(4).any(|w| w == CLOSE_OK) {
                    break;
                }
            }
            out
        };
        let both = async { tokio::join!(send, receive).1 };
        tokio::time::timeout(timeout, both)
            .await
            .unwrap_or_default()
    })
}

/// What [`exchange`] read, and how its reading ended.
#[allow(dead_code)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// Why the reading stopped before the server closed its end (the timeout, a reset), or
    /// `None` when it closed (or 1 MiB was read).
    pub error: Option<std::io::Error>,
}

/// Over a new loopback connection: sends `bytes`, then `tail`, and reads until the server
/// closes (or `timeout`: a connection left waiting for more input is not a failure).
///
/// A blocking call of this (main) thread is interrupted by libFuzzer's SIGALRM, installed
/// without `SA_RESTART` and raised every `-timeout`/2 + 1 s (601 s by default), and a socket
/// with a read timeout is never restarted anyway (signal(7)): an interrupted call is retried,
/// never taken for the end of the answer (fuzz/RUNS.md, 2026-11-28).
#[allow(dead_code)]
pub fn exchange(addr: SocketAddr, bytes: &[u8], tail: &[u8], timeout: Duration) -> Reply {
    let deadline = now() + timeout;
    let mut s = connect(addr).expect("the server still accepts connections");
    s.set_nodelay(true).ok();
    let _ = s.write_all(bytes);
    let _ = s.write_all(tail);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut error = None;
    while out.len() < (1 << 20) {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            error = Some(ErrorKind::TimedOut.into());
            break;
        }
        s.set_read_timeout(Some(left)).ok();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    Reply { bytes: out, error }
}

/// The real time, which bounds how long a client waits for an answer (the server runs on its
/// manual clock).
#[allow(dead_code)]
#[expect(
    clippy::disallowed_methods,
    reason = "a client bounds its real waiting time; this is not broker logic"
)]
pub fn now() -> Instant {
    Instant::now()
}

/// Connects to `addr`, again if a signal interrupts the call.
#[allow(dead_code)]
fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    loop {
        match TcpStream::connect(addr) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            result => return result,
        }
    }
}
