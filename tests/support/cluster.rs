//! A cluster of real `wharf` processes on loopback (issue #17's harness): node `i` runs on its
//! own data directory and ports, its cluster listener behind the fault-injecting [`Proxy`]
//! (its seed address is the proxy's front `i`, `--cluster-id i`), so a test can partition any
//! set of nodes, delay or drop their traffic, pause a node (SIGSTOP/SIGCONT), kill it
//! (SIGKILL) and restart it, always by the pid we spawned. What a node says of its groups
//! comes from `wharfctl cluster_status` against its real listener, read with
//! `wharf_cluster::status::parse`. Depends on the binaries' command lines and output, that
//! parser, tokio, std and lapin (a client's [`connect`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use wharf_cluster::status::{self, GroupStatus};

use super::binary::{Broker, Starting};
use super::proxy::Proxy;

/// Real time: the nodes are processes on real sockets and timers; waits on them are
/// bounded in real time, and a failover is measured in it (S-CLU-9).
#[expect(
    clippy::disallowed_methods,
    reason = "processes on real timers: waits and failover times are real time"
)]
pub fn now() -> Instant {
    Instant::now()
}

/// Node `id`'s place in the vectors.
fn slot(id: u64) -> usize {
    usize::try_from(id - 1).unwrap()
}

/// `n` distinct free loopback ports (`free_port`: below the ephemeral range, so nothing
/// binding port 0 takes one before the node binds it).
fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    while addrs.len() < n {
        let addr = SocketAddr::from(([127, 0, 0, 1], super::free_port()));
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    addrs
}

/// The cluster: nodes `1..=n`.
pub struct Cluster {
    dir: tempfile::TempDir,
    proxy: Proxy,
    listen: Vec<SocketAddr>,
    seeds: String,
    nodes: Vec<Option<Broker>>,
    paused: Vec<bool>,
    /// Nodes forward clients' quorum queue work to the leader (S-CLU-70), as `wharf` does by
    /// default; off ([`Cluster::start_refusing`]) only for the tests of a follower's 405
    /// naming the leader (S-CLU-11, S-CLU-13).
    forward: bool,
}

impl Cluster {
    /// Starts `n` nodes behind the proxy, all at once (a new cluster's nodes wait for each
    /// other before they serve, S-CLU-20), and waits for each one's start line. The nodes
    /// forward their clients' quorum queue work to the leader (S-CLU-70).
    pub async fn start(n: usize) -> Cluster {
        let mut c = Cluster::prepare(n).await;
        c.start_all();
        c
    }

    /// As [`Cluster::start`], with `--cluster-forward false`: a follower refuses quorum queue
    /// work with 405 naming the leader (S-CLU-11, S-CLU-13), for the tests of that refusal.
    pub async fn start_refusing(n: usize) -> Cluster {
        let mut c = Cluster::prepare(n).await;
        c.forward = false;
        c.start_all();
        c
    }

    /// Starts every node at once (a new cluster's nodes wait for each other before they
    /// serve, S-CLU-20) and waits for each one's start line.
    pub fn start_all(&mut self) {
        let starting: Vec<_> = (1..=self.size())
            .map(|id| (id, self.launch_node(id)))
            .collect();
        for (id, s) in starting {
            self.started(id, s);
        }
    }

    /// The proxy and the nodes' addresses and directories, no node started yet (to set faults
    /// before the nodes first meet).
    pub async fn prepare(n: usize) -> Cluster {
        let listen = free_addrs(n);
        let proxy = Proxy::start(&listen).await;
        let seeds = proxy
            .fronts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Cluster {
            dir: tempfile::tempdir().unwrap(),
            proxy,
            listen,
            seeds,
            nodes: (0..n).map(|_| None).collect(),
            paused: vec![false; n],
            forward: true,
        }
    }

    /// How many nodes.
    pub fn size(&self) -> u64 {
        self.nodes.len() as u64
    }

