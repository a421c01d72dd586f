//! The inspector's integration tests, one test binary so that `cargo test` links it once:
//! golden data directories and their expected output, damaged logs, checkpoints, and agreement
//! with the broker's recovery. Every former `tests/<name>.rs` is the module `<name>`
//! (`cargo test -p wharf-inspect --test inspect golden::`). Depends only on the inspector's
//! and wharf's public API and tests/common.

// Each former test file allowed these at its crate root, which covered `common` too.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]
#[path = "../common/mod.rs"]
mod common;

mod checkpoint;
mod corrupt;
mod golden;
mod priority;
mod queues_agree;
mod raft;
mod timeline;
mod timeline_index;
mod usage;
