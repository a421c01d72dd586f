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

use wharf_sim::{Stats, run};

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
/// are checked to fail only that way (a known seed that passes is reported, not failed).
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
            // Which records a failed fsync takes depends on the writer thread's timing, so a
            // known seed may pass on a loaded machine: said loudly, not failed.
            (Ok(stats), Some(why)) => {
                eprintln!("seed {seed} passed: remove it from KNOWN if {why} is fixed");
                add(&mut total, &stats);
            }
            (Ok(stats), None) => add(&mut total, &stats),
            (Err(v), _) => failures.push(v.0),
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed",
        failures.len(),
        seeds.len()
    );
    println!("{} seeds: {total:?}", seeds.len());
    // The run must actually reach what it claims to check.
    if seeds.len() >= 100 {
        for (what, n) in [
            ("confirms", total.confirmed),
            ("deliveries", total.delivered),
            ("crashes", total.crashes),
            ("power losses", total.power_losses),
            ("fail-stops", total.fail_stops),
            ("full disks", total.disk_full),
            ("failed checkpoints", total.checkpoints_failed),
            ("clean restarts", total.clean_restarts),
        ] {
            assert!(n > 0, "no {what} in {} seeds: {total:?}", seeds.len());
        }
    }
}

/// A seed names a run: the same seed takes the same steps and the clients see the same
/// outputs. Exactly so for runs without injected fsync or write failures and power losses;
/// with those, the log's writer thread decides how records group into fsyncs, so which
/// records a failed fsync or a power loss takes can vary between reruns of a seed (the steps
/// and checks do not; seeds 36, 73 and 205 fail the same way on every rerun).
#[test]
fn a_seed_reproduces_its_run_exactly() {
    let mut compared = 0;
    for seed in 0..200 {
        // Failing seeds are the other test's business (KNOWN).
        let Ok(a) = run(seed, 30) else { continue };
        if a.sync_faults + a.write_faults + a.power_losses > 0 {
            continue;
        }
        let b = run(seed, 30).unwrap_or_else(|v| panic!("{v}"));
        assert_eq!(a, b, "seed {seed} ran differently twice");
        compared += 1;
        if compared == 4 {
            break;
        }
    }
    assert_eq!(compared, 4, "too few seeds without I/O faults to compare");
    assert_ne!(run(5, 120).unwrap().trace, run(6, 120).unwrap().trace);
}
