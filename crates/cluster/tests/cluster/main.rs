//! wharf-cluster's tests: three members of a Raft group on an in-memory network, each with its
//! log in a WAL on a simulated disk (S-CLU).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failed unwrap is a failed test"
)]

mod commands;
mod compaction;
mod definitions;
mod durability;
mod expiry;
mod forward;
mod members;
mod paging;
mod records;
mod relay_link;
mod replication;
mod split;
mod status;
mod support;
mod tcp;
mod void;
mod void_prop;
mod wire;
