//! Tidy: the shape of the workspace, checked in a test rather than in review (in the spirit of
//! TigerBeetle's `tidy.zig`; docs/STYLE.md section 2.2).
//!
//! - Cargo enforces the arrows between crates (a crate cannot name one it does not depend on);
//!   [`layers_point_downward`] checks that the manifests declare only the arrows of
//!   docs/DESIGN.md, and that nothing below the server can reach tokio, HTTP or TLS, nor the
//!   broker a clock.
//! - [`no_import_circle_between_modules`]: inside every crate, the modules' imports form no
//!   circle (`modules.rs` says what counts as an import).
//! - [`only_wharf_clock_reads_the_system_clock`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is a failed test"
)]

mod modules;
mod references;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use modules::{Crate, ModPath, circles, rust_files};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every package of the workspace: (its directory, its name).
fn packages() -> Vec<(PathBuf, String)> {
    let mut dirs = vec![root()];
    for parent in ["crates", "tools"] {
        let mut children: Vec<PathBuf> = fs::read_dir(root().join(parent))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("Cargo.toml").exists())
            .collect();
        children.sort();
        dirs.extend(children);
    }
    dirs.into_iter()
        .map(|dir| {
            let name = manifest(&dir).0;
            (dir, name)
        })
        .collect()
}

/// A manifest's package name and the names in its `[dependencies]` table.
fn manifest(dir: &Path) -> (String, BTreeSet<String>) {
    let text = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let table: toml::Table = text.parse().unwrap();
    let name = table["package"]["name"].as_str().unwrap().to_owned();
    let deps = table
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default();
    (name, deps)
}

/// The arrows of docs/DESIGN.md: which wharf crates each package may depend on.
const ARROWS: &[(&str, &[&str])] = &[
    ("wharf-base", &[]),
    ("wharf-clock", &[]),
    ("wharf-wal", &["wharf-base", "wharf-clock"]),
    ("wharf-protocol", &["wharf-base"]),
    ("wharf-broker", &["wharf-base"]),
    ("wharf-store", &["wharf-base", "wharf-broker", "wharf-wal"]),
    (
        "wharf-server",
        &[
            "wharf-base",
            "wharf-clock",
            "wharf-wal",
            "wharf-protocol",
            "wharf-broker",
            "wharf-store",
            "wharf-cluster",
        ],
    ),
    ("wharf-ctl", &[]),
    (
        "wharf",
        &[
            "wharf-base",
            "wharf-clock",
            "wharf-server",
            "wharf-ctl",
            "wharf-cluster",
        ],
    ),
    (
        "wharf-inspect",
        &[
            "wharf-base",
            "wharf-clock",
            "wharf-wal",
            "wharf-broker",
            "wharf-store",
            "wharf-cluster",
        ],
    ),
    ("wharf-perf", &[]),
    (
        "wharf-sim",
        &[
            "wharf-clock",
            "wharf-protocol",
            "wharf-broker",
            "wharf-store",
            "wharf-wal",
            "wharf-server",
        ],
    ),
    (
        "wharf-cluster",
        &["wharf-base", "wharf-broker", "wharf-store", "wharf-wal"],
    ),
];

/// Crates that must stay out of a package's whole dependency tree, with the reason.
const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "wharf-broker",
        &["wharf-clock", "tokio", "memmap2", "rustix"],
        "the broker is pure: no runtime, no files, no clock (time is an argument)",
    ),
    (
        "wharf-store",
        &[
            "tokio",
            "axum",
            "rustls",
            "tokio-rustls",
            "ureq",
            "amq-protocol",
        ],
        "below the server: no runtime, no HTTP, no TLS, no AMQP",
    ),
    (
        "wharf-protocol",
        &["tokio", "axum", "rustls", "wharf-clock"],
        "bytes <-> frames, no state, no runtime",
    ),
    (
        "wharf-inspect",
        &["axum", "rustls", "tokio-rustls", "ureq", "wharf-server"],
        "the inspector links only what it reads with (tokio comes with openraft through the cluster crate's decoders; the inspector never starts a runtime)",
    ),
    (
        "wharf-cluster",
        &[
            "wharf-server",
            "axum",
            "rustls",
            "tokio-rustls",
            "ureq",
            "amq-protocol",
        ],
        "replication sits beside the server, not on it: no AMQP, HTTP or TLS (tokio comes with openraft)",
    ),
];

