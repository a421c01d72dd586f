//! The deterministic simulation in CI: a few hundred seeds of the whole broker and store on
//! the simulated disk and clock, with crashes, power losses, failing fsyncs and writes and a
//! full disk, each checked against the reference model (`wharf_sim::Model`): confirmed
//! messages are never lost (S-DUR-3), never duplicated, expired on time (S-TTL-4, S-DUR-5),
//! dead-lettered exactly once (S-DLX-7), and a full disk leaves no partial checkpoint
//! (S-DISK-4).
//!
//! - `WHARF_SIM_SEEDS=100000` runs that many seeds (default 300, CI);
//! - `WHARF_SIM_SEED=1234` runs that one seed (a failure prints its seed and the command);
//! - `WHARF_SIM_STEPS=400` changes the steps per seed (default 150).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

mod findings;
mod seeds;
mod server;

use wharf_sim::{Stats, Violation, run};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

fn steps() -> u64 {
    env("WHARF_SIM_STEPS").unwrap_or(150)
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = env("WHARF_SIM_SEED") {
        return vec![seed];
    }
    (0..env("WHARF_SIM_SEEDS").unwrap_or(300)).collect()
}

/// Seeds of the CI range that fail today, with the words their failure must contain: wharf
/// bugs the simulation found, outside this harness (see `findings.rs` and the commit). They
/// are checked to fail only that way, and to fail (a run is exact).
/// Empty: seeds 126, 146 and 267 (a checkpoint whose cleanup's directory sync failed,
/// S-DUR-8) pass since the store fix and its regression test
/// (`store_checkpoint_install` in wharf-store's tests).
const KNOWN: [(u64, &str); 0] = [];

fn add(total: &mut Stats, s: &Stats) {
    total.steps += s.steps;
    total.published += s.published;
    total.confirmed += s.confirmed;
    total.delivered += s.delivered;
    total.checkpoints += s.checkpoints;
    total.checkpoints_failed += s.checkpoints_failed;
    total.crashes += s.crashes;
    total.power_losses += s.power_losses;
    total.sync_faults += s.sync_faults;
    total.write_faults += s.write_faults;
    total.fail_stops += s.fail_stops;
    total.disk_full += s.disk_full;
    total.blocked += s.blocked;
    total.slow_ios += s.slow_ios;
    total.stalls += s.stalls;
    total.clean_restarts += s.clean_restarts;
    total.recoveries += s.recoveries;
}

#[test]
fn s_dur_3_s_ttl_4_s_dlx_7_s_disk_4_every_seed_matches_the_model() {
    let seeds = seeds();
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        let known = KNOWN.iter().find(|(s, _)| *s == seed).map(|(_, why)| *why);
        match (run(seed, steps()), known) {
            (Err(v), Some(why)) if v.0.contains(why) && steps() == 150 => {
                eprintln!("known failure (a wharf bug, not fixed yet): {v}");
            }
            // A run is exact (`a_seed_reproduces_its_run_exactly`): a known seed that passes
            // was fixed, and must leave KNOWN.
            (Ok(_), Some(why)) => {
                failures.push(format!("seed {seed} passed: remove it from KNOWN ({why})"));
            }
            (Ok(stats), None) => add(&mut total, &stats),
            (Err(v), _) => failures.push(v.0),
        }
    }
    report(&failures, seeds.len());
    println!("{} seeds: {total:?}", seeds.len());
    // The run must actually reach what it claims to check.
    if seeds.len() >= 100 {
        assert_reached(
            &total,
            &[
                ("confirms", total.confirmed),
                ("deliveries", total.delivered),
                ("crashes", total.crashes),
                ("power losses", total.power_losses),
                ("fail-stops", total.fail_stops),
                ("full disks", total.disk_full),
                ("failed checkpoints", total.checkpoints_failed),
                ("clean restarts", total.clean_restarts),
            ],
        );
    }
}

/// Prints every failed seed (each with its command), then fails if there was one.
fn report(failures: &[String], seeds: usize) {
    for f in failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed",
        failures.len()
    );
}

/// Every count of `reached` is above zero: the seeds met what they claim to check.
fn assert_reached(total: &Stats, reached: &[(&str, u64)]) {
    for (what, n) in reached {
        assert!(*n > 0, "no {what} among the seeds run: {total:?}");
    }
}

/// A seed names a run, exactly: the same seed takes the same steps, groups the same records
/// into the same fsyncs (the log's writer runs inline, `WalConfig::inline_writer`), so an
/// injected fault and a power loss take the same records, and the clients see the same
/// outputs. Compared through the full trace (every choice, batch of events, output and the
/// disk's final bytes) of a set of seeds run twice, the second time on another thread (so that
/// nothing may depend on a thread's state either), faults of every kind included.
#[test]
fn a_seed_reproduces_its_run_exactly() {
    let total = reproduces(run, 40);
    assert_reached(
        &total,
        &[
            ("fsync faults", total.sync_faults),
            ("write faults", total.write_faults),
            ("power losses", total.power_losses),
            ("fail-stops", total.fail_stops),
            ("full disks", total.disk_full),
        ],
    );
}

/// Runs seeds `0..n` of `run` twice, the second time on another thread, and checks every
/// run came out the same (statistics and trace) and no two seeds share a trace; returns the
/// totals of the passing runs.
fn reproduces(run: fn(u64, u64) -> Result<Stats, Violation>, n: u64) -> Stats {
    let seeds: Vec<u64> = (0..n).collect();
    let first: Vec<_> = seeds.iter().map(|&s| run(s, steps())).collect();
    let again = std::thread::spawn(move || seeds.iter().map(|&s| run(s, steps())).collect());
    let again: Vec<_> = again.join().unwrap();
    let mut total = Stats::default();
    for (seed, (a, b)) in first.iter().zip(&again).enumerate() {
        assert_eq!(a, b, "seed {seed} ran differently twice");
        if let Ok(stats) = a {
            add(&mut total, stats);
        }
    }
    let traces: std::collections::BTreeSet<u64> = first.iter().flatten().map(|s| s.trace).collect();
    assert_eq!(
        traces.len(),
        first.iter().flatten().count(),
        "two seeds, one trace"
    );
    total
}