    /// The directory holding every node's data directory (`node-<id>`).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn dir_of(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    /// Starts node `id` (again) on its directory and cluster port.
    pub fn start_node(&mut self, id: u64) {
        let starting = self.launch_node(id);
        self.started(id, starting);
    }

    /// Waits for node `id`'s start line and keeps it as running.
    fn started(&mut self, id: u64, starting: Starting) {
        let i = slot(id);
        self.nodes[i] = Some(tokio::task::block_in_place(|| starting.wait()));
        self.paused[i] = false;
    }

    /// Spawns node `id` on its directory and cluster port, without waiting for its start.
    fn launch_node(&self, id: u64) -> Starting {
        let i = slot(id);
        assert!(self.nodes[i].is_none(), "node {id} is running");
        let args = [
            "--cluster-listen".to_owned(),
            self.listen[i].to_string(),
            "--cluster-seeds".to_owned(),
            self.seeds.clone(),
            "--cluster-id".to_owned(),
            id.to_string(),
            "--cluster-forward".to_owned(),
            self.forward.to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let dir = self.dir_of(id);
        Broker::launch_with_args(env!("CARGO_BIN_EXE_wharf"), &dir, &args)
    }

    /// Deletes node `id`'s data directory (the node stopped): it restarts as a member that
    /// lost its disk.
    pub fn wipe(&mut self, id: u64) {
        assert!(self.nodes[slot(id)].is_none(), "node {id} is running");
        std::fs::remove_dir_all(self.dir_of(id)).unwrap();
    }

    /// The address node `id`'s cluster listener answers `wharfctl` on.
    pub fn listen(&self, id: u64) -> String {
        self.listen[slot(id)].to_string()
    }

    /// The address the other nodes reach node `id` at (its seed: the proxy's front).
    pub fn seed(&self, id: u64) -> String {
        self.proxy.fronts[slot(id)].to_string()
    }

    /// SIGKILL to node `id`, by its pid.
    pub fn kill(&mut self, id: u64) {
        let broker = self.nodes[slot(id)].take().expect("node running");
        tokio::task::block_in_place(|| broker.kill());
    }

    fn signal(&self, id: u64, sig: &str) {
        let pid = self.nodes[slot(id)].as_ref().expect("node running").pid();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// SIGSTOP to node `id`: it stops answering, its connections stay open. It stays stopped
    /// until [`Cluster::resume`], unless the kernel continues it: POSIX sends SIGHUP and
    /// SIGCONT to the stopped processes of a process group that becomes orphaned, which
    /// happens to the nodes of a test run in the background from a shell that exits while
    /// it runs (`setsid` avoids it). [`Cluster::is_stopped`] tells.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, "-STOP");
        self.paused[slot(id)] = true;
    }

    /// SIGCONT to node `id`.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, "-CONT");
        self.paused[slot(id)] = false;
    }

    /// Node `id`'s AMQP URL (default user and vhost); it must be running.
    pub fn url(&self, id: u64) -> String {
        self.nodes[slot(id)].as_ref().expect("node running").url()
    }

