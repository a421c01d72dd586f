//! The broker core's integration tests (`wharf_broker`, no network): AMQP semantics as commands,
//! the model-based and fuzzed state machines, replay of the event log.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test broker <name>::`). Depends only on wharf's
//! public API, the test clients and the shared helpers under tests/.

// Each former test file allowed these at its crate root, which covered `broker_common` too.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]
#[path = "../broker_common/mod.rs"]
mod broker_common;

mod broker_amqp;
mod broker_fuzz;
mod broker_model;
mod broker_priority_model;
mod broker_replay;
mod broker_semantics;
