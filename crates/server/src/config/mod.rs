//! The broker's configuration file (TOML) and its merge with the command-line flags: parse
//! ([`FileConfig::parse`]), merge ([`merge`]: a flag beats the file, the file beats the
//! default), check ([`Config::validate`]), and turn into a [`ServerConfig`](crate::ServerConfig).
//!
//! Depends only on `crate`'s plain config types (no sockets, no tokio), so every rule
//! here is unit-tested without a process.
//!
//! - `file.rs`: the file's schema ([`FileConfig`]).
//! - [`defaults`]: every setting's default.
//! - `values.rs`: sizes with units, the memory limit, the fsync policy.
//! - `merge.rs`: flags ([`Overrides`]) over the file over the defaults.
//! - `resolved.rs`: the merged [`Config`] and its conversion to the server's configuration.
//! - `validate.rs`: [`Config::validate`].
//! - `error.rs`: [`ConfigError`].

pub mod defaults;
mod error;
mod file;
mod merge;
mod resolved;
mod validate;
mod values;

pub use error::ConfigError;
pub use file::{FileConfig, FileTls, FileUser, FileVhost, SizeSetting};
pub use merge::{Overrides, merge};
pub use resolved::{Config, TlsConfig};
pub use values::{FsyncPolicy, parse_bytes};

#[cfg(test)]
mod tests;
