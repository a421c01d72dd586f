//! The `list_*` commands: columns chosen on the command line, printed as a tab-separated
//! table with a header (or JSON with `--formatter json`).

use serde_json::{Value as JsonValue, json};

use super::{Ctl, cell};
use crate::client::segment;
use crate::opts::{Outcome, usage};

impl Ctl<'_, '_> {
    pub(super) fn columns(pos: &[String], default: &[&str]) -> Vec<String> {
        if pos.len() > 1 {
            pos[1..].to_vec()
        } else {
            default.iter().map(|s| (*s).to_owned()).collect()
        }
    }

    pub(super) fn list_queues(&mut self, pos: &[String]) -> Outcome {
        let path = format!("/api/queues/{}", segment(&self.vhost()));
        let items = self.call("GET", &path, None)?.json();
        let cols = Self::columns(pos, &["name", "messages"]);
        self.info(&format!(
            "Timeout: 60.0 seconds ...\nListing queues for vhost {} ...",
            self.vhost()
        ));
        self.table(&items, &cols)
    }

    pub(super) fn list_simple(
        &mut self,
        pos: &[String],
        kind: &str,
        default: &[&str],
        what: &str,
    ) -> Outcome {
        let path = format!("/api/{kind}/{}", segment(&self.vhost()));
        let items = self.call("GET", &path, None)?.json();
        let cols = Self::columns(pos, default);
        self.info(&format!("{what} {} ...", self.vhost()));
        self.table(&items, &cols)
    }

    pub(super) fn list_bindings(&mut self, pos: &[String]) -> Outcome {
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

    pub(super) fn list_consumers(&mut self, pos: &[String]) -> Outcome {
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
                "activity_status",
                "arguments",
            ],
        );
        self.info(&format!("Listing consumers in vhost {} ...", self.vhost()));
        self.table(&items, &cols)
    }

    pub(super) fn list_global(
        &mut self,
        pos: &[String],
        path: &str,
        default: &[&str],
        what: &str,
    ) -> Outcome {
        let items = self.call("GET", path, None)?.json();
        let cols = Self::columns(pos, default);
        self.info(what);
        self.table(&items, &cols)
    }

    /// Prints `items` (a JSON array of objects) as rabbitmqctl does: a header line, then one
    /// tab-separated line per item; or a JSON array of the chosen columns.
    pub(super) fn table(&mut self, items: &JsonValue, cols: &[String]) -> Outcome {
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
}