    /// Node `id`'s management API (`http://HOST:PORT`, from its log line), or with
    /// `prometheus` its Prometheus listener; it must be running.
    pub fn http_base(&self, id: u64, prometheus: bool) -> String {
        let out = self.output(id);
        let what = if prometheus {
            "Prometheus metrics listening"
        } else {
            "management API listening addr"
        };
        let line = out
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("node {id} logs {what:?}:\n{out}"));
        let addr = super::binary::field(line, "addr").expect("an address");
        format!("http://{addr}")
    }

    /// `method path` with `body` on node `id`'s management API as guest: the status and the
    /// body as JSON (`null` when it is not JSON); `(0, null)` when nothing answered (the node
    /// may be paused or restarting). Node `id` must be running.
    pub async fn api_request(
        &self,
        id: u64,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        super::mgmt_request(self.http_base(id, false), method, path, body)
            .await
            .unwrap_or((0, serde_json::Value::Null))
    }

    /// Whether node `id`'s process is stopped now (state `T` in `/proc/PID/stat`), as a
    /// paused node must be until it is resumed.
    pub fn is_stopped(&self, id: u64) -> bool {
        let pid = self.nodes[slot(id)].as_ref().expect("node running").pid();
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    }

    /// Whether node `id` is paused (SIGSTOP sent, no SIGCONT yet).
    pub fn is_paused(&self, id: u64) -> bool {
        self.paused[slot(id)]
    }

    /// Whether node `id` was started and its process has ended without our SIGKILL.
    pub fn exited(&mut self, id: u64) -> bool {
        self.nodes[slot(id)]
            .as_mut()
            .is_some_and(Broker::has_exited)
    }

    /// Whether node `id` was started, not killed, and its process still runs.
    pub fn is_running(&mut self, id: u64) -> bool {
        self.nodes[slot(id)].is_some() && !self.exited(id)
    }

    /// The proxy, to partition, delay and drop.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Everything node `id` logged so far (for a failure's message).
    pub fn output(&self, id: u64) -> String {
        self.nodes[slot(id)]
            .as_ref()
            .map_or_else(|| "(not running)".into(), Broker::output)
    }

    /// Node `id`'s view of group `group`, by `wharfctl cluster_status` against its real
    /// listener; `None` when it is not running, paused, or does not answer.
    pub fn view(&self, id: u64, group: u64) -> Option<GroupStatus> {
        let i = slot(id);
        if self.nodes[i].is_none() || self.paused[i] {
            return None;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_wharfctl"))
            .args(["cluster_status", "--cluster", &self.listen[i].to_string()])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let (node, groups) = status::parse(&String::from_utf8_lossy(&out.stdout))?;
        assert_eq!(node, id, "node {id} answers as {node}");
        groups.into_iter().find(|g| g.group == group)
    }

    /// Polls until a node not in `except` leads `group` in a term above `after_term`, and
    /// returns it with its view; panics after `within`.
    pub async fn leader(
        &self,
        group: u64,
        except: &[u64],
        after_term: u64,
        within: Duration,
    ) -> (u64, GroupStatus) {
        let start = now();
        loop {
            for id in (1..=self.size()).filter(|id| !except.contains(id)) {
                if let Some(v) = self.view(id, group)
                    && v.state == "leader"
                    && v.term > after_term
                {
                    return (id, v);
                }
            }
            assert!(
                start.elapsed() < within,
                "no leader of group {group} (besides {except:?}, after term {after_term}) within {within:?}\n{}",
                (1..=self.size())
                    .map(|id| format!("node {id}: {:?}", self.view(id, group)))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls until node `id`'s view of `group` satisfies `cond`; panics after `within`.
    pub async fn until(
        &self,
        id: u64,
        group: u64,
        what: &str,
        within: Duration,
        cond: impl Fn(&GroupStatus) -> bool,
    ) -> GroupStatus {
        let start = now();
        loop {
            if let Some(v) = self.view(id, group)
                && cond(&v)
            {
                return v;
            }
            assert!(
                start.elapsed() < within,
                "node {id}, group {group}: {what} not within {within:?}; last view {:?}\n{}",
                self.view(id, group),
                self.output(id)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Polls `check` (against node `id`) until it holds; panics after `wait` naming `what` and
/// the last answer.
pub async fn eventually<F, Fut>(id: u64, what: &str, wait: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let began = now();
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if began.elapsed() > wait => panic!("node {id}: {what}; last: {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A client connection to `url` (lapin), within 20 s.
pub async fn connect(url: &str) -> lapin::Connection {
    super::within(
        20,
        lapin::Connection::connect(url, lapin::ConnectionProperties::default()),
    )
    .await
    .unwrap()
}
