//! Golden data directories: each is written by a scripted workload through the library
//! (Broker + Store in-process, fixed times), checked in under `tests/golden/<name>/data`, and
//! every command's output on it is compared exactly with `tests/golden/<name>/expected/`.
//!
//! Regenerate (after a deliberate change of output or workload) with
//! `WHARF_BLESS=1 cargo test -p wharf-inspect --test inspect golden:: -- --test-threads=1`,
//! then review the diff (`git diff tools/inspect/tests/golden`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{T0_MS, golden_dir, scenario_basic};

/// Each expected-output file and the command line that makes it (`data` is the directory;
/// `@N` is the fixed start time plus N ms).
const CASES: &[(&str, &str)] = &[
    ("summary.txt", "summary data --now @120000"),
    ("summary.json", "--json summary data --now @120000"),
    ("verify.txt", "verify data"),
    ("verify.json", "--json verify data --all"),
    ("dump.txt", "dump data"),
    ("dump.json", "--json dump data --body base64"),
    (
        "dump-filtered.txt",
        "dump data --kind published --queue audit --since @3 --until @5",
    ),
    (
        "dump-dead-lettered.txt",
        "dump data --kind dead_lettered --body none",
    ),
    (
        "dump-message.json",
        "--json dump data --message 2 --body hex",
    ),
    ("trace.txt", "trace data --by message_id=order-1"),
    ("trace.json", "--json trace data --by message_id=order-1"),
    ("trace-id.txt", "trace data 6 --body none"),
    (
        "trace-header.txt",
        "trace data --by header:tenant=globex --body none",
    ),
    (
        "trace-correlation.txt",
        "trace data --by correlation_id=c-5",
    ),
    ("queues.txt", "queues data --now @30000"),
    ("queues.json", "--json queues data --now @30000"),
    ("queues-later.txt", "queues data --now @120000"),
    ("export.json", "export data --queue dlq --now @30000"),
];

fn cases() -> Vec<(&'static str, Vec<String>)> {
    CASES
        .iter()
        .map(|(file, line)| {
            let args = line
                .split(' ')
                .map(|a| match a.strip_prefix('@') {
                    Some(ms) => (T0_MS + ms.parse::<u64>().unwrap()).to_string(),
                    None => a.to_owned(),
                })
                .collect();
            (*file, args)
        })
        .collect()
}

fn run_in(dir: &Path, args: &[String]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wharf-inspect"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8(out.stdout).expect("output is UTF-8");
    let code = out.status.code().unwrap_or(-1);
    (code, format!("exit {code}\n{stdout}"))
}

fn check_scenario(name: &str, make: fn(&Path) -> anyhow::Result<()>) {
    let root: PathBuf = golden_dir().join(name);
    let bless = std::env::var_os("WHARF_BLESS").is_some_and(|v| v == "1");
    if bless {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("expected")).unwrap();
        make(&root.join("data")).unwrap();
    }
    assert!(
        root.join("data").is_dir(),
        "{}: golden data missing; run with WHARF_BLESS=1",
        root.display()
    );
    let mut failures = Vec::new();
    for (file, args) in cases() {
        let (_, got) = run_in(&root, &args);
        let path = root.join("expected").join(file);
        if bless {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run with WHARF_BLESS=1", path.display()));
        if got != want {
            failures.push(format!(
                "--- {file} (wharf-inspect {})\nwant:\n{want}\ngot:\n{got}",
                args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn golden_basic_outputs_match_exactly() {
    check_scenario("basic", scenario_basic);
}

#[test]
fn golden_basic_is_clean_and_exit_codes_are_right() {
    let root = golden_dir().join("basic");
    let (code, _) = run_in(&root, &["verify".into(), "data".into()]);
    assert_eq!(code, 0, "the golden log verifies clean");
    let (code, out) = run_in(&root, &["trace".into(), "data".into(), "999999".into()]);
    assert_eq!(code, 1, "an unknown message is exit 1: {out}");
}
