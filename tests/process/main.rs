//! Crash and restart of the real `wharf` binary (SIGKILL torture, durability across restarts) and
//! the testing fixture (`wharf::testing`, `--test-mode`, the README's guide). The long crash
//! torture runs in one test thread while the other tests here fill the other.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test process <name>::`). Depends only on
//! wharf's public API, the test clients and the shared helpers under tests/.

#[path = "../support/jepsen/mod.rs"]
mod jepsen;
#[path = "../support/mod.rs"]
mod support;

mod big_message;
mod big_message_crash;
mod cluster_definitions;
mod cluster_jepsen;
mod cluster_jepsen_checker;
mod cluster_members;
mod cluster_nodes;
mod cluster_queues;
mod crash_torture;
mod damaged_tail;
mod disk_full;
mod durability_restart;
mod ops_logs;
mod testing_clock;
mod testing_crash;
mod testing_fixture;
mod testing_guide;
