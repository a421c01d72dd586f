//! Users and permissions: `add_user`, `change_password`, `delete_user`, `set_user_tags`,
//! `set_permissions`, `clear_permissions`, `list_permissions`, and their topic twins
//! (`set_topic_permissions`, `clear_topic_permissions`, `list_topic_permissions`).

use serde_json::{Value as JsonValue, json};

use super::Ctl;
use crate::client::segment;
use crate::exit::{EXIT_NOUSER, EXIT_SOFTWARE};
use crate::opts::{Fail, Outcome, arg, check_args};

impl Ctl<'_, '_> {
    /// The user as the API has it (404 maps to "no such user").
    pub(super) fn user(&self, name: &str) -> Result<JsonValue, Fail> {
        match self.call("GET", "/api/users", None)?.json() {
            JsonValue::Array(users) => users
                .into_iter()
                .find(|u| u.get("name").and_then(JsonValue::as_str) == Some(name))
                .ok_or_else(|| Fail(EXIT_NOUSER, format!("User \"{name}\" does not exist"))),
            _ => Err(Fail(EXIT_SOFTWARE, "unexpected answer".to_owned())),
        }
    }

    /// `add_user NAME PASSWORD` (tags kept empty) and `change_password NAME PASSWORD` (tags
    /// kept as they are). The password travels to the API, which stores only its hash.
    pub(super) fn add_user(&mut self, pos: &[String], change: bool) -> Outcome {
        check_args(pos, 2, 2, &format!("{} NAME PASSWORD", pos[0]))?;
        let (name, password) = (arg(pos, 1), arg(pos, 2));
        let tags = if change {
            self.user(name)?.get("tags").cloned().unwrap_or(json!([]))
        } else {
            if self.user(name).is_ok() {
                return Err(Fail(
                    EXIT_SOFTWARE,
                    format!("User \"{name}\" already exists"),
                ));
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

    pub(super) fn delete_user(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "delete_user NAME")?;
        let name = arg(pos, 1);
        self.info(&format!("Deleting user \"{name}\" ..."));
        self.call("DELETE", &format!("/api/users/{}", segment(name)), None)?;
        Ok(())
    }

    pub(super) fn set_user_tags(&mut self, pos: &[String]) -> Outcome {
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

    pub(super) fn set_permissions(&mut self, pos: &[String]) -> Outcome {
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

    pub(super) fn clear_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "clear_permissions [-p VHOST] USER")?;
        let (user, vhost) = (arg(pos, 1), self.vhost());
        self.info(&format!(
            "Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ..."
        ));
        let path = format!("/api/permissions/{}/{}", segment(&vhost), segment(user));
        self.call("DELETE", &path, None)?;
        Ok(())
    }

    pub(super) fn list_permissions(&mut self, pos: &[String]) -> Outcome {
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

    /// `set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ` (S-TPERM-1).
    pub(super) fn set_topic_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(
            pos,
            4,
            4,
            "set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ",
        )?;
        let (user, exchange, vhost) = (arg(pos, 1), arg(pos, 2), self.vhost());
        self.info(&format!(
            "Setting topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{vhost}\" ..."
        ));
        let body = json!({ "exchange": exchange, "write": arg(pos, 3), "read": arg(pos, 4) });
        let path = format!(
            "/api/topic-permissions/{}/{}",
            segment(&vhost),
            segment(user)
        );
        self.call("PUT", &path, Some(&body))?;
        Ok(())
    }

    /// `clear_topic_permissions [-p VHOST] USER [EXCHANGE]`.
    pub(super) fn clear_topic_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(
            pos,
            1,
            2,
            "clear_topic_permissions [-p VHOST] USER [EXCHANGE]",
        )?;
        let (user, vhost) = (arg(pos, 1), self.vhost());
        let mut path = format!(
            "/api/topic-permissions/{}/{}",
            segment(&vhost),
            segment(user)
        );
        match pos.get(2) {
            Some(exchange) => {
                self.info(&format!(
                    "Clearing topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{vhost}\" ..."
                ));
                path.push_str("?exchange=");
                path.push_str(&segment(exchange));
            }
            None => self.info(&format!(
                "Clearing topic permissions for user \"{user}\" in vhost \"{vhost}\" ..."
            )),
        }
        self.call("DELETE", &path, None)?;
        Ok(())
    }

    /// `list_topic_permissions [-p VHOST] [COLUMN ...]`.
    pub(super) fn list_topic_permissions(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 0, 4, "list_topic_permissions [-p VHOST] [COLUMN ...]")?;
        let vhost = self.vhost();
        let path = format!("/api/vhosts/{}/topic-permissions", segment(&vhost));
        let items = self.call("GET", &path, None)?.json();
        let cols = Self::columns(pos, &["user", "exchange", "write", "read"]);
        self.info(&format!(
            "Listing topic permissions for vhost \"{vhost}\" ..."
        ));
        self.table(&items, &cols)
    }
}
