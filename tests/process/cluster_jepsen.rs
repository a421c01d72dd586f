//! The Jepsen-style test of issue #17 (S-CLU-30..33): `wharf` processes in a cluster (3 nodes;
//! `WHARF_JEPSEN_NODES=5` for five) behind the fault-injecting proxy; three publishers with
//! confirms, two consumers of the source queue that ack most messages and reject one in five
//! into the dead-letter queue (both quorum queues of the one group, so a dead-lettering is one
//! committed event), and one consumer of the dead-letter queue; meanwhile the nemesis
//! (tests/support/jepsen/nemesis.rs) kills and restarts, pauses and resumes, and partitions
//! nodes, a minority at a time and later a majority for a while. Then everything heals, the
//! publishers stop, the consumers drain what they can, a last client drains both queues with
//! `basic.get`, and the checker (tests/support/jepsen/checker.rs) reads the history.
//!
//! **Clients go through every node by default** (issue #17): forwarding is on (S-CLU-70..74)
//! and client `i` works through node `i mod n` (`Route::EveryNode`,
//! tests/support/jepsen/client.rs), whichever node leads; it reconnects to its own node after
//! an error and tries the others only while its node does not answer. A relay that ends nacks
//! the channel's unconfirmed publishes (S-CLU-74), and the leader may still enqueue some of
//! them, after what the publisher sent since on a new connection: the checker orders a
//! publisher's messages across its connections only where a confirm ordered them (S-CLU-33;
//! CI's seed 13420187199710183380 showed 24 such nacked publishes, which the checker once
//! counted as inversions). A consumer's channel whose relay ended after acks no reply of the
//! leader followed is closed (S-CLU-75): taken back, its `basic.qos` was answered by the
//! member and the history counted the lost acks as taken effect (the same seed's re-run).
//! A killed member's relay session on the leader ends with its link connection (S-CLU-76):
//! it held its consumers' unacked messages for 30 s, past the drain (seed
//! 828896324517910540, five nodes).
//! `WHARF_JEPSEN_ROUTE=leader` turns forwarding off and sends every
//! client to the group's current leader (a follower refuses with 405 naming it, S-CLU-11),
//! reconnecting to the next one after any error.
//!
//! The schedule of faults comes from a seed (printed; `WHARF_JEPSEN_SEED` repeats it); the
//! faults last `WHARF_JEPSEN_SECS` seconds (40 by default; the long run is 1800). The history
//! (every operation with its time) is written to a temporary directory kept on failure, whose
//! path the failure prints, with a copy of the nodes' data directories.
//!
//! **Known failure (found by this test, not fixed here):** a node that led, was deposed
//! without a restart (S-CLU-12) and later leads again can propose an entry no member can
//! apply (`event does not fit the state: message ids out of order`): the members' Raft stops,
//! their processes exit, and a restarted one cannot start (re-applying the committed entry
//! fails). Seen in 2 of 6 runs since that S-CLU-12 change (seeds 4911642383279489003 and
//! 4822982676570311289; a seed fixes the schedule, not the timing), in none of 3 before it
//! (when a deposed leader's process exited and was restarted).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::jepsen::checker::check;
use crate::jepsen::client::{self, Ctx, Nodes, Route};
use crate::jepsen::history::{History, Op, Queue};
use crate::jepsen::nemesis::{self, schedule};
use crate::support::cluster::{Cluster, now};

/// The group carrying the quorum queues.
const QUEUES: u64 = wharf_cluster::QUEUE_GROUP;
const PUBLISHERS: u32 = 3;
const SOURCE_CONSUMERS: u32 = 2;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// A seed nobody chose: the standard library's random hasher keys.
fn fresh_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

/// By default client `i` works through node `i mod n`, forwarded to the leader (S-CLU-70);
/// `WHARF_JEPSEN_ROUTE=leader` sends every client to the leader, forwarding off.
fn route() -> Route {
    match std::env::var("WHARF_JEPSEN_ROUTE").as_deref() {
        Ok("every") | Err(_) => Route::EveryNode,
        Ok("leader") => Route::Leader,
        Ok(other) => panic!("WHARF_JEPSEN_ROUTE is `leader` or `every`, not {other:?}"),
    }
}

/// Declares both queues on the leader, retrying while its server takes over (it refuses with
/// 405 until it does: S-CLU-11, 12).
async fn declare_queues(ctx: &Ctx, c: &Cluster, leader: u64) {
    let start = now();
    let url = c.url(leader);
    loop {
        let attempt = async {
            let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
                .await
                .map_err(|e| e.to_string())?;
            let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
            let declared = client::declare(&ch).await;
            let _ = conn.close(200, "declared".into()).await;
            declared
        };
        match attempt.await {
            Ok(()) => break,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(30),
                "the queues not declared on node {leader}: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctx.history.record(
        "setup",
        Op::Nemesis {
            what: format!("queues declared on node {leader}"),
        },
    );
}

/// Writes the history and keeps its directory when the test fails, wherever it fails after
/// the run started (a node that does not restart, clients that do not stop, the checker).
/// The nodes' data directories are copied beside it (`nodes/`), for `wharf-inspect`.
struct KeepOnFailure {
    ctx: Arc<Ctx>,
    dir: Option<tempfile::TempDir>,
    nodes: std::path::PathBuf,
    seed: u64,
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            let path = kept.join("history.txt");
            match self.ctx.history.write(&path) {
                Ok(()) => eprintln!("jepsen: seed {}: history in {}", self.seed, path.display()),
                Err(e) => eprintln!("jepsen: writing {}: {e}", path.display()),
            }
            let copied = std::process::Command::new("cp")
                .arg("-a")
                .arg(&self.nodes)
                .arg(kept.join("nodes"))
                .status();
            eprintln!(
                "jepsen: the nodes' data directories copied to {}/nodes: {copied:?}",
                kept.display()
            );
        }
    }
}

