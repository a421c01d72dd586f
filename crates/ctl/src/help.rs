//! `wharfctl help`, `wharfctl help COMMAND`, `--help` anywhere: rabbitmqctl's help habits over
//! one table of the commands (name, arguments, what it does), so the list and each command's
//! usage cannot drift apart.

use std::io::Write;

use crate::opts::{Fail, usage};

/// One command: its name, its arguments and options, and what it does.
pub(crate) type CommandHelp = (&'static str, &'static str, &'static str);

/// Every command, in the order `wharfctl help` lists them.
pub(crate) const COMMANDS: &[CommandHelp] = &[
    (
        "help",
        "[COMMAND]",
        "Displays usage information for a command",
    ),
    (
        "ping",
        "",
        "Checks that the broker answers on its management API",
    ),
    (
        "await_startup",
        "[--timeout SECONDS]",
        "Waits for the broker to answer (default 300 s)",
    ),
    (
        "status",
        "",
        "Displays the broker's status: memory, disk, alarms, listeners, totals",
    ),
    (
        "report",
        "",
        "Displays the status and every listing, for support requests",
    ),
    (
        "environment",
        "",
        "Displays the settings the broker runs with",
    ),
    (
        "list_queues",
        "[-p VHOST] [COLUMN ...]",
        "Lists queues and their properties",
    ),
    (
        "list_exchanges",
        "[-p VHOST] [COLUMN ...]",
        "Lists exchanges",
    ),
    ("list_bindings", "[-p VHOST] [COLUMN ...]", "Lists bindings"),
    ("list_connections", "[COLUMN ...]", "Lists AMQP connections"),
    ("list_channels", "[COLUMN ...]", "Lists channels"),
    (
        "list_consumers",
        "[-p VHOST] [COLUMN ...]",
        "Lists consumers",
    ),
    ("list_vhosts", "[COLUMN ...]", "Lists virtual hosts"),
    ("list_users", "[COLUMN ...]", "Lists users"),
    (
        "list_permissions",
        "[-p VHOST] [COLUMN ...]",
        "Lists permissions in a virtual host",
    ),
    (
        "list_parameters",
        "[-p VHOST]",
        "Lists runtime parameters in a virtual host",
    ),
    (
        "list_policies",
        "[-p VHOST]",
        "Lists policies in a virtual host",
    ),
    (
        "list_operator_policies",
        "[-p VHOST]",
        "Lists operator policies in a virtual host",
    ),
    (
        "set_policy",
        "[-p VHOST] NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]",
        "Sets or updates a policy",
    ),
    ("clear_policy", "[-p VHOST] NAME", "Clears a policy"),
    (
        "set_operator_policy",
        "[-p VHOST] NAME PATTERN DEFINITION [--priority N] [--apply-to queues]",
        "Sets or updates an operator policy",
    ),
    (
        "clear_operator_policy",
        "[-p VHOST] NAME",
        "Clears an operator policy",
    ),
    (
        "purge_queue",
        "[-p VHOST] NAME",
        "Purges a queue (removes all ready messages)",
    ),
    (
        "delete_queue",
        "[-p VHOST] NAME [--if-empty] [--if-unused]",
        "Deletes a queue",
    ),
    ("add_vhost", "NAME", "Creates a virtual host"),
    (
        "delete_vhost",
        "NAME",
        "Deletes a virtual host and everything in it",
    ),
    ("add_user", "NAME PASSWORD", "Creates a user"),
    (
        "change_password",
        "NAME PASSWORD",
        "Changes a user's password",
    ),
    ("delete_user", "NAME", "Removes a user"),
    ("set_user_tags", "NAME [TAG ...]", "Sets a user's tags"),
    (
        "set_permissions",
        "[-p VHOST] USER CONF WRITE READ",
        "Sets a user's permissions",
    ),
    (
        "clear_permissions",
        "[-p VHOST] USER",
        "Revokes a user's permissions in a vhost",
    ),
    (
        "set_topic_permissions",
        "[-p VHOST] USER EXCHANGE WRITE READ",
        "Sets a user's topic permissions on a topic exchange",
    ),
    (
        "clear_topic_permissions",
        "[-p VHOST] USER [EXCHANGE]",
        "Clears a user's topic permissions",
    ),
    (
        "list_topic_permissions",
        "[-p VHOST]",
        "Lists topic permissions in a virtual host",
    ),
    (
        "close_connection",
        "NAME REASON",
        "Closes a connection (named as list_connections name shows it), telling the client REASON",
    ),
    (
        "close_all_connections",
        "[-p VHOST | --global] [--limit N] [--per-connection-delay MS] REASON",
        "Closes the connections of a vhost, or of every vhost with --global",
    ),
    (
        "set_vm_memory_high_watermark",
        "FRACTION | absolute BYTES",
        "Sets the memory alarm's threshold (a fraction of memory, or bytes with units, e.g. 1GB) until restart",
    ),
    (
        "set_disk_free_limit",
        "BYTES | mem_relative FRACTION",
        "Sets the free disk space alarm's limit (bytes with units, e.g. 50MB, or a multiple of memory) until restart",
    ),
    (
        "export_definitions",
        "FILE|-",
        "Exports definitions in JSON",
    ),
    (
        "import_definitions",
        "FILE|-",
        "Imports definitions in JSON",
    ),
    (
        "clock",
        "show | advance DURATION | set MS",
        "Shows or moves the broker's clock (a broker started with --test-clock only)",
    ),
];

/// The global options, as every usage line shows them.
const GLOBAL: &str = "wharfctl [--url URL] [--cacert PEM] [--username U] [--password P] [--quiet]";

/// Prints the list of commands (`wharfctl help`).
pub(crate) fn list(out: &mut dyn Write) {
    let _ = writeln!(out, "Usage\n\n{GLOBAL} <command> [<command options>]\n");
    let _ = writeln!(out, "Available commands:\n");
    let width = COMMANDS.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    for (name, _, about) in COMMANDS {
        let _ = writeln!(out, "   {name:<width$}   {about}");
    }
    let _ = writeln!(
        out,
        "\nUse 'wharfctl help <command>' to learn more about a specific command"
    );
}

/// Prints one command's usage (`wharfctl help NAME`, `wharfctl NAME --help`).
///
/// # Errors
/// No such command: a usage error naming it, as rabbitmqctl's.
pub(crate) fn command(out: &mut dyn Write, name: &str) -> Result<(), Fail> {
    let (name, args, about) = find(name)?;
    let _ = writeln!(out, "Usage\n\n{GLOBAL} {name} {args}\n\n{about}.");
    Ok(())
}

/// The command named `name`.
///
/// # Errors
/// No such command.
pub(crate) fn find(name: &str) -> Result<CommandHelp, Fail> {
    COMMANDS
        .iter()
        .find(|(n, _, _)| *n == name)
        .copied()
        .ok_or_else(|| usage(format!("Command '{name}' not found.")))
}
