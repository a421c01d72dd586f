//! Enforces the dependency arrows of DESIGN.md / STYLE.md section 2.2, in the spirit of
//! TigerBeetle's `tidy.zig`: each layer's sources are scanned for imports it must not have.

use std::fs;
use std::path::{Path, PathBuf};

/// (layer, paths it must not mention). `limits` is a leaf anyone may use.
const RULES: &[(&str, &[&str])] = &[
    (
        "broker",
        &[
            "crate::protocol",
            "crate::wal",
            "crate::store",
            "crate::server",
            "crate::mgmt",
            "crate::ctl",
            "crate::clock",
            "tokio",
            "std::fs",
            "std::net",
            "std::time::SystemTime",
            "std::time::Instant",
        ],
    ),
    (
        "wal",
        &[
            "crate::protocol",
            "crate::broker",
            "crate::store",
            "crate::server",
            "crate::mgmt",
            "crate::ctl",
            "tokio",
            "amq_protocol",
        ],
    ),
    (
        "protocol",
        &[
            "crate::broker",
            "crate::wal",
            "crate::store",
            "crate::server",
            "crate::mgmt",
            "crate::ctl",
            "tokio",
        ],
    ),
    (
        "store",
        &[
            "crate::protocol",
            "crate::server",
            "crate::mgmt",
            "crate::ctl",
            "tokio",
            "amq_protocol",
        ],
    ),
    // The management API sits beside `server` (it uses its admin path); `server` reaches it
    // only to start it. `ctl` (wharfctl's logic) is a plain HTTP client of that API.
    (
        "ctl",
        &[
            "crate::broker",
            "crate::server",
            "crate::mgmt",
            "crate::store",
            "crate::wal",
            "crate::protocol",
            "tokio",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines that are code, not comments, so a doc comment may name what a layer must avoid.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
}

#[test]
fn layers_only_depend_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            for (number, line) in code_lines(&text) {
                for needle in *forbidden {
                    if line.contains(needle) {
                        violations.push(format!(
                            "{}:{}: {layer} uses {needle}",
                            file.display(),
                            number + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layering violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn only_clock_reads_the_system_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| !f.ends_with("clock.rs"))
        .filter(|f| {
            let text = fs::read_to_string(f).unwrap();
            code_lines(&text)
                .any(|(_, l)| l.contains("SystemTime::now") || l.contains("Instant::now"))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "read the clock outside src/clock.rs: {offenders:?}"
    );
}
