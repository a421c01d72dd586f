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

pub mod client;

use std::io::{Read, Write};

use serde_json::{Value as JsonValue, json};

use client::{Answer, Client, segment};

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command line is wrong.
pub const EXIT_USAGE: i32 = 64;
/// Exit code: the broker refused the data (invalid policy, unknown object).
pub const EXIT_DATAERR: i32 = 65;
/// Exit code: the broker could not be reached.
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Exit code: the broker (or this tool) failed.
pub const EXIT_SOFTWARE: i32 = 70;
/// Exit code: the credentials were refused (sysexits `EX_NOPERM`).
pub const EXIT_NOPERM: i32 = 77;

/// The default API root (RabbitMQ's management port on loopback).
pub const DEFAULT_URL: &str = "http://127.0.0.1:15672";

/// What the process has to talk to.
pub struct Io<'a> {
    /// Standard output.
    pub out: &'a mut dyn Write,
    /// Standard error.
    pub err: &'a mut dyn Write,
    /// Standard input (for `import_definitions -`).
    pub input: &'a mut dyn Read,
}

/// Options parsed from anywhere on the command line.
#[derive(Debug, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per rabbitmqctl flag, each independent"
)]
struct Opts {
    url: Option<String>,
    cacert: Option<String>,
    username: Option<String>,
    password: Option<String>,
    vhost: Option<String>,
    priority: Option<String>,
    apply_to: Option<String>,
    json: bool,
    quiet: bool,
    silent: bool,
    no_headers: bool,
    if_empty: bool,
    if_unused: bool,
}

/// A failure with its exit code and message.
struct Fail(i32, String);

type Outcome = Result<(), Fail>;

fn usage(text: impl Into<String>) -> Fail {
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
];

fn parse(args: &[String]) -> Result<(Opts, Vec<String>), Fail> {
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
            // Accepted for rabbitmqctl compatibility; meaningless over HTTP.
            ("--timeout" | "-t" | "--online" | "--local" | "--offline", _) => {}
            (other, _) => return Err(usage(format!("unknown option {other}"))),
        }
    }
    Ok((o, pos))
}

struct Ctl<'a, 'b> {
    client: Client,
    opts: Opts,
    io: &'a mut Io<'b>,
}

