//! Operating wharf: the management HTTP API, the `wharfctl` binary, users, permissions and TLS
//! access.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test ops <name>::`). Depends only on wharf's
//! public API, the test clients and the shared helpers under tests/.

#[path = "../support/mod.rs"]
mod support;

mod access_tls;
mod access_users;
mod mgmt_api;
mod mgmt_tls;
mod prometheus;
mod rabbitmqadmin;
mod ui_admin_browser;
mod ui_browser;
mod ui_cluster_browser;
mod ui_life;
mod ui_perf;
mod wharfctl;
mod wharfctl_admin;
mod wharfctl_habits;
