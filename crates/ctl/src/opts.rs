//! The command line: options anywhere among the positional arguments ([`parse`], on clap),
//! the usage text, and the argument-count check every command makes.

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

/// The command line as clap reads it: every option of every command, anywhere among the
/// positional arguments (rabbitmqctl's habit), the last of a repeated option winning. clap's
/// own help and version are off: `help` and `--help` are rabbitmqctl's (`crate::help`).
#[derive(Debug, clap::Parser)]
#[command(
    name = "wharfctl",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true,
    args_override_self = true
)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per rabbitmqctl flag, each independent"
)]
struct Cli {
    #[arg(long, allow_hyphen_values = true)]
    url: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    cacert: Option<String>,
    #[arg(long, short = 'u', allow_hyphen_values = true)]
    username: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    password: Option<String>,
    #[arg(long, short = 'p', allow_hyphen_values = true)]
    vhost: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<String>,
    #[arg(long = "apply-to", allow_hyphen_values = true)]
    apply_to: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    formatter: Option<String>,
    #[arg(long, short = 't', allow_hyphen_values = true)]
    timeout: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    limit: Option<String>,
    #[arg(long = "per-connection-delay", allow_hyphen_values = true)]
    per_connection_delay: Option<String>,
    #[arg(long, short = 'q')]
    quiet: bool,
    #[arg(long, short = 's')]
    silent: bool,
    #[arg(long = "no-table-headers")]
    no_headers: bool,
    #[arg(long = "if-empty")]
    if_empty: bool,
    #[arg(long = "if-unused")]
    if_unused: bool,
    #[arg(long, short = 'h')]
    help: bool,
    #[arg(long)]
    global: bool,
    /// Accepted for rabbitmqctl compatibility; meaningless over HTTP.
    #[arg(long)]
    online: bool,
    #[arg(long)]
    local: bool,
    #[arg(long)]
    offline: bool,
    /// The command and its arguments.
    positional: Vec<String>,
}

pub(crate) fn parse(args: &[String]) -> Result<(Opts, Vec<String>), Fail> {
    use clap::Parser as _;
    let cli = Cli::try_parse_from(args).map_err(|e| usage(clap_error(&e)))?;
    let json = match cli.formatter.as_deref() {
        None | Some("table" | "tsv") => false,
        Some("json") => true,
        Some(other) => return Err(usage(format!("unknown formatter '{other}'"))),
    };
    let opts = Opts {
        url: cli.url,
        cacert: cli.cacert,
        username: cli.username,
        password: cli.password,
        vhost: cli.vhost,
        priority: cli.priority,
        apply_to: cli.apply_to,
        json,
        quiet: cli.quiet || cli.silent,
        silent: cli.silent,
        no_headers: cli.no_headers,
        if_empty: cli.if_empty,
        if_unused: cli.if_unused,
        help: cli.help,
        timeout: cli.timeout,
        global: cli.global,
        limit: cli.limit,
        per_connection_delay: cli.per_connection_delay,
    };
    Ok((opts, cli.positional))
}

/// clap's refusal in rabbitmqctl's words: the option named, without clap's own usage.
fn clap_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ErrorKind};
    let arg = e
        .get(ContextKind::InvalidArg)
        .map(ToString::to_string)
        .unwrap_or_default();
    let name = arg.split([' ', '=']).next().unwrap_or_default();
    match e.kind() {
        ErrorKind::UnknownArgument => format!("unknown option {name}"),
        ErrorKind::InvalidValue | ErrorKind::NoEquals => format!("option {name} needs a value"),
        _ => e.kind().to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_go_anywhere_and_the_last_one_wins() {
        let (o, pos) = parse(&args(&[
            "list_queues",
            "-p",
            "a",
            "name",
            "--vhost=b",
            "-q",
            "--formatter",
            "json",
        ]))
        .ok()
        .unwrap();
        assert_eq!(pos, args(&["list_queues", "name"]));
        assert_eq!(o.vhost.as_deref(), Some("b"));
        assert!(o.quiet && o.json);
        let (o, pos) = parse(&args(&["export_definitions", "-", "--password", "-x"]))
            .ok()
            .unwrap();
        assert_eq!(pos, args(&["export_definitions", "-"]));
        assert_eq!(o.password.as_deref(), Some("-x"));
        let (_, pos) = parse(&args(&["set_policy", "--", "-odd", "x"]))
            .ok()
            .unwrap();
        assert_eq!(pos, args(&["set_policy", "-odd", "x"]));
    }

    #[test]
    fn bad_options_are_usage_errors() {
        for (a, text) in [
            (&["ping", "--bogus"][..], "unknown option --bogus"),
            (&["ping", "--url"], "option --url needs a value"),
            (&["ping", "--formatter", "xml"], "unknown formatter 'xml'"),
        ] {
            match parse(&args(a)) {
                Err(Fail(code, t)) => {
                    assert_eq!(code, EXIT_USAGE, "{a:?}");
                    assert_eq!(t, text, "{a:?}");
                }
                Ok(_) => panic!("{a:?} parsed"),
            }
        }
    }
}