/// Runs `wharfctl` with `args` (without the program name); `env_url` is `WHARF_URL`.
/// Returns the exit code.
pub fn run(args: &[String], env_url: Option<String>, io: &mut Io<'_>) -> i32 {
    let (opts, pos) = match parse(args) {
        Ok(p) => p,
        Err(Fail(code, text)) => {
            let _ = writeln!(io.err, "Error: {text}\n\n{USAGE}");
            return code;
        }
    };
    let url = opts
        .url
        .clone()
        .or(env_url)
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let mut client = Client::new(
        &url,
        opts.username.as_deref().unwrap_or("guest"),
        opts.password.as_deref().unwrap_or("guest"),
    );
    if let Some(path) = &opts.cacert {
        let trusted = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|pem| client.clone().trusting(&pem));
        match trusted {
            Ok(c) => client = c,
            Err(e) => {
                let _ = writeln!(io.err, "Error: --cacert {path}: {e}\n\n{USAGE}");
                return EXIT_USAGE;
            }
        }
    }
    let mut ctl = Ctl { client, opts, io };
    match ctl.command(&pos) {
        Ok(()) => EXIT_OK,
        Err(Fail(code, text)) => {
            let _ = writeln!(ctl.io.err, "Error:\n{text}");
            if code == EXIT_USAGE {
                let _ = writeln!(ctl.io.err, "\n{USAGE}");
            }
            code
        }
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
  clock show | clock advance DURATION (30m, 1h, 250ms) | clock set MS   (--test-clock only)
  export_definitions FILE|- | import_definitions FILE|-";

fn check_args(pos: &[String], min: usize, max: usize, shape: &str) -> Outcome {
    let n = pos.len().saturating_sub(1);
    if n < min {
        return Err(usage(format!("not enough arguments. Usage: {shape}")));
    }
    if n > max {
        return Err(usage(format!("too many arguments. Usage: {shape}")));
    }
    Ok(())
}

fn arg(pos: &[String], i: usize) -> &str {
    pos.get(i).map_or("", String::as_str)
}

impl Ctl<'_, '_> {
    fn vhost(&self) -> String {
        self.opts.vhost.clone().unwrap_or_else(|| "/".to_owned())
    }

    fn info(&mut self, text: &str) {
        if !self.opts.quiet {
            let _ = writeln!(self.io.out, "{text}");
        }
    }

    /// Sends a request and maps failures to exit codes.
    fn call(&self, method: &str, path: &str, body: Option<&JsonValue>) -> Result<Answer, Fail> {
        let answer = self.client.request(method, path, body).map_err(|e| {
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
            400..=499 => Err(Fail(EXIT_DATAERR, answer.reason())),
            _ => Err(Fail(EXIT_SOFTWARE, answer.reason())),
        }
    }

    fn command(&mut self, pos: &[String]) -> Outcome {
        let Some(cmd) = pos.first() else {
            return Err(usage("no command given"));
        };
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
            "clock" => self.clock(pos),
            "status" => self.status(pos),
            "export_definitions" => self.export(pos),
            "import_definitions" => self.import(pos),
            other => Err(usage(format!("unknown command '{other}'"))),
        }
    }

    fn policy_path(&self, operator: bool, name: &str) -> String {
        let kind = if operator {
            "operator-policies"
        } else {
            "policies"
        };
        format!("/api/{kind}/{}/{}", segment(&self.vhost()), segment(name))
    }

    fn set_policy(&mut self, pos: &[String]) -> Outcome {
        let operator = pos[0] == "set_operator_policy";
        check_args(
            pos,
            3,
            3,
            &format!(
                "{} NAME PATTERN DEFINITION [--priority N] [--apply-to A]",
                pos[0]
            ),
        )?;
        let (name, pattern, definition) = (arg(pos, 1), arg(pos, 2), arg(pos, 3));
        let priority = match &self.opts.priority {
            None => 0,
            Some(p) => p.parse::<i64>().map_err(|_| {
                Fail(
                    EXIT_DATAERR,
                    format!("priority must be an integer, got '{p}'"),
                )
            })?,
        };
        // The definition goes as text when it is not JSON, so the broker's own validation
        // names what is wrong with it.
        let definition_json = serde_json::from_str::<JsonValue>(definition)
            .unwrap_or_else(|_| JsonValue::String(definition.to_owned()));
        let mut body = json!({
            "pattern": pattern,
            "definition": definition_json,
            "priority": priority,
        });
        if let (Some(a), Some(map)) = (&self.opts.apply_to, body.as_object_mut()) {
            map.insert("apply-to".into(), json!(a));
        }
        self.info(&format!(
            "Setting {}policy \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with \
             priority \"{priority}\" for vhost \"{}\" ...",
            if operator { "operator " } else { "" },
            self.vhost()
        ));
        self.call("PUT", &self.policy_path(operator, name), Some(&body))?;
        Ok(())
    }

    fn clear_policy(&mut self, pos: &[String]) -> Outcome {
        let operator = pos[0] == "clear_operator_policy";
        check_args(pos, 1, 1, &format!("{} NAME", pos[0]))?;
        let name = arg(pos, 1);
        self.info(&format!(
            "Clearing {}policy \"{name}\" on vhost \"{}\" ...",
            if operator { "operator " } else { "" },
            self.vhost()
        ));
        self.call("DELETE", &self.policy_path(operator, name), None)?;
        Ok(())
    }

    fn list_policies(&mut self, pos: &[String]) -> Outcome {
        let operator = pos[0] == "list_operator_policies";
        check_args(pos, 0, 0, &pos[0])?;
        let kind = if operator {
            "operator-policies"
        } else {
            "policies"
        };
        let path = format!("/api/{kind}/{}", segment(&self.vhost()));
        let items = self.call("GET", &path, None)?.json();
        self.info(&format!(
            "Listing {}policies for vhost \"{}\" ...",
            if operator { "operator " } else { "" },
            self.vhost()
        ));
        let cols = [
            "vhost",
            "name",
            "pattern",
            "apply-to",
            "definition",
            "priority",
        ];
        self.table(&items, &cols.map(str::to_owned))
    }

    fn columns(pos: &[String], default: &[&str]) -> Vec<String> {
        if pos.len() > 1 {
            pos[1..].to_vec()
        } else {
            default.iter().map(|s| (*s).to_owned()).collect()
        }
    }

    fn list_queues(&mut self, pos: &[String]) -> Outcome {
        let path = format!("/api/queues/{}", segment(&self.vhost()));
        let items = self.call("GET", &path, None)?.json();
        let cols = Self::columns(pos, &["name", "messages"]);
        self.info(&format!(
            "Timeout: 60.0 seconds ...\nListing queues for vhost {} ...",
            self.vhost()
        ));
        self.table(&items, &cols)
    }

    fn list_simple(&mut self, pos: &[String], kind: &str, default: &[&str], what: &str) -> Outcome {
        let path = format!("/api/{kind}/{}", segment(&self.vhost()));
        let items = self.call("GET", &path, None)?.json();
        let cols = Self::columns(pos, default);
        self.info(&format!("{what} {} ...", self.vhost()));
        self.table(&items, &cols)
    }

    fn list_bindings(&mut self, pos: &[String]) -> Outcome {
        let path = format!("/api/bindings/{}", segment(&self.vhost()));
        let mut items = self.call("GET", &path, None)?.json();
        // rabbitmqctl's column names for the API's fields.
        if let Some(list) = items.as_array_mut() {
            for b in list {
                if let Some(map) = b.as_object_mut() {
                    let get = |k: &str| map.get(k).cloned().unwrap_or(JsonValue::Null);
                    let (src, dst, dkind) =
                        (get("source"), get("destination"), get("destination_type"));
                    map.insert("source_name".into(), src);
                    map.insert("source_kind".into(), json!("exchange"));
                    map.insert("destination_name".into(), dst);
                    map.insert("destination_kind".into(), dkind);
                }
            }
        }
        let cols = Self::columns(
            pos,
            &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
        );
        self.info(&format!("Listing bindings for vhost {}...", self.vhost()));
        self.table(&items, &cols)
    }

    fn list_consumers(&mut self, pos: &[String]) -> Outcome {
        let path = format!("/api/consumers/{}", segment(&self.vhost()));
        let mut items = self.call("GET", &path, None)?.json();
        if let Some(list) = items.as_array_mut() {
            for c in list {
                if let Some(map) = c.as_object_mut() {
                    let queue = map
                        .get("queue")
                        .and_then(|q| q.get("name"))
                        .cloned()
                        .unwrap_or(JsonValue::Null);
                    let chan = map
                        .get("channel_details")
                        .and_then(|c| c.get("name"))
                        .cloned()
                        .unwrap_or(JsonValue::Null);
                    map.insert("queue_name".into(), queue);
                    map.insert("channel_pid".into(), chan);
                }
            }
        }
        let cols = Self::columns(
            pos,
            &[
                "queue_name",
                "channel_pid",
                "consumer_tag",
                "ack_required",
                "prefetch_count",
                "active",
                "arguments",
            ],
        );
        self.info(&format!("Listing consumers in vhost {} ...", self.vhost()));
        self.table(&items, &cols)
    }

    fn list_global(&mut self, pos: &[String], path: &str, default: &[&str], what: &str) -> Outcome {
        let items = self.call("GET", path, None)?.json();
        let cols = Self::columns(pos, default);
        self.info(what);
        self.table(&items, &cols)
    }

    /// Prints `items` (a JSON array of objects) as rabbitmqctl does: a header line, then one
    /// tab-separated line per item; or a JSON array of the chosen columns.
    fn table(&mut self, items: &JsonValue, cols: &[String]) -> Outcome {
        let empty = Vec::new();
        let list = items.as_array().unwrap_or(&empty);
        if let Some(first) = list.first() {
            let unknown: Vec<&str> = cols
                .iter()
                .filter(|c| first.get(c.as_str()).is_none())
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                return Err(usage(format!(
                    "Info key(s) {} are not supported",
                    unknown.join(",")
                )));
            }
        }
        if self.opts.json {
            let rows: Vec<JsonValue> = list
                .iter()
                .map(|item| {
                    let mut row = serde_json::Map::new();
                    for c in cols {
                        row.insert(c.clone(), item.get(c.as_str()).cloned().unwrap_or_default());
                    }
                    JsonValue::Object(row)
                })
                .collect();
            let _ = writeln!(self.io.out, "{}", JsonValue::Array(rows));
            return Ok(());
        }
        if !self.opts.no_headers && !self.opts.silent {
            let _ = writeln!(self.io.out, "{}", cols.join("\t"));
        }
        for item in list {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| cell(item.get(c.as_str()).unwrap_or(&JsonValue::Null)))
                .collect();
            let _ = writeln!(self.io.out, "{}", cells.join("\t"));
        }
        Ok(())
    }

    fn queue_op(&mut self, pos: &[String], purge: bool) -> Outcome {
        check_args(
            pos,
            1,
            1,
            if purge {
                "purge_queue NAME"
            } else {
                "delete_queue NAME [--if-empty] [--if-unused]"
            },
        )?;
        let name = arg(pos, 1);
        let base = format!("/api/queues/{}/{}", segment(&self.vhost()), segment(name));
        if purge {
            self.info(&format!(
                "Purging queue '{name}' in vhost '{}' ...",
                self.vhost()
            ));
            self.call("DELETE", &format!("{base}/contents"), None)?;
        } else {
            // rabbitmqctl prints how many messages went with the queue.
            let messages = self
                .call("GET", &base, None)?
                .json()
                .get("messages")
                .and_then(JsonValue::as_u64)
                .unwrap_or(0);
            self.info(&format!(
                "Deleting queue '{name}' on vhost '{}' ...",
                self.vhost()
            ));
            let mut query = Vec::new();
            if self.opts.if_empty {
                query.push("if-empty=true");
            }
            if self.opts.if_unused {
                query.push("if-unused=true");
            }
            let path = if query.is_empty() {
                base
            } else {
                format!("{base}?{}", query.join("&"))
            };
            self.call("DELETE", &path, None)?;
            self.info(&format!(
                "Queue was successfully deleted with {messages} messages"
            ));
        }
        Ok(())
    }

    fn vhost_op(&mut self, pos: &[String]) -> Outcome {
        let add = pos[0] == "add_vhost";
        check_args(pos, 1, 1, &format!("{} NAME", pos[0]))?;
        let name = arg(pos, 1);
        let path = format!("/api/vhosts/{}", segment(name));
        if add {
            self.info(&format!("Adding vhost \"{name}\" ..."));
            self.call("PUT", &path, Some(&json!({})))?;
        } else {
            self.info(&format!("Deleting vhost \"{name}\" ..."));
            self.call("DELETE", &path, None)?;
        }
        Ok(())
    }

    /// The user as the API has it (404 maps to "no such user").
    fn user(&self, name: &str) -> Result<JsonValue, Fail> {
        match self.call("GET", "/api/users", None)?.json() {
            JsonValue::Array(users) => users
                .into_iter()
                .find(|u| u.get("name").and_then(JsonValue::as_str) == Some(name))
                .ok_or_else(|| Fail(EXIT_DATAERR, format!("user '{name}' does not exist"))),
            _ => Err(Fail(EXIT_SOFTWARE, "unexpected answer".to_owned())),
        }
    }

    /// `add_user NAME PASSWORD` (tags kept empty) and `change_password NAME PASSWORD` (tags
    /// kept as they are). The password travels to the API, which stores only its hash.
    fn add_user(&mut self, pos: &[String], change: bool) -> Outcome {
        check_args(pos, 2, 2, &format!("{} NAME PASSWORD", pos[0]))?;
        let (name, password) = (arg(pos, 1), arg(pos, 2));
        let tags = if change {
            self.user(name)?.get("tags").cloned().unwrap_or(json!([]))
        } else {
            if self.user(name).is_ok() {
                return Err(Fail(EXIT_DATAERR, format!("user '{name}' already exists")));
            }
            json!([])
        };
        let what = if change {
            "Changing password for"
        } else {
            "Adding"
        };
        self.info(&format!("{what} user \"{name}\" ..."));
        let body = json!({ "password": password, "tags": tags });
        self.call("PUT", &format!("/api/users/{}", segment(name)), Some(&body))?;
        Ok(())
    }

    fn delete_user(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "delete_user NAME")?;
        let name = arg(pos, 1);
        self.info(&format!("Deleting user \"{name}\" ..."));
        self.call("DELETE", &format!("/api/users/{}", segment(name)), None)?;
        Ok(())
    }

    fn set_user_tags(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, usize::MAX, "set_user_tags NAME [TAG ...]")?;
        let name = arg(pos, 1);
        let user = self.user(name)?;
        let hash = user.get("password_hash").cloned().unwrap_or(json!(""));
        let tags: Vec<&str> = pos.iter().skip(2).map(String::as_str).collect();
        self.info(&format!(
            "Setting tags for user \"{name}\" to [{}] ...",
            tags.join(", ")
        ));
        let body = json!({ "password_hash": hash, "tags": tags });
        self.call("PUT", &format!("/api/users/{}", segment(name)), Some(&body))?;
        Ok(())
    }

    fn set_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 4, 4, "set_permissions [-p VHOST] USER CONF WRITE READ")?;
        let (user, vhost) = (arg(pos, 1), self.vhost());
        self.info(&format!(
            "Setting permissions for user \"{user}\" in vhost \"{vhost}\" ..."
        ));
        let body = json!({ "configure": arg(pos, 2), "write": arg(pos, 3), "read": arg(pos, 4) });
        let path = format!("/api/permissions/{}/{}", segment(&vhost), segment(user));
        self.call("PUT", &path, Some(&body))?;
        Ok(())
    }

    fn clear_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "clear_permissions [-p VHOST] USER")?;
        let (user, vhost) = (arg(pos, 1), self.vhost());
        self.info(&format!(
            "Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ..."
        ));
        let path = format!("/api/permissions/{}/{}", segment(&vhost), segment(user));
        self.call("DELETE", &path, None)?;
        Ok(())
    }

    fn list_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 5, "list_permissions [-p VHOST] [COLUMN ...]")?;
        let vhost = self.vhost();
        let all = self.call("GET", "/api/permissions", None)?.json();
        let items: Vec<JsonValue> = all
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|p| p.get("vhost").and_then(JsonValue::as_str) == Some(vhost.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let cols = Self::columns(pos, &["user", "configure", "write", "read"]);
        self.info(&format!("Listing permissions for vhost \"{vhost}\" ..."));
        self.table(&JsonValue::Array(items), &cols)
    }

    /// `clock show`, `clock advance 30m`, `clock set MS`: a broker started with --test-clock.
    fn clock(&mut self, pos: &[String]) -> Outcome {
        let shape = "clock show | clock advance DURATION | clock set MS";
        let answer = match arg(pos, 1) {
            "show" => {
                check_args(pos, 1, 1, shape)?;
                self.call("GET", "/api/test/clock", None)?
            }
            "advance" => {
                check_args(pos, 2, 2, shape)?;
                let body = json!({ "by": arg(pos, 2) });
                self.call("POST", "/api/test/clock/advance", Some(&body))?
            }
            "set" => {
                check_args(pos, 2, 2, shape)?;
                let ms: u64 = arg(pos, 2)
                    .parse()
                    .map_err(|_| usage(format!("not milliseconds: {}", arg(pos, 2))))?;
                self.call(
                    "POST",
                    "/api/test/clock/set",
                    Some(&json!({ "now_ms": ms })),
                )?
            }
            _ => return Err(usage(format!("Usage: {shape}"))),
        };
        let now = answer
            .json()
            .get("now_ms")
            .cloned()
            .unwrap_or(JsonValue::Null);
        if self.opts.json {
            let _ = writeln!(self.io.out, "{}", json!({ "now_ms": now }));
        } else {
            let _ = writeln!(self.io.out, "{now}");
        }
        Ok(())
    }

    fn status(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 0, "status")?;
        let o = self.call("GET", "/api/overview", None)?.json();
        if self.opts.json {
            let _ = writeln!(self.io.out, "{o}");
            return Ok(());
        }
        let get = |path: &[&str]| {
            let mut v = &o;
            for p in path {
                v = v.get(*p).unwrap_or(&JsonValue::Null);
            }
            cell(v)
        };
        self.info("Status of node wharf ...");
        let lines = [
            format!("Product name: {}", get(&["product_name"])),
            format!("Product version: {}", get(&["product_version"])),
            format!("Node: {}", get(&["node"])),
            format!("Connections: {}", get(&["object_totals", "connections"])),
            format!("Channels: {}", get(&["object_totals", "channels"])),
            format!("Queues: {}", get(&["object_totals", "queues"])),
            format!("Exchanges: {}", get(&["object_totals", "exchanges"])),
            format!("Consumers: {}", get(&["object_totals", "consumers"])),
            format!("Messages: {}", get(&["queue_totals", "messages"])),
            format!(
                "Messages ready: {}",
                get(&["queue_totals", "messages_ready"])
            ),
            format!(
                "Messages unacknowledged: {}",
                get(&["queue_totals", "messages_unacknowledged"])
            ),
        ];
        for line in lines {
            let _ = writeln!(self.io.out, "{line}");
        }
        Ok(())
    }

    fn export(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "export_definitions FILE|-")?;
        let target = arg(pos, 1);
        let defs = self.call("GET", "/api/definitions", None)?.json();
        let text =
            serde_json::to_string_pretty(&defs).map_err(|e| Fail(EXIT_SOFTWARE, e.to_string()))?;
        if target == "-" {
            let _ = writeln!(self.io.out, "{text}");
        } else {
            self.info(&format!(
                "Exporting definitions in JSON to a file at \"{target}\" ..."
            ));
            std::fs::write(target, text + "\n")
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot write {target}: {e}")))?;
        }
        Ok(())
    }

    fn import(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "import_definitions FILE|-")?;
        let source = arg(pos, 1);
        let text = if source == "-" {
            let mut s = String::new();
            self.io
                .input
                .read_to_string(&mut s)
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot read standard input: {e}")))?;
            s
        } else {
            std::fs::read_to_string(source)
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot read {source}: {e}")))?
        };
        let defs: JsonValue = serde_json::from_str(&text)
            .map_err(|e| Fail(EXIT_DATAERR, format!("the definitions are not JSON: {e}")))?;
        self.info(&format!(
            "Importing definitions in JSON from a file at \"{source}\" ..."
        ));
        let answer = self.call("POST", "/api/definitions", Some(&defs))?;
        if let Some(warnings) = answer.json().get("warnings").and_then(JsonValue::as_array) {
            for w in warnings {
                let _ = writeln!(self.io.err, "Warning: {}", cell(w));
            }
        }
        self.info("Successfully started definition import.");
        Ok(())
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
