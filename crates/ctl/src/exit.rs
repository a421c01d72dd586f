//! Exit codes (`rabbitmqctl`'s, from sysexits) and the default API root.

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command line is wrong.
pub const EXIT_USAGE: i32 = 64;
/// Exit code: the broker refused the data (invalid policy, unknown object).
pub const EXIT_DATAERR: i32 = 65;
/// Exit code: a user named on the command line does not exist (sysexits `EX_NOUSER`, as
/// rabbitmqctl answers for one).
pub const EXIT_NOUSER: i32 = 67;
/// Exit code: the broker could not be reached.
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Exit code: the broker (or this tool) failed.
pub const EXIT_SOFTWARE: i32 = 70;
/// Exit code: the credentials were refused (sysexits `EX_NOPERM`).
pub const EXIT_NOPERM: i32 = 77;

/// The default API root (RabbitMQ's management port on loopback).
pub const DEFAULT_URL: &str = "http://127.0.0.1:15672";