/// Waits until the clients recorded nothing for `quiet` (every consumer idle), at most
/// `within`.
async fn until_quiet(ctx: &Ctx, quiet: Duration, within: Duration) {
    let start = now();
    let mut seen = 0;
    let mut since = now();
    while start.elapsed() < within {
        let recorded = ctx.history.count();
        if recorded != seen {
            seen = recorded;
            since = now();
        } else if since.elapsed() >= quiet {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for the clients' tasks, at most `within` in all.
async fn join(tasks: Vec<JoinHandle<()>>, within: Duration) {
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(within, all)
        .await
        .expect("the clients stop once told to");
}

/// S-CLU-30, S-CLU-31, S-CLU-32, S-CLU-33: under kills, pauses and partitions, every confirmed
/// message is delivered or still queued, exactly once per queue with redeliveries flagged,
/// nothing unpublished appears, and first deliveries follow each publishing channel's order
/// (and a publisher's order where a confirm came before the next publish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_30_confirmed_messages_survive_kills_pauses_and_partitions() {
    let seed = env_u64("WHARF_JEPSEN_SEED").unwrap_or_else(fresh_seed);
    let secs = env_u64("WHARF_JEPSEN_SECS").unwrap_or(40);
    let n = env_u64("WHARF_JEPSEN_NODES").unwrap_or(3);
    let steps = schedule(seed, n, secs * 1000);
    eprintln!("jepsen: seed {seed} (WHARF_JEPSEN_SEED), {n} nodes, {secs} s of faults:");
    for s in &steps {
        eprintln!("  {s}");
    }
    let dir = tempfile::Builder::new()
        .prefix("wharf-jepsen-")
        .tempdir()
        .unwrap();
    let history_path = dir.path().join("history.txt");

    let route = route();
    let n_nodes = usize::try_from(n).unwrap();
    let mut c = match route {
        Route::EveryNode => Cluster::start(n_nodes).await,
        Route::Leader => Cluster::start_refusing(n_nodes).await,
    };
    let (leader, _) = c.leader(QUEUES, &[], 0, Duration::from_secs(30)).await;
    let urls = (1..=n).map(|id| Some(c.url(id))).collect();
    let ctx = Arc::new(Ctx {
        nodes: Nodes::new(urls, route),
        history: History::new(now()),
        stop_publishing: AtomicBool::new(false),
        stop_consuming: AtomicBool::new(false),
    });
    let _keep = KeepOnFailure {
        ctx: ctx.clone(),
        dir: Some(dir),
        nodes: c.dir().to_owned(),
        seed,
    };
    declare_queues(&ctx, &c, leader).await;

    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| tokio::spawn(client::publisher(ctx.clone(), p + 1, p as usize)))
        .collect();
    let mut consumers: Vec<_> = (0..SOURCE_CONSUMERS)
        .map(|k| {
            let client = (PUBLISHERS + k) as usize;
            tokio::spawn(client::consumer(ctx.clone(), k + 1, Queue::Source, client))
        })
        .collect();
    let dead = (PUBLISHERS + SOURCE_CONSUMERS) as usize;
    consumers.push(tokio::spawn(client::consumer(
        ctx.clone(),
        SOURCE_CONSUMERS + 1,
        Queue::Dead,
        dead,
    )));

    nemesis::run(&mut c, &ctx, &steps).await;
    // Healed: the publishers go on a little while, then the consumers take what is left.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ctx.stop_publishing.store(true, Ordering::Relaxed);
    join(publishers, Duration::from_secs(30)).await;
    until_quiet(&ctx, Duration::from_secs(3), Duration::from_secs(30)).await;
    ctx.stop_consuming.store(true, Ordering::Relaxed);
    join(consumers, Duration::from_secs(30)).await;
    let drained = client::drain(&ctx, 5).await;

    let report = check(&ctx.history.events());
    eprintln!("jepsen: {report}");
    let mut problems: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    if let Err(e) = drained {
        problems.push(format!("the final drain did not finish: {e}"));
    }
    if report.confirmed == 0 {
        problems.push("no publish was confirmed: the cluster never served".into());
    }
    let shown: Vec<&str> = problems.iter().take(30).map(String::as_str).collect();
    assert!(
        problems.is_empty(),
        "jepsen: seed {seed}: {} problems (first {} below); history in {}\n{}",
        problems.len(),
        shown.len(),
        history_path.display(),
        shown.join("\n")
    );
}

/// The schedule is a function of the seed, and keeps to the rules: a minority at a time for
/// the first two thirds, every step held and healed.
#[test]
fn the_schedule_follows_from_its_seed() {
    use crate::jepsen::nemesis::Fault;
    let a = schedule(7, 3, 60_000);
    assert_eq!(a, schedule(7, 3, 60_000));
    assert_ne!(a, schedule(8, 3, 60_000));
    let mut at = 0;
    let mut majorities = 0;
    for s in &a {
        let struck = match &s.fault {
            Fault::Kill(ids) | Fault::Pause(ids) => ids.len(),
            Fault::Partition(sides) if sides.len() == 1 => sides[0].len(),
            Fault::Partition(sides) => {
                assert_eq!(sides.len(), 3, "every node alone");
                3
            }
        };
        if struck > 1 {
            assert!(at >= 40_000, "a majority struck at {at} ms: {s}");
            majorities += 1;
        }
        assert!((1_000..=4_000).contains(&s.hold_ms), "{s}");
        at += s.hold_ms + s.quiet_ms;
    }
    assert!(at >= 60_000);
    // Not a promise of the rules, but of this seed: the majority phase is exercised.
    assert!(majorities > 0, "{a:?}");
}
