//! The write-ahead log: append-only segment files of opaque, checksummed records, group commit,
//! and the recovery scan. Knows nothing of AMQP or queues; depends only on std, `crc32fast`,
//! `memmap2`, `thiserror` and `limits`.
