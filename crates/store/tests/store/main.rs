//! The store's integration tests (`wharf_store` over the WAL): event codec and its golden bytes,
//! checkpoints, crash and recovery, replay against a model.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test store <name>::`). Depends only on wharf's
//! public API, the test clients and the shared helpers under tests/.

#[path = "../store_common/mod.rs"]
mod store_common;

// The broker's test driver (`H`), for tests that drive the broker with the store's rules.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]
#[path = "../../../broker/tests/broker_common/mod.rs"]
mod broker_common;

#[path = "../../../../fuzz/fuzz_targets/data_dir.rs"]
mod data_dir;
mod store_checkpoint;
mod store_checkpoint_install;
mod store_codec;
mod store_crash;
mod store_dead_letter_hold;
mod store_decoder_props;
mod store_diskfull;
mod store_fuzz_regressions;
mod store_golden;
mod store_priority;
mod store_record_size;
mod store_recovery;
mod store_references;
mod store_replay;
mod store_segment_index;
