//! The test cluster: members on an in-memory network (openraft's own test style), each with
//! its Raft log in a WAL on its own simulated disk. Elections, heartbeats and snapshots never
//! fire by themselves (`enable_tick = false`): a test triggers each, so every run takes the
//! same path. Time is tokio's paused clock, moved only by `advance` (to expire a leader
//! lease); the broker's time is the explicit `now` each proposal carries.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};
use wharf_broker::{Broker, Command, DurableState, Event, Outcome};
use wharf_cluster::testing::{Router, busy};
use wharf_cluster::{Proposal, QueueStateMachine, Raft, WalLogReader, WalLogStore};
use wharf_wal::{SimStorage, WalConfig};

/// The group every test member runs.
pub const GROUP: u64 = 7;
/// The log directory on each member's simulated disk.
pub const DIR: &str = "/raft";
/// The snapshot directory on each member's simulated disk.
pub const SNAPSHOT_DIR: &str = "/raft-snapshot";
/// openraft's election timeout (ms); its leader lease is the maximum.
const ELECTION_TIMEOUT_MAX_MS: u64 = 300;
/// Real time a test may take before [`HangGuard`] calls it hung.
const HANG_AFTER: Duration = Duration::from_secs(60);

/// Aborts the test process if the test holding it has not finished within [`HANG_AFTER`] of
/// real time: the waits on metrics have no timeout of their own (see [`Cluster::until`]), so a
/// state that never comes would otherwise hang the run. Not a clock: nothing waits on it.
pub struct HangGuard {
    done: Option<std::sync::mpsc::Sender<()>>,
}

impl HangGuard {
    /// Starts the guard for the test `name`.
    pub fn new(name: &'static str) -> HangGuard {
        let (done, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(HANG_AFTER) {
                eprintln!("{name}: still running after {HANG_AFTER:?}: hung");
                std::process::abort();
            }
        });
        HangGuard { done: Some(done) }
    }
}

impl Drop for HangGuard {
    fn drop(&mut self) {
        drop(self.done.take());
    }
}

/// One member: its Raft, its committed state, its log, its disk.
pub struct Member {
    pub raft: Raft,
    pub machine: QueueStateMachine,
    pub log: WalLogReader,
    pub disk: SimStorage,
}

/// A cluster of members 1..=n, on one router.
pub struct Cluster {
    pub router: Arc<Router>,
    pub members: BTreeMap<u64, Member>,
}

fn config() -> Arc<Config> {
    let config = Config {
        cluster_name: "wharf-test".into(),
        enable_tick: false,
        enable_heartbeat: false,
        enable_elect: false,
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Config::default()
    };
    Arc::new(config.validate().unwrap())
}

/// Segments small enough that a few entries fill several, so purges reclaim some.
pub const SEGMENT_BYTES: u64 = 16 * 1024;

/// Opens a member's log on `disk` (a fresh disk, or one kept across a restart).
pub fn open_log(disk: &SimStorage) -> WalLogStore {
    let config = WalConfig {
        segment_bytes_max: SEGMENT_BYTES,
        ..WalConfig::default()
    };
    WalLogStore::open(Path::new(DIR), Arc::new(disk.clone()), &config, GROUP).unwrap()
}

/// How many WAL segment files member's `disk` holds.
pub fn segment_files(disk: &SimStorage) -> usize {
    use wharf_wal::Storage;
    disk.list(Path::new(DIR))
        .unwrap()
        .iter()
        .filter(|n| {
            std::path::Path::new(n)
                .extension()
                .is_some_and(|e| e == "wal")
        })
        .count()
}

/// Opens a member's state machine on `disk`, from its snapshot file when there is one.
pub fn open_machine(disk: &SimStorage) -> QueueStateMachine {
    QueueStateMachine::open(Arc::new(disk.clone()), Path::new(SNAPSHOT_DIR)).unwrap()
}

/// Starts member `id` on `disk` (fresh, or kept across a restart) and puts it on the router.
async fn start_member(router: &Arc<Router>, id: u64, disk: SimStorage) -> Member {
    let store = open_log(&disk);
    let log = store.reader();
    let machine = open_machine(&disk).with_log(GROUP, store.reader());
    let net = router.net(id);
    let raft = busy(Raft::new(id, config(), net, store, machine.clone()))
        .await
        .unwrap();
    router.add(id, raft.clone());
    Member {
        raft,
        machine,
        log,
        disk,
    }
}

impl Cluster {
    /// Starts members 1..=n and initializes the group on member 1, which elects itself.
    pub async fn start(n: u64) -> Cluster {
        let router = Router::for_paused_clock();
        let mut members = BTreeMap::new();
        for id in 1..=n {
            members.insert(id, start_member(&router, id, SimStorage::new(id)).await);
        }
        let nodes: BTreeMap<u64, BasicNode> = (1..=n)
            .map(|id| {
                let addr = format!("127.0.0.{id}:5680");
                (id, BasicNode { addr })
            })
            .collect();
        members[&1].raft.initialize(nodes).await.unwrap();
        let cluster = Cluster { router, members };
        cluster.wait_leader(1).await;
        cluster
    }

