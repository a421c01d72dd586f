//! Routing decisions for each exchange type, as pure functions and indexes over bindings.
//! `direct` and `fanout` need nothing beyond a map; `topic` and `headers` live here.

pub mod headers;
pub mod topic;
