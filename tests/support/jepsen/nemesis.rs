//! The nemesis of a Jepsen-style run: a schedule of faults drawn from a seed before the run
//! starts (so a seed names its schedule), then played against the cluster of `wharf`
//! processes: SIGKILL and restart, SIGSTOP and SIGCONT (always by the pid we spawned), and
//! partitions through the fault-injecting proxy. For the first two thirds of the time every
//! fault strikes a minority of the nodes; after that a fault may strike a majority for a
//! while (no quorum anywhere until it heals). Every fault heals before the next one. Depends
//! on the cluster harness, the history and tokio.

use std::fmt;
use std::time::Duration;

use super::client::Ctx;
use super::history::Op;
use crate::support::cluster::Cluster;

/// One fault, on the nodes it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, restarted on its data directory at the heal.
    Kill(Vec<u64>),
    /// SIGSTOP, SIGCONT at the heal.
    Pause(Vec<u64>),
    /// Each listed side cut off from every node outside it.
    Partition(Vec<Vec<u64>>),
}

/// A fault held for a while, then healed, then a quiet time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub fault: Fault,
    pub hold_ms: u64,
    pub quiet_ms: u64,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} for {} ms, then {} ms healed",
            self.fault, self.hold_ms, self.quiet_ms
        )
    }
}

/// splitmix64: the schedule's only source of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// `k` distinct nodes of `1..=n`, in increasing order.
    fn nodes(&mut self, n: u64, k: u64) -> Vec<u64> {
        let mut all: Vec<u64> = (1..=n).collect();
        for i in (1..all.len()).rev() {
            let j = usize::try_from(self.next() % (i as u64 + 1)).unwrap();
            all.swap(i, j);
        }
        let mut some: Vec<u64> = all.into_iter().take(usize::try_from(k).unwrap()).collect();
        some.sort_unstable();
        some
    }
}

/// The steps for `n` nodes filling about `total_ms`, drawn from `seed`.
pub fn schedule(seed: u64, n: u64, total_ms: u64) -> Vec<Step> {
    let mut rng = Rng(seed);
    let minority = (n - 1) / 2;
    let mut steps = Vec::new();
    let mut at = 0;
    while at < total_ms {
        let majority = at >= total_ms * 2 / 3 && rng.range(0, 2) == 0;
        let k = if majority {
            rng.range(minority + 1, n)
        } else {
            rng.range(1, minority)
        };
        let fault = match rng.range(0, 2) {
            0 => Fault::Kill(rng.nodes(n, k)),
            1 => Fault::Pause(rng.nodes(n, k)),
            // A majority partition leaves every node alone; a minority one cuts one side off.
            _ if majority => Fault::Partition((1..=n).map(|id| vec![id]).collect()),
            _ => Fault::Partition(vec![rng.nodes(n, k)]),
        };
        let step = Step {
            fault,
            hold_ms: rng.range(1_000, 4_000),
            quiet_ms: rng.range(500, 2_500),
        };
        at += step.hold_ms + step.quiet_ms;
        steps.push(step);
    }
    steps
}

fn note(ctx: &Ctx, what: String) {
    eprintln!("nemesis: {what}");
    ctx.history.record("nemesis", Op::Nemesis { what });
}

/// Starts node `id` (again) and tells the clients where it listens.
fn start(c: &mut Cluster, ctx: &Ctx, id: u64) {
    c.start_node(id);
    ctx.nodes.set(id, Some(c.url(id)));
}

/// Heals everything: the proxy's cuts, paused nodes resumed, killed nodes restarted; and a
/// node whose process ended by itself is restarted too, its last warnings recorded. No node
/// should end by itself (a deposed leader serves on as a follower, S-CLU-12); if one does,
/// the history says so and the run goes on, as an operator's supervisor would restart it.
pub fn heal(c: &mut Cluster, ctx: &Ctx) {
    c.proxy().heal();
    for id in 1..=c.size() {
        if c.is_paused(id) {
            c.resume(id);
        }
        if !c.is_running(id) {
            if c.exited(id) {
                note(
                    ctx,
                    format!("node {id} exited by itself; restarting it\n{}", tail(c, id)),
                );
                c.kill(id);
            }
            start(c, ctx, id);
        }
    }
}

/// The last warnings and errors node `id` logged: why it stopped.
fn tail(c: &Cluster, id: u64) -> String {
    let out = c.output(id);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    lines[lines.len().saturating_sub(3)..].join("\n")
}

/// Plays `steps`.
pub async fn run(c: &mut Cluster, ctx: &Ctx, steps: &[Step]) {
    for step in steps {
        heal(c, ctx);
        note(ctx, format!("{step}"));
        match &step.fault {
            Fault::Kill(ids) => {
                for &id in ids {
                    ctx.nodes.set(id, None);
                    c.kill(id);
                }
            }
            Fault::Pause(ids) => {
                for &id in ids {
                    c.pause(id);
                }
            }
            Fault::Partition(sides) => {
                for side in sides {
                    c.proxy().partition(side, c.size());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(step.hold_ms)).await;
        heal(c, ctx);
        note(ctx, "healed".into());
        tokio::time::sleep(Duration::from_millis(step.quiet_ms)).await;
    }
    heal(c, ctx);
}