#[test]
fn layers_point_downward() {
    let packages: BTreeMap<String, BTreeSet<String>> = packages()
        .into_iter()
        .map(|(dir, name)| (name, manifest(&dir).1))
        .collect();
    let arrows: BTreeMap<&str, &[&str]> = ARROWS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (name, deps) in &packages {
        let allowed = arrows
            .get(name.as_str())
            .unwrap_or_else(|| panic!("{name}: add it to ARROWS"));
        for dep in deps.iter().filter(|d| d.starts_with("wharf")) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} depends on {dep}"));
            }
        }
    }
    for (name, forbidden, why) in FORBIDDEN {
        let tree = closure(name, &packages);
        for f in *forbidden {
            if tree.contains(*f) {
                wrong.push(format!("{name} reaches {f}: {why}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A package's dependencies, and theirs for the wharf crates among them (an outside crate's
/// own dependencies are not followed: none of ours pulls in a runtime).
fn closure(name: &str, packages: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(next) = todo.pop() {
        for dep in packages.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

fn show(path: &ModPath) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// The circles of one crate, each with the imports that close it.
fn circles_in(src: &Path) -> Vec<String> {
    let krate = Crate::read(src);
    let edges = krate.edges();
    circles(&edges)
        .into_iter()
        .map(|members| {
            let set: BTreeSet<&ModPath> = members.iter().collect();
            let evidence: Vec<String> = edges
                .iter()
                .filter(|((from, to), _)| set.contains(from) && set.contains(to))
                .map(|((from, to), line)| {
                    let file = &krate.modules[from].file;
                    let file = file.strip_prefix(root()).unwrap_or(file);
                    format!(
                        "    {} -> {} ({}:{line})",
                        show(from),
                        show(to),
                        file.display()
                    )
                })
                .collect();
            format!("{}:\n{}", src.display(), evidence.join("\n"))
        })
        .collect()
}

#[test]
fn no_import_circle_between_modules() {
    let mut found = Vec::new();
    for (dir, _) in packages() {
        found.extend(circles_in(&dir.join("src")));
    }
    assert!(
        found.is_empty(),
        "import circles (move what both sides need into a module of its own):\n{}",
        found.join("\n")
    );
}

/// The checker itself: a circle through a re-export and `super::` is found, and a parent that
/// only declares and re-exports its children is not one.
#[test]
fn the_circle_check_finds_a_circle_and_only_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir(src.join("model")).unwrap();
    fs::write(
        src.join("lib.rs"),
        "//! x\nmod model;\nmod ids;\npub use model::Broker;\npub use ids::*;\n",
    )
    .unwrap();
    fs::write(src.join("ids.rs"), "pub struct QueueId(u32);\n").unwrap();
    fs::write(
        src.join("model/mod.rs"),
        "mod access;\nuse crate::QueueId;\npub struct Broker { q: QueueId }\n\
         // use self::access::Users; in a comment is not an import\n",
    )
    .unwrap();
    fs::write(
        src.join("model/access.rs"),
        "use super::Broker;\nimpl Broker { fn f(&self) {} }\n\
         #[cfg(test)]\nmod tests { use crate::model::Broker; }\n",
    )
    .unwrap();
    assert_eq!(circles_in(src), Vec::<String>::new());

    // The parent now uses its child's type in its own code: a circle.
    fs::write(
        src.join("model/access.rs"),
        "use super::Broker;\npub struct Users;\nimpl Broker { fn f(&self) {} }\n",
    )
    .unwrap();
    fs::write(
        src.join("model/mod.rs"),
        "mod access;\nuse crate::QueueId;\npub struct Broker { q: QueueId, u: access::Users }\n",
    )
    .unwrap();
    let found = circles_in(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("model -> model::access"), "{found:?}");
    assert!(found[0].contains("model::access -> model"), "{found:?}");
}

#[test]
fn only_wharf_clock_reads_the_system_clock() {
    let mut offenders = Vec::new();
    for (dir, name) in packages() {
        if name == "wharf-clock" || name == "wharf-perf" || name == "wharf-sim" {
            // wharf-perf measures the broker from outside, in real time; wharf-sim's server
            // clock reads a runtime's paused time (tokio's Instant), which only the run moves.
            continue;
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            let reads = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains("SystemTime::now") || l.contains("Instant::now"));
            if reads {
                offenders.push(file.display().to_string());
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "read the clock outside wharf-clock: {offenders:?}"
    );
}
