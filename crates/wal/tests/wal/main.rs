//! The write-ahead log's integration tests (`wharf_wal` only): appends and recovery, record
//! decoding, a full disk, the golden bytes of `storage-format.md`, an appender killed with SIGKILL
//! (this binary re-executes itself), and the simulated-storage model.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test wal <name>::`). Depends only on wharf's
//! public API, the test clients and the shared helpers under tests/.

mod hooked;
mod wal_basic;
mod wal_decode;
mod wal_diskfull;
mod wal_durable;
mod wal_golden;
mod wal_inline;
mod wal_kill;
mod wal_selective;
mod wal_sim;
mod wal_spool;
