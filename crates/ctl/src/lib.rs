//! The logic of `wharfctl`: `rabbitmqctl`'s commands, options and output habits over the
//! management HTTP API, so scripts written for `rabbitmqctl` keep working with the name
//! changed. Options may stand before or after the positional arguments. Output is
//! tab-separated with a header line (`--formatter json` for JSON); errors go to stderr as
//! `Error:` and the reason; exit codes are `rabbitmqctl`'s (sysexits): 0 ok, 64 usage, 65 data
//! error (an invalid policy, an unknown object), 69 broker unreachable, 70 software error
//! (the broker failed), 77 credentials refused.
//!
//! Depends only on the HTTP client ([`client`]) and JSON: nothing of the broker, the server
//! or tokio, so it stays a thin client.
//!
//! - `client.rs`: the HTTP client of the management API ([`Client`], [`Answer`]).
//! - `run.rs`: [`run`], the entry point.
//! - `streams.rs`: the process's streams ([`Io`]).
//! - `opts.rs`: options and positional arguments, [`USAGE`].
//! - `help.rs`: the table of commands behind `help`, `help COMMAND` and `--help`.
//! - `cmd/`: the commands, one file per group.
//! - `exit.rs`: exit codes and [`DEFAULT_URL`].

mod client;
mod cmd;
mod exit;
mod help;
mod opts;
mod run;
mod streams;

pub use client::{Answer, Client, Unreachable, segment};
pub use exit::{
    DEFAULT_URL, EXIT_DATAERR, EXIT_NOPERM, EXIT_NOUSER, EXIT_OK, EXIT_SOFTWARE, EXIT_UNAVAILABLE,
    EXIT_USAGE,
};
pub use opts::USAGE;
pub use run::run;
pub use streams::Io;
