//! AMQP 0-9-1 bytes <-> typed frames, with frame and message size limits enforced before
//! anything is buffered or parsed. No tokio, no broker: depends on `amq-protocol`, `bytes`,
//! `thiserror` and `limits`.
