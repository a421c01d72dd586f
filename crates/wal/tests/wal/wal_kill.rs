//! A real-file crash test (S-DUR-3): a child process appends from several threads and prints
//! each record once it is durable; the parent SIGKILLs it, by the pid it got from spawning it,
//! at a random moment (after a random number of confirmations), then recovers the directory and
//! checks that every record the child reported durable is there with its payload. The child is
//! this test binary itself, re-executed with `--exact <this module>::child_appends_until_killed
//! --ignored` and the directory in an environment variable, so no extra binary is needed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use wharf_wal::{FileStorage, Lsn, Wal, WalConfig};

const DIR_ENV: &str = "WHARF_WAL_KILL_DIR";

fn config() -> WalConfig {
    // Small segments so the child rolls (and the kill can land in a roll).
    WalConfig {
        segment_bytes_max: 256 * 1024,
        ..WalConfig::default()
    }
}

fn body(lsn_hint: u64, thread: u64, i: u64) -> Vec<u8> {
    format!("t{thread}-i{i}-{}", "x".repeat((lsn_hint % 700) as usize)).into_bytes()
}

/// The child test's name as the harness knows it: its module path without the crate (the
/// test binary), so it is found whichever binary this file is compiled into.
fn child_test_name() -> &'static str {
    let path = concat!(module_path!(), "::child_appends_until_killed");
    path.split_once("::").map_or(path, |(_crate, name)| name)
}

/// The child: appends until killed, printing `durable <lsn> <thread> <i>` after durability.
#[test]
#[ignore = "run by wal_kill's parent test as a child process"]
fn child_appends_until_killed() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let (wal, _) = Wal::open(
        Path::new(&dir),
        Arc::new(FileStorage),
        &config(),
        &mut |_| Ok(()),
    )
    .expect("child opens the log");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let app = wal.appender();
            std::thread::spawn(move || {
                for i in 0.. {
                    let a = app.append_durable(1, &body(t * 7 + i, t, i)).unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "durable {} {t} {i}", a.lsn.0).unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn sigkilled_child_loses_no_record_it_reported_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut confirmed: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    // A seed for the kill moments, printed so a failure can be replayed by hand.
    let seed = u64::from(std::process::id()) * 0x9E37_79B9;
    eprintln!("wal_kill seed {seed}");
    for round in 0..4u32 {
        let mut child = Command::new(&exe)
            .args(["--exact", child_test_name(), "--ignored", "--nocapture"])
            .env(DIR_ENV, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let kill_after = 50 + (seed.rotate_left(round * 13) % 1500);
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut confirmations = 0u64;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if record_line(&line, &mut confirmed) {
                confirmations += 1;
                if confirmations == kill_after {
                    break;
                }
            }
        }
        // Child::kill sends SIGKILL to exactly this pid.
        child.kill().unwrap();
        // Lines the child printed before it died were printed after durability: count them.
        for line in lines {
            record_line(&line.unwrap(), &mut confirmed);
        }
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the child must have been killed"
        );
        check_recovered(tmp.path(), &confirmed, round, seed);
    }
    assert!(
        confirmed.len() > 200,
        "the child confirmed too little to mean anything"
    );
}

fn record_line(line: &str, confirmed: &mut BTreeMap<u64, (u64, u64)>) -> bool {
    let mut parts = line.strip_prefix("durable ").map(str::split_whitespace);
    let Some(parts) = parts.as_mut() else {
        return false;
    };
    let nums: Vec<u64> = parts.filter_map(|p| p.parse().ok()).collect();
    let [lsn, t, i] = nums[..] else {
        return false;
    };
    confirmed.insert(lsn, (t, i));
    true
}

fn check_recovered(dir: &Path, confirmed: &BTreeMap<u64, (u64, u64)>, round: u32, seed: u64) {
    let mut recovered: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let (wal, report) = Wal::open(dir, Arc::new(FileStorage), &config(), &mut |r| {
        recovered.insert(r.lsn.0, r.payload.to_vec());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("seed {seed} round {round}: recovery failed: {e}"));
    drop(wal);
    for (lsn, &(t, i)) in confirmed {
        let got = recovered.get(lsn);
        let want = body(t * 7 + i, t, i);
        assert_eq!(
            got,
            Some(&want),
            "seed {seed} round {round}: confirmed record {lsn} lost or changed ({report:?})"
        );
    }
    let lsns: Vec<_> = recovered.keys().copied().collect();
    let contiguous: Vec<_> = (1..=lsns.len() as u64).collect();
    assert_eq!(
        lsns, contiguous,
        "seed {seed} round {round}: Lsns not contiguous from 1"
    );
    assert!(report.next_lsn > Lsn(*confirmed.keys().last().unwrap_or(&0)));
}
