//! Topic permissions as durable definitions (RabbitMQ's `set_topic_permissions`, S-TPERM-1):
//! a user's write and read regular expressions on the routing keys of one topic exchange of
//! one vhost. This file holds the commands (`TopicPermissionSet`, `TopicPermissionClear`),
//! their replay and the query. As for permissions, matching is the server's job; the broker
//! only keeps the definitions. Must not depend on anything outside `broker`.

use super::Broker;
use crate::error::{BrokerError, ErrorKind};
use crate::types::{Command, Event, Outcome, TopicPermissionInfo};

impl Broker {
    /// `TopicPermissionSet` / `TopicPermissionClear`.
    pub(super) fn topic_access_command(
        &mut self,
        cmd: Command,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::TopicPermissionSet {
                user,
                vhost,
                exchange,
                write,
                read,
            } => self.set_topic_permission(
                TopicPermissionInfo {
                    user,
                    vhost,
                    exchange,
                    write,
                    read,
                },
                out,
            ),
            Command::TopicPermissionClear {
                user,
                vhost,
                exchange,
            } => self.clear_topic_permissions(&user, &vhost, exchange.as_deref(), out),
            other => unreachable!("not a topic access command: {other:?}"),
        }
    }

    /// Every topic permission, by (user, vhost, exchange).
    pub fn topic_permissions(&self) -> Vec<TopicPermissionInfo> {
        self.access.topic.values().cloned().collect()
    }

    /// `TopicPermissionSet`: the user and vhost must exist and both regexes must compile.
    fn set_topic_permission(
        &mut self,
        p: TopicPermissionInfo,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        self.check_user_and_vhost(&p.user, &p.vhost)?;
        // `{username}` and `{vhost}` are expanded by the server before matching.
        let vars = |re: &str| re.replace("{username}", "u").replace("{vhost}", "v");
        super::access::check_regex("write", &vars(&p.write))?;
        super::access::check_regex("read", &vars(&p.read))?;
        let key = (p.user.clone(), p.vhost.clone(), p.exchange.clone());
        if self.access.topic.get(&key) != Some(&p) {
            out.events.push(Event::TopicPermissionSet {
                user: p.user.clone(),
                vhost: p.vhost.clone(),
                exchange: p.exchange.clone(),
                write: p.write.clone(),
                read: p.read.clone(),
            });
            self.access.topic.insert(key, p);
        }
        Ok(())
    }

    /// `TopicPermissionClear`: the user must exist; one exchange's permission or all of the
    /// user's in the vhost; clearing what is absent changes nothing.
    fn clear_topic_permissions(
        &mut self,
        user: &str,
        vhost: &str,
        exchange: Option<&str>,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        self.check_user_and_vhost(user, vhost)?;
        let gone: Vec<(String, String, String)> = self
            .access
            .topic
            .keys()
            .filter(|(u, v, x)| u == user && v == vhost && exchange.is_none_or(|e| e == x))
            .cloned()
            .collect();
        for key in gone {
            self.access.topic.remove(&key);
            let (user, vhost, exchange) = key;
            out.events.push(Event::TopicPermissionCleared {
                user,
                vhost,
                exchange,
            });
        }
        Ok(())
    }

    fn check_user_and_vhost(&self, user: &str, vhost: &str) -> Result<(), BrokerError> {
        if !self.access.users.contains_key(user) {
            return Err(BrokerError::not_found(format!("no user '{user}'")));
        }
        if !self.vhosts.contains_key(vhost) {
            return Err(BrokerError::new(
                ErrorKind::NotFound,
                format!("no vhost '{vhost}'"),
            ));
        }
        Ok(())
    }

    /// Replays a topic permission event. One naming a user or vhost the log never made is
    /// not this broker's log.
    pub(super) fn replay_topic_access(&mut self, event: &Event) -> Result<(), BrokerError> {
        match event {
            Event::TopicPermissionSet {
                user,
                vhost,
                exchange,
                write,
                read,
            } => {
                if !self.access.users.contains_key(user) || !self.vhosts.contains_key(vhost) {
                    return Err(BrokerError::new(
                        ErrorKind::InternalError,
                        format!(
                            "event does not fit the state: topic permission of unknown user '{user}' or vhost '{vhost}'"
                        ),
                    ));
                }
                let p = TopicPermissionInfo {
                    user: user.clone(),
                    vhost: vhost.clone(),
                    exchange: exchange.clone(),
                    write: write.clone(),
                    read: read.clone(),
                };
                self.access
                    .topic
                    .insert((user.clone(), vhost.clone(), exchange.clone()), p);
            }
            Event::TopicPermissionCleared {
                user,
                vhost,
                exchange,
            } => {
                self.access
                    .topic
                    .remove(&(user.clone(), vhost.clone(), exchange.clone()));
            }
            other => unreachable!("not a topic access event: {other:?}"),
        }
        Ok(())
    }

    /// The topic permission events of a snapshot (after the users and vhosts they name).
    pub(super) fn snapshot_topic_permissions(&self, out: &mut Vec<Event>) {
        for p in self.topic_permissions() {
            out.push(Event::TopicPermissionSet {
                user: p.user,
                vhost: p.vhost,
                exchange: p.exchange,
                write: p.write,
                read: p.read,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    fn broker_with_user() -> Broker {
        let mut b = Broker::new();
        b.handle(
            Command::UserPut {
                name: "app".into(),
                password_hash: "aGFzaA==".into(),
                tags: Vec::new(),
            },
            0,
        )
        .unwrap();
        b
    }

    fn set(exchange: &str, write: &str) -> Command {
        Command::TopicPermissionSet {
            user: "app".into(),
            vhost: "/".into(),
            exchange: exchange.into(),
            write: write.into(),
            read: ".*".into(),
        }
    }

    #[test]
    fn s_tperm_1_topic_permissions_are_definitions_that_replay() {
        let mut b = broker_with_user();
        let out = b.handle(set("events", "^orders\\."), 0).unwrap();
        assert_eq!(out.events.len(), 1);
        // The same again logs nothing.
        assert!(
            b.handle(set("events", "^orders\\."), 0)
                .unwrap()
                .events
                .is_empty()
        );
        b.handle(set("audit", ""), 0).unwrap();
        assert_eq!(b.topic_permissions().len(), 2);
        let err = b.handle(set("events", "("), 0).unwrap_err();
        assert!(err.text.contains("write"), "{}", err.text);
        let mut replayed = broker_with_user();
        let mut snapshot = Vec::new();
        b.snapshot_topic_permissions(&mut snapshot);
        for e in &snapshot {
            replayed.apply(e).unwrap();
        }
        assert_eq!(replayed.topic_permissions(), b.topic_permissions());
        let cleared = b
            .handle(
                Command::TopicPermissionClear {
                    user: "app".into(),
                    vhost: "/".into(),
                    exchange: None,
                },
                0,
            )
            .unwrap();
        assert_eq!(cleared.events.len(), 2);
        assert!(b.topic_permissions().is_empty());
    }

    #[test]
    fn s_tperm_1_deleting_the_user_or_vhost_takes_its_topic_permissions() {
        let mut b = broker_with_user();
        b.handle(Command::VhostAdd { vhost: "v".into() }, 0)
            .unwrap();
        let mut cmd = set("events", ".*");
        if let Command::TopicPermissionSet { vhost, .. } = &mut cmd {
            *vhost = "v".into();
        }
        b.handle(cmd, 0).unwrap();
        b.handle(set("events", ".*"), 0).unwrap();
        b.handle(Command::VhostDelete { vhost: "v".into() }, 0)
            .unwrap();
        assert_eq!(b.topic_permissions().len(), 1);
        b.check_invariants();
        b.handle(Command::UserDelete { name: "app".into() }, 0)
            .unwrap();
        assert!(b.topic_permissions().is_empty());
        b.check_invariants();
    }
}
