//! A fault-injecting TCP proxy in front of every node's cluster listener: node `j`'s seed
//! address is the proxy's front `j`, which forwards to node `j`'s real listener. The calling
//! node is known from the first frame of the cluster link (`Hello`, with its node id at a
//! fixed offset: docs/CLUSTER-WIRE.md), so every ordered pair of nodes has its own faults:
//!
//! - **partition**: a cut pair's connections are closed at once, and new ones closed as soon
//!   as their `Hello` arrives (both directions: a pair is unordered);
//! - **delay**: every chunk between a pair waits that long before it is forwarded;
//! - **drop**: each chunk between a pair breaks its connection with a probability (TCP never
//!   loses a byte without closing, so a lost packet shows as a broken connection).
//!
//! Loopback only. Depends on tokio and std.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where a `Hello` frame holds the caller's node id: length (4), the frame header (kind,
/// request id, group, target), magic (8), version (2).
const HELLO_NODE_AT: usize = 4 + wharf_cluster::net::wire::FRAME_HEADER_BYTES + 8 + 2;
/// A `Hello` frame's whole size.
const HELLO_BYTES: usize = HELLO_NODE_AT + 8;

#[derive(Default)]
struct Faults {
    cut: BTreeSet<(u64, u64)>,
    delay_ms: BTreeMap<(u64, u64), u64>,
    /// Break a connection on a chunk with probability `1 / n`.
    drop_one_in: BTreeMap<(u64, u64), u64>,
    rng: u64,
    /// Connections broken by a drop so far.
    dropped: u64,
}

fn pair(a: u64, b: u64) -> (u64, u64) {
    (a.min(b), a.max(b))
}

impl Faults {
    fn is_cut(&self, a: u64, b: u64) -> bool {
        self.cut.contains(&pair(a, b))
    }

    fn delay(&self, a: u64, b: u64) -> Duration {
        Duration::from_millis(self.delay_ms.get(&pair(a, b)).copied().unwrap_or(0))
    }

    /// Whether this chunk breaks its connection (xorshift, seeded: runs repeat).
    fn drops(&mut self, a: u64, b: u64) -> bool {
        let Some(n) = self.drop_one_in.get(&pair(a, b)).copied() else {
            return false;
        };
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let dropped = n > 0 && self.rng.is_multiple_of(n);
        self.dropped += u64::from(dropped);
        dropped
    }
}

/// The proxy: one front listener per node.
pub struct Proxy {
    /// Front `j - 1` forwards to node `j`: the seed addresses.
    pub fronts: Vec<SocketAddr>,
    faults: Arc<Mutex<Faults>>,
    changed: watch::Sender<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// A front on a free loopback port for each of `backends` (node `j` at `backends[j-1]`).
    pub async fn start(backends: &[SocketAddr]) -> Proxy {
        let faults = Arc::new(Mutex::new(Faults {
            rng: 0x2545_f491_4f6c_dd1d,
            ..Faults::default()
        }));
        let (changed, _) = watch::channel(0u64);
        let mut fronts = Vec::new();
        let mut tasks = Vec::new();
        for (i, backend) in backends.iter().enumerate() {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            fronts.push(listener.local_addr().unwrap());
            let to = i as u64 + 1;
            let backend = *backend;
            let faults = Arc::clone(&faults);
            let changed = changed.subscribe();
            tasks.push(tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let faults = Arc::clone(&faults);
                    let changed = changed.clone();
                    tokio::spawn(forward(stream, to, backend, faults, changed));
                }
            }));
        }
        Proxy {
            fronts,
            faults,
            changed,
            tasks,
        }
    }

    fn change(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.faults.lock().unwrap());
        self.changed.send_modify(|g| *g += 1);
    }

    /// Cuts every pair with one node in `side` and the other not, among nodes `1..=n`.
    pub fn partition(&self, side: &[u64], n: u64) {
        self.change(|f| {
            for a in side {
                for b in (1..=n).filter(|b| !side.contains(b)) {
                    f.cut.insert(pair(*a, b));
                }
            }
        });
    }

    /// Removes every partition, delay and drop.
    pub fn heal(&self) {
        self.change(|f| {
            f.cut.clear();
            f.delay_ms.clear();
            f.drop_one_in.clear();
        });
    }

    /// Delays every chunk between `a` and `b` by `ms`.
    pub fn delay(&self, a: u64, b: u64, ms: u64) {
        self.change(|f| {
            f.delay_ms.insert(pair(a, b), ms);
        });
    }

    /// How many connections drops have broken so far.
    pub fn dropped(&self) -> u64 {
        self.faults.lock().unwrap().dropped
    }

    /// Breaks a connection between `a` and `b` on one chunk in `n` (on average).
    pub fn drop_one_in(&self, a: u64, b: u64, n: u64) {
        self.change(|f| {
            f.drop_one_in.insert(pair(a, b), n);
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Forwards one connection to node `to`, once its `Hello` named the caller.
async fn forward(
    mut front: TcpStream,
    to: u64,
    backend: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    mut changed: watch::Receiver<u64>,
) {
    let mut hello = [0u8; HELLO_BYTES];
    if front.read_exact(&mut hello).await.is_err() {
        return;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&hello[HELLO_NODE_AT..HELLO_BYTES]);
    let from = u64::from_le_bytes(id);
    if faults.lock().unwrap().is_cut(from, to) {
        return;
    }
    let Ok(mut back) = TcpStream::connect(backend).await else {
        return;
    };
    let _ = front.set_nodelay(true);
    let _ = back.set_nodelay(true);
    if back.write_all(&hello).await.is_err() {
        return;
    }
    let (mut fr, mut fw) = front.into_split();
    let (mut br, mut bw) = back.into_split();
    let mut changed2 = changed.clone();
    let up = pump(&mut fr, &mut bw, from, to, &faults, &mut changed);
    let down = pump(&mut br, &mut fw, from, to, &faults, &mut changed2);
    // Either direction ending (a close, a cut, a drop) ends both: the sockets drop here.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

async fn pump(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    one: u64,
    other: u64,
    faults: &Mutex<Faults>,
    changed: &mut watch::Receiver<u64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            read = from.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let (cut, delay, dropped) = {
                    let mut state = faults.lock().unwrap();
                    (state.is_cut(one, other), state.delay(one, other), state.drops(one, other))
                };
                if cut || dropped {
                    return;
                }
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            res = changed.changed() => {
                if res.is_err() || faults.lock().unwrap().is_cut(one, other) {
                    return;
                }
            }
        }
    }
}
