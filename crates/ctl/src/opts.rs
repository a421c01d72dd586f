//! The command line: options anywhere among the positional arguments ([`parse`]), the
//! usage text, and the argument-count check every command makes.

use crate::exit::EXIT_USAGE;

/// Options parsed from anywhere on the command line.
#[derive(Debug, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per rabbitmqctl flag, each independent"
)]
pub(crate) struct Opts {
    pub(crate) url: Option<String>,
    pub(crate) cacert: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) vhost: Option<String>,
    pub(crate) priority: Option<String>,
    pub(crate) apply_to: Option<String>,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    pub(crate) silent: bool,
    pub(crate) no_headers: bool,
    pub(crate) if_empty: bool,
    pub(crate) if_unused: bool,
    /// `--help` / `-h`: the command's usage instead of running it.
    pub(crate) help: bool,
    /// `--timeout` / `-t`, seconds (`await_startup`'s wait; ignored elsewhere, as over HTTP
    /// every request has its own bound).
    pub(crate) timeout: Option<String>,
    /// `--global`: `close_all_connections` in every vhost.
    pub(crate) global: bool,
    /// `--limit N`: `close_all_connections` closes at most N.
    pub(crate) limit: Option<String>,
    /// `--per-connection-delay MS`: `close_all_connections` waits between two closes.
    pub(crate) per_connection_delay: Option<String>,
}

/// A failure with its exit code and message.
pub(crate) struct Fail(pub(crate) i32, pub(crate) String);

pub(crate) type Outcome = Result<(), Fail>;

pub(crate) fn usage(text: impl Into<String>) -> Fail {
    Fail(EXIT_USAGE, text.into())
}

const VALUE_OPTS: &[&str] = &[
    "--url",
    "--cacert",
    "--username",
    "-u",
    "--password",
    "--vhost",
    "-p",
    "--priority",
    "--apply-to",
    "--formatter",
    "--timeout",
    "-t",
    "--limit",
    "--per-connection-delay",
];

pub(crate) fn parse(args: &[String]) -> Result<(Opts, Vec<String>), Fail> {
    let mut o = Opts::default();
    let mut pos = Vec::new();
    let mut it = args.iter();
    let mut options_done = false;
    while let Some(arg) = it.next() {
        if options_done || !arg.starts_with('-') || arg == "-" {
            pos.push(arg.clone());
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let value = if VALUE_OPTS.contains(&name) {
            match inline {
                Some(v) => Some(v),
                None => Some(
                    it.next()
                        .ok_or_else(|| usage(format!("option {name} needs a value")))?
                        .clone(),
                ),
            }
        } else {
            None
        };
        match (name, value) {
            ("--url", v) => o.url = v,
            ("--cacert", v) => o.cacert = v,
            ("--username" | "-u", v) => o.username = v,
            ("--password", v) => o.password = v,
            ("--vhost" | "-p", v) => o.vhost = v,
            ("--priority", v) => o.priority = v,
            ("--apply-to", v) => o.apply_to = v,
            ("--formatter", Some(f)) => match f.as_str() {
                "json" => o.json = true,
                "table" | "tsv" => o.json = false,
                other => return Err(usage(format!("unknown formatter '{other}'"))),
            },
            ("--quiet" | "-q", None) => o.quiet = true,
            ("--silent" | "-s", None) => {
                o.silent = true;
                o.quiet = true;
            }
            ("--no-table-headers", None) => o.no_headers = true,
            ("--if-empty", None) => o.if_empty = true,
            ("--if-unused", None) => o.if_unused = true,
            ("--help" | "-h", None) => o.help = true,
            ("--timeout" | "-t", v) => o.timeout = v,
            ("--global", None) => o.global = true,
            ("--limit", v) => o.limit = v,
            ("--per-connection-delay", v) => o.per_connection_delay = v,
            // Accepted for rabbitmqctl compatibility; meaningless over HTTP.
            ("--online" | "--local" | "--offline", _) => {}
            (other, _) => return Err(usage(format!("unknown option {other}"))),
        }
    }
    Ok((o, pos))
}

/// The command summary printed on usage errors.
pub const USAGE: &str = "Usage: wharfctl [--url URL] [--cacert PEM] [--username U] [--password P] \
[-p VHOST] [--formatter json] [-q] COMMAND [ARGS]
Commands:
  set_policy NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]
  clear_policy NAME | list_policies
  set_operator_policy NAME PATTERN DEFINITION [--priority N] [--apply-to queues]
  clear_operator_policy NAME | list_operator_policies
  list_queues [COLUMN ...] | list_exchanges [COLUMN ...] | list_bindings [COLUMN ...]
  list_connections [COLUMN ...] | list_channels [COLUMN ...] | list_consumers [COLUMN ...]
  purge_queue NAME | delete_queue NAME [--if-empty] [--if-unused]
  add_vhost NAME | delete_vhost NAME | list_vhosts | status
  add_user NAME PASSWORD | change_password NAME PASSWORD | delete_user NAME
  set_user_tags NAME [TAG ...] | list_users
  set_permissions [-p VHOST] USER CONF WRITE READ | clear_permissions [-p VHOST] USER
  list_permissions [-p VHOST]
  set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ
  clear_topic_permissions [-p VHOST] USER [EXCHANGE] | list_topic_permissions [-p VHOST]
  clock show | clock advance DURATION (30m, 1h, 250ms) | clock set MS   (--test-clock only)
  export_definitions FILE|- | import_definitions FILE|-
  ping | await_startup [--timeout S] | report | environment | list_parameters [-p VHOST]
  close_connection NAME REASON
  close_all_connections [-p VHOST | --global] [--limit N] [--per-connection-delay MS] REASON
  set_vm_memory_high_watermark FRACTION | absolute BYTES
  set_disk_free_limit BYTES | mem_relative FRACTION
  help [COMMAND] (or COMMAND --help): the usage of a command";

pub(crate) fn check_args(pos: &[String], min: usize, max: usize, shape: &str) -> Outcome {
    let n = pos.len().saturating_sub(1);
    if n < min {
        return Err(usage(format!("not enough arguments. Usage: {shape}")));
    }
    if n > max {
        return Err(usage(format!("too many arguments. Usage: {shape}")));
    }
    Ok(())
}

pub(crate) fn arg(pos: &[String], i: usize) -> &str {
    pos.get(i).map_or("", String::as_str)
}
