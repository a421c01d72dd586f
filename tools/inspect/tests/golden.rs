//! Golden data directories: each is written by a scripted workload through the library
//! (Broker + Store in-process, fixed times), checked in under `tests/golden/<name>/data`, and
//! every command's output on it is compared exactly with `tests/golden/<name>/expected/`.
//!
//! Regenerate (after a deliberate change of output or workload) with
//! `WHARF_BLESS=1 cargo test -p wharf-inspect --test golden`, then review the diff.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{T0_MS, golden_dir, scenario_basic};

/// Each command, its arguments (after the command name; `data` is the directory) and the
/// file its expected output lives in.
fn cases() -> Vec<(&'static str, Vec<String>)> {
    let at = |ms: u64| (T0_MS + ms).to_string();
    vec![
        (
            "summary.txt",
            vec!["summary".into(), "data".into(), "--now".into(), at(120_000)],
        ),
        (
            "summary.json",
            vec![
                "--json".into(),
                "summary".into(),
                "data".into(),
                "--now".into(),
                at(120_000),
            ],
        ),
        ("verify.txt", vec!["verify".into(), "data".into()]),
        (
            "verify.json",
            vec![
                "--json".into(),
                "verify".into(),
                "data".into(),
                "--all".into(),
            ],
        ),
        ("dump.txt", vec!["dump".into(), "data".into()]),
        (
            "dump.json",
            vec![
                "--json".into(),
                "dump".into(),
                "data".into(),
                "--body".into(),
                "base64".into(),
            ],
        ),
        (
            "dump-filtered.txt",
            vec![
                "dump".into(),
                "data".into(),
                "--kind".into(),
                "published".into(),
                "--queue".into(),
                "audit".into(),
                "--since".into(),
                at(3),
                "--until".into(),
                at(5),
            ],
        ),
        (
            "dump-dead-lettered.txt",
            vec![
                "dump".into(),
                "data".into(),
                "--kind".into(),
                "dead_lettered".into(),
                "--body".into(),
                "none".into(),
            ],
        ),
        (
            "trace.txt",
            vec![
                "trace".into(),
                "data".into(),
                "--by".into(),
                "message_id=order-1".into(),
            ],
        ),
        (
            "trace.json",
            vec![
                "--json".into(),
                "trace".into(),
                "data".into(),
                "--by".into(),
                "message_id=order-1".into(),
            ],
        ),
        (
            "trace-header.txt",
            vec![
                "trace".into(),
                "data".into(),
                "--by".into(),
                "header:tenant=globex".into(),
                "--body".into(),
                "none".into(),
            ],
        ),
        (
            "trace-expired.txt",
            vec![
                "trace".into(),
                "data".into(),
                "--by".into(),
                "correlation_id=c-5".into(),
            ],
        ),
        (
            "queues.txt",
            vec!["queues".into(), "data".into(), "--now".into(), at(30_000)],
        ),
        (
            "queues.json",
            vec![
                "--json".into(),
                "queues".into(),
                "data".into(),
                "--now".into(),
                at(30_000),
            ],
        ),
        (
            "export.json",
            vec![
                "export".into(),
                "data".into(),
                "--queue".into(),
                "dlq".into(),
                "--now".into(),
                at(30_000),
            ],
        ),
    ]
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
