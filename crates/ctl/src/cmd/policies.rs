//! `set_policy`, `clear_policy`, `list_policies` and their operator-policy twins.

use serde_json::{Value as JsonValue, json};

use super::Ctl;
use crate::client::segment;
use crate::exit::EXIT_DATAERR;
use crate::opts::{Fail, Outcome, arg, check_args};

impl Ctl<'_, '_> {
    pub(super) fn policy_path(&self, operator: bool, name: &str) -> String {
        let kind = if operator {
            "operator-policies"
        } else {
            "policies"
        };
        format!("/api/{kind}/{}/{}", segment(&self.vhost()), segment(name))
    }

    pub(super) fn set_policy(&mut self, pos: &[String]) -> Outcome {
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

    pub(super) fn clear_policy(&mut self, pos: &[String]) -> Outcome {
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

    pub(super) fn list_policies(&mut self, pos: &[String]) -> Outcome {
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
}
