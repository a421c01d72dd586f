//! The AMQP 0-9-1 codec's integration tests (`wharf_protocol`, no server): frames, content headers
//! and properties, with golden bytes.
//!
//! One test binary for the group, so that `cargo test` links it once (each binary links the whole
//! crate and its dependencies); every former `tests/<name>.rs` is the module `<name>`, so test
//! names keep their file as a prefix (`cargo test --test protocol <name>::`). Depends only on
//! wharf's public API, the test clients and the shared helpers under tests/.

mod protocol_content;
mod protocol_corpus;
mod protocol_frames;
mod protocol_props;
mod protocol_spool;
