//! The Jepsen-style test's parts (issue #17; the test is `tests/process/cluster_jepsen.rs`):
//! the history every client and the nemesis record into (`history`), the checker that reads
//! it (`checker`) and reads a kept history back (`replay`), the clients (`client`) and the nemesis (`nemesis`). Depends on std, and
//! for the workload on lapin, tokio and the cluster harness (tests/support/cluster.rs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

pub mod checker;
pub mod client;
pub mod history;
pub mod nemesis;
pub mod replay;
