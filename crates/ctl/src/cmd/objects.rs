//! `purge_queue`, `delete_queue`, `add_vhost`, `delete_vhost`.

use serde_json::{Value as JsonValue, json};

use super::Ctl;
use crate::client::segment;
use crate::opts::{Outcome, arg, check_args};

impl Ctl<'_, '_> {
    pub(super) fn queue_op(&mut self, pos: &[String], purge: bool) -> Outcome {
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

    pub(super) fn vhost_op(&mut self, pos: &[String]) -> Outcome {
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
}
