//! The commands: [`Ctl`] (the client, the options, the process's streams), the request that
//! maps HTTP failures to exit codes, and the dispatch of a command name to its file.
//!
//! - `policies.rs`, `lists.rs`, `objects.rs` (queues, vhosts), `users.rs` (and permissions),
//!   `node.rs` (clock, definitions), `status.rs` (`ping`, `await_startup`, `status`,
//!   `report`, `list_parameters`), `closing.rs` (`close_connection`,
//!   `close_all_connections`), `limits.rs` (`set_vm_memory_high_watermark`,
//!   `set_disk_free_limit`).

mod closing;
mod limits;
mod lists;
mod node;
mod objects;
mod policies;
mod status;
mod users;

use serde_json::Value as JsonValue;

use crate::client::decode;
use crate::client::{Answer, Client};
use crate::exit::{EXIT_DATAERR, EXIT_NOPERM, EXIT_NOUSER, EXIT_SOFTWARE, EXIT_UNAVAILABLE};
use crate::opts::{Fail, Opts, Outcome, usage};
use crate::streams::Io;

pub(crate) struct Ctl<'a, 'b> {
    pub(crate) client: Client,
    pub(crate) opts: Opts,
    pub(crate) io: &'a mut Io<'b>,
}

impl Ctl<'_, '_> {
    fn vhost(&self) -> String {
        self.opts.vhost.clone().unwrap_or_else(|| "/".to_owned())
    }

    /// The broker's node name, as `/api/overview` gives it.
    fn node(&self) -> Result<String, Fail> {
        Ok(cell(
            &self.call("GET", "/api/overview", None)?.json()["node"],
        ))
    }

    fn info(&mut self, text: &str) {
        if !self.opts.quiet {
            let _ = writeln!(self.io.out, "{text}");
        }
    }

    /// Sends a request and maps failures to exit codes.
    fn call(&self, method: &str, path: &str, body: Option<&JsonValue>) -> Result<Answer, Fail> {
        self.call_with(method, path, body, &[])
    }

    /// [`Ctl::call`] with extra request headers.
    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&JsonValue>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, Fail> {
        let answer = self
            .client
            .request_with(method, path, body, headers)
            .map_err(|e| {
                Fail(
                    EXIT_UNAVAILABLE,
                    format!("unable to perform an operation on the broker: {e}"),
                )
            })?;
        match answer.status {
            200..=299 => Ok(answer),
            401 | 403 => Err(Fail(
                EXIT_NOPERM,
                format!("the broker refused the credentials: {}", answer.reason()),
            )),
            404 => Err(not_found(path, &answer)),
            400..=499 => Err(Fail(EXIT_DATAERR, answer.reason())),
            _ => Err(Fail(EXIT_SOFTWARE, answer.reason())),
        }
    }

    pub(crate) fn command(&mut self, pos: &[String]) -> Outcome {
        let Some(cmd) = pos.first() else {
            return Err(usage("no command given"));
        };
        // Every command is in the help table; anything else is rabbitmqctl's usage error.
        crate::help::find(cmd)?;
        match cmd.as_str() {
            "set_policy" | "set_operator_policy" => self.set_policy(pos),
            "clear_policy" | "clear_operator_policy" => self.clear_policy(pos),
            "list_policies" | "list_operator_policies" => self.list_policies(pos),
            "list_queues" => self.list_queues(pos),
            "list_exchanges" => self.list_simple(
                pos,
                "exchanges",
                &["name", "type"],
                "Listing exchanges for vhost",
            ),
            "list_bindings" => self.list_bindings(pos),
            "list_connections" => self.list_global(
                pos,
                "/api/connections",
                &["user", "peer_host", "peer_port", "state"],
                "Listing connections ...",
            ),
            "list_channels" => self.list_global(
                pos,
                "/api/channels",
                &["name", "user", "consumer_count", "messages_unacknowledged"],
                "Listing channels ...",
            ),
            "list_consumers" => self.list_consumers(pos),
            "list_vhosts" => self.list_global(pos, "/api/vhosts", &["name"], "Listing vhosts ..."),
            "purge_queue" => self.queue_op(pos, true),
            "delete_queue" => self.queue_op(pos, false),
            "add_vhost" | "delete_vhost" => self.vhost_op(pos),
            "add_user" => self.add_user(pos, false),
            "change_password" => self.add_user(pos, true),
            "delete_user" => self.delete_user(pos),
            "set_user_tags" => self.set_user_tags(pos),
            "list_users" => {
                self.list_global(pos, "/api/users", &["name", "tags"], "Listing users ...")
            }
            "set_permissions" => self.set_permissions(pos),
            "clear_permissions" => self.clear_permissions(pos),
            "list_permissions" => self.list_permissions(pos),
            "set_topic_permissions" => self.set_topic_permissions(pos),
            "clear_topic_permissions" => self.clear_topic_permissions(pos),
            "list_topic_permissions" => self.list_topic_permissions(pos),
            "clock" => self.clock(pos),
            "status" => self.status(pos),
            "export_definitions" => self.export(pos),
            "import_definitions" => self.import(pos),
            "ping" => self.ping(pos),
            "environment" => self.environment(pos),
            "await_startup" => self.await_startup(pos),
            "report" => self.report(pos),
            "list_parameters" => self.list_parameters(pos),
            "close_connection" => self.close_connection(pos),
            "close_all_connections" => self.close_all_connections(pos),
            "set_vm_memory_high_watermark" => self.set_vm_memory_high_watermark(pos),
            "set_disk_free_limit" => self.set_disk_free_limit(pos),
            other => Err(usage(format!("unknown command '{other}'"))),
        }
    }
}

/// One table cell: strings bare, null empty, everything else as JSON.
fn cell(v: &JsonValue) -> String {
    match v {
        JsonValue::Null => String::new(),
        JsonValue::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A 404 as rabbitmqctl reports it: the missing object named, with rabbitmqctl's exit code
/// for its kind (67 for a user, 65 for a vhost, 69 for a queue, a policy or a vhost of a
/// permission).
fn not_found(path: &str, answer: &Answer) -> Fail {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<String> = path
        .trim_start_matches("/api/")
        .split('/')
        .map(decode)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["users", name] => Fail(EXIT_NOUSER, format!("User \"{name}\" does not exist")),
        ["vhosts", name] => Fail(
            EXIT_DATAERR,
            format!("Virtual host '{name}' does not exist"),
        ),
        ["queues", vhost, name, ..] => Fail(
            EXIT_UNAVAILABLE,
            format!("Queue '{name}' in vhost '{vhost}' not found"),
        ),
        ["policies" | "operator-policies", vhost, name] => Fail(
            EXIT_UNAVAILABLE,
            format!("Policy '{name}' in vhost '{vhost}' does not exist"),
        ),
        ["connections", name] => Fail(EXIT_UNAVAILABLE, format!("Connection '{name}' not found")),
        ["permissions", vhost, user] => Fail(
            EXIT_UNAVAILABLE,
            format!("No permissions for user '{user}' in vhost '{vhost}'"),
        ),
        _ => Fail(EXIT_DATAERR, answer.reason()),
    }
}