    /// Stops member `id` and starts it again: on what its disk had synced at that moment when
    /// `power_loss`, else on its disk after a clean stop (its log's WAL closed). Its log comes
    /// back from its WAL, its committed state from its snapshot file and the committed entries
    /// after it.
    ///
    /// Then, when the member is not cut off, the leader sends it a heartbeat, as a running
    /// cluster's leader does within a heartbeat interval (this cluster runs no ticks). Only the
    /// leader can tell a restarted member that the last entries of its log are committed: its
    /// committed mark is not synced (`WalLogStore::save_committed`), so a power loss may lose
    /// the last one, and a commit sent while the member was down is not sent again. Without
    /// this heartbeat such a member never applies them (issue 17: the void test's hang).
    pub async fn restart(&mut self, id: u64, power_loss: bool) {
        let old = self.members.remove(&id).unwrap();
        self.router.remove(id);
        let synced = power_loss.then(|| old.disk.power_loss());
        busy(old.raft.shutdown()).await.unwrap();
        let disk = synced.unwrap_or_else(|| old.disk.clone());
        drop(old);
        let member = start_member(&self.router, id, disk).await;
        self.members.insert(id, member);
        if !self.router.is_cut(id)
            && let Some(leader) = self.leader()
        {
            self.raft(leader).trigger().heartbeat().await.unwrap();
        }
    }

    /// The member that leads in the highest term among those not cut off, if any does.
    pub fn leader(&self) -> Option<u64> {
        self.members
            .iter()
            .filter(|&(&id, _)| !self.router.is_cut(id))
            .map(|(&id, m)| (id, m.raft.metrics().borrow().clone()))
            .filter(|(_, m)| m.state == ServerState::Leader)
            .max_by_key(|(_, m)| m.current_term)
            .map(|(id, _)| id)
    }

    pub fn raft(&self, id: u64) -> &Raft {
        &self.members[&id].raft
    }

    /// Cuts member `id` off from every other member.
    pub fn isolate(&self, id: u64) {
        self.router.isolate(id);
    }

    /// Reconnects member `id`.
    pub fn heal(&self, id: u64) {
        self.router.heal(id);
    }

    /// Waits until member `id`'s metrics satisfy `cond`. openraft's own `wait` times out on
    /// tokio's clock, which the paused runtime jumps forward whenever it is idle (as it is
    /// while the WAL's writer thread syncs); this waits on the metrics channel alone, and the
    /// test's [`HangGuard`] turns a condition that never comes into a failure.
    pub async fn until(
        &self,
        id: u64,
        what: &str,
        cond: impl Fn(&openraft::RaftMetrics<u64, BasicNode>) -> bool,
    ) {
        let mut rx = self.raft(id).metrics();
        let debug = std::env::var_os("WHARF_CLUSTER_DEBUG").is_some();
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        if debug {
            eprintln!("{name}: until {id}: {what}");
        }
        if let Err(e) = rx
            .wait_for(|m| {
                if debug {
                    eprintln!("{name}:   {m}");
                }
                cond(m)
            })
            .await
        {
            panic!("member {id}: waiting for {what}: {e}");
        }
    }

    /// Waits until `id` is leader.
    pub async fn wait_leader(&self, id: u64) {
        self.until(id, "leadership", |m| m.state == ServerState::Leader)
            .await;
    }

    /// Waits until every member that is not cut off has applied the whole log of `leader`:
    /// the last commit has reached them all, and no append is still on its way to refresh a
    /// voter's leader lease after [`Cluster::elect`] let it run out.
    pub async fn settle(&self, leader: u64) {
        let target = self.last_index(leader);
        for &id in self.members.keys().filter(|&&id| !self.router.is_cut(id)) {
            self.until(id, "the leader's whole log applied", |m| {
                m.last_applied.is_some_and(|l| l.index >= target)
            })
            .await;
        }
    }

    /// Elects `id`: lets the current leader's lease run out on the voters (tokio's paused
    /// clock), then triggers `id`'s campaign.
    pub async fn elect(&self, id: u64) {
        tokio::time::advance(Duration::from_millis(ELECTION_TIMEOUT_MAX_MS + 1)).await;
        self.raft(id).trigger().elect().await.unwrap();
        self.wait_leader(id).await;
    }

    /// Waits until member `id` has applied index `index`.
    pub async fn wait_applied(&self, id: u64, index: u64) {
        self.until(id, "applied index", |m| {
            m.last_applied.is_some_and(|l| l.index >= index)
        })
        .await;
    }

    /// Member `id` takes over as leader at its clock `clock_ms` (S-CLU-6): its live broker, and
    /// the outcome of ending recovery, whose events it proposes first.
    pub fn take_over(&self, id: u64, clock_ms: u64) -> (LiveBroker, Outcome) {
        let (broker, out) = self.members[&id]
            .machine
            .with(|m| wharf_cluster::take_over(m, clock_ms))
            .unwrap();
        (LiveBroker { broker }, out)
    }

    /// Member `id`'s committed durable state.
    pub fn committed(&self, id: u64) -> DurableState {
        self.members[&id]
            .machine
            .with(wharf_cluster::Machine::durable_state)
    }

    /// The log index of member `id`'s last entry.
    pub fn last_index(&self, id: u64) -> u64 {
        self.raft(id).metrics().borrow().last_log_index.unwrap_or(0)
    }
}

/// What a leader's broker task does with a batch: runs the commands on its live broker at
/// `now_ms` and proposes the events they produced (DESIGN "Replication").
pub struct LiveBroker {
    pub broker: Broker,
}

impl LiveBroker {
    /// A leader's broker before anything happened: a fresh one.
    pub fn new() -> LiveBroker {
        LiveBroker {
            broker: Broker::new(),
        }
    }

    /// Handles `cmds` at `now_ms`; returns the proposal (the events, in order) and the
    /// outcomes.
    pub fn batch(&mut self, cmds: Vec<Command>, now_ms: u64) -> (Proposal, Vec<Outcome>) {
        let mut events: Vec<Event> = Vec::new();
        let mut outcomes = Vec::new();
        for cmd in cmds {
            let out = self.broker.handle(cmd, now_ms).unwrap();
            events.extend(out.events.iter().cloned());
            outcomes.push(out);
        }
        (
            Proposal {
                now_ms,
                events: events.into(),
                origin: None,
            },
            outcomes,
        )
    }
}
