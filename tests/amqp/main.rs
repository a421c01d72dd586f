//! The server as AMQP clients see it: an in-process wharf on 127.0.0.1:0 (tests/support) driven by
//! lapin, amqprs and raw frames; basics, errors, flow, alarms, TTL, configuration (one test spawns
//! the real binary).
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test amqp <name>::`). Depends only on wharf's
//! public API, the test clients and the shared helpers under tests/.

#[path = "../support/mod.rs"]
mod support;

mod server_alarms;
mod server_amqprs;
mod server_basic;
mod server_cluster;
mod server_cluster_ops;
mod server_config;
mod server_consumers;
mod server_door;
mod server_errors;
mod server_flow;
mod server_forward;
mod server_paging;
mod server_priority;
mod server_publisher_flow;
mod server_raw;
mod server_reply_to;
mod server_restart;
mod server_ttl;
mod server_wire;
