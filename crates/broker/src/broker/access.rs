//! Users and permissions as durable definitions (RabbitMQ's internal auth backend data):
//! a user is a name, a password hash (never the password: the server hashes it, RabbitMQ's
//! `rabbit_password_hashing_sha256` format, so exported definitions import unchanged) and
//! tags; a permission is a user's configure/write/read regular expressions on one vhost.
//!
//! This file holds the commands (`UserPut`, `UserDelete`, `PermissionSet`,
//! `PermissionClear`), their replay and the queries. Deciding whether an operation is allowed
//! is the server's job (it matches these regexes); the broker only keeps the definitions.
//! Must not depend on anything outside `broker` (no hashing, no randomness, no I/O).

use super::Broker;
use crate::error::{BrokerError, ErrorKind};
use crate::types::{Command, Event, Outcome, PermissionInfo, UserInfo};

fn no_user(name: &str) -> BrokerError {
    BrokerError::not_found(format!("no user '{name}'"))
}

/// Checks a permission regex the way the server will compile it.
pub(super) fn check_regex(which: &str, re: &str) -> Result<(), BrokerError> {
    regex::Regex::new(re).map(|_| ()).map_err(|e| {
        BrokerError::precondition(format!("invalid {which} permission regex '{re}': {e}"))
    })
}

impl Broker {
    /// `UserPut` / `UserDelete` / `PermissionSet` / `PermissionClear`.
    pub(super) fn access_command(
        &mut self,
        cmd: Command,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::UserPut {
                name,
                password_hash,
                tags,
            } => self.put_user(
                UserInfo {
                    name,
                    password_hash,
                    tags,
                },
                out,
            ),
            Command::UserDelete { name } => self.delete_user(&name, out),
            Command::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
            } => self.set_permission(
                PermissionInfo {
                    user,
                    vhost,
                    configure,
                    write,
                    read,
                },
                out,
            ),
            Command::PermissionClear { user, vhost } => self.clear_permission(&user, &vhost, out),
            other => unreachable!("not an access command: {other:?}"),
        }
    }

    /// The users, by name.
    pub fn users(&self) -> Vec<UserInfo> {
        self.access.users.values().cloned().collect()
    }

    /// One user, if defined.
    pub fn user(&self, name: &str) -> Option<&UserInfo> {
        self.access.users.get(name)
    }

    /// Every permission, by (user, vhost).
    pub fn permissions(&self) -> Vec<PermissionInfo> {
        self.access.permissions.values().cloned().collect()
    }

    /// True once any user was ever put or deleted (from the log or since start): the server
    /// seeds the default user only on a broker whose history has none (as RabbitMQ seeds
    /// `guest` on a fresh node only).
    pub fn users_ever_defined(&self) -> bool {
        self.access.ever_defined
    }

    /// `UserPut`: creates or replaces a user (its permissions stay).
    fn put_user(&mut self, user: UserInfo, out: &mut Outcome) -> Result<(), BrokerError> {
        if user.name.is_empty() {
            return Err(BrokerError::precondition("a user name must not be empty"));
        }
        if self.access.users.get(&user.name) != Some(&user) {
            out.events.push(Event::UserPut {
                name: user.name.clone(),
                password_hash: user.password_hash.clone(),
                tags: user.tags.clone(),
            });
        }
        self.apply_user_put(user);
        Ok(())
    }

    /// `UserDelete`: removes a user and its permissions.
    fn delete_user(&mut self, name: &str, out: &mut Outcome) -> Result<(), BrokerError> {
        if !self.access.users.contains_key(name) {
            return Err(no_user(name));
        }
        self.apply_user_deleted(name);
        out.events.push(Event::UserDeleted {
            name: name.to_owned(),
        });
        Ok(())
    }

    /// `PermissionSet`: the user and vhost must exist and each regex must compile.
    fn set_permission(&mut self, p: PermissionInfo, out: &mut Outcome) -> Result<(), BrokerError> {
        if !self.access.users.contains_key(&p.user) {
            return Err(no_user(&p.user));
        }
        if !self.vhosts.contains_key(&p.vhost) {
            return Err(BrokerError::new(
                ErrorKind::NotFound,
                format!("no vhost '{}'", p.vhost),
            ));
        }
        check_regex("configure", &p.configure)?;
        check_regex("write", &p.write)?;
        check_regex("read", &p.read)?;
        let key = (p.user.clone(), p.vhost.clone());
        if self.access.permissions.get(&key) != Some(&p) {
            out.events.push(Event::PermissionSet {
                user: p.user.clone(),
                vhost: p.vhost.clone(),
                configure: p.configure.clone(),
                write: p.write.clone(),
                read: p.read.clone(),
            });
            self.access.permissions.insert(key, p);
        }
        Ok(())
    }

    /// `PermissionClear`: the user must exist; clearing an absent permission changes nothing.
    fn clear_permission(
        &mut self,
        user: &str,
        vhost: &str,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        if !self.access.users.contains_key(user) {
            return Err(no_user(user));
        }
        if self
            .access
            .permissions
            .remove(&(user.to_owned(), vhost.to_owned()))
            .is_some()
        {
            out.events.push(Event::PermissionCleared {
                user: user.to_owned(),
                vhost: vhost.to_owned(),
            });
        }
        Ok(())
    }

    pub(super) fn apply_user_put(&mut self, user: UserInfo) {
        self.access.ever_defined = true;
        self.access.users.insert(user.name.clone(), user);
    }

    pub(super) fn apply_user_deleted(&mut self, name: &str) {
        self.access.ever_defined = true;
        self.access.users.remove(name);
        self.access.permissions.retain(|(u, _), _| u != name);
        self.access.topic.retain(|(u, _, _), _| u != name);
    }

    /// Replays a `PermissionSet`. A permission naming a user or vhost the log never made is
    /// not this broker's log.
    pub(super) fn apply_permission_set(&mut self, p: &PermissionInfo) -> Result<(), BrokerError> {
        if !self.access.users.contains_key(&p.user) || !self.vhosts.contains_key(&p.vhost) {
            return Err(BrokerError::new(
                ErrorKind::InternalError,
                format!(
                    "event does not fit the state: permission of unknown user '{}' or vhost '{}'",
                    p.user, p.vhost
                ),
            ));
        }
        self.access
            .permissions
            .insert((p.user.clone(), p.vhost.clone()), p.clone());
        Ok(())
    }

    /// A deleted vhost takes its permissions with it (RabbitMQ does the same).
    pub(super) fn forget_vhost_permissions(&mut self, vhost: &str) {
        self.access.permissions.retain(|(_, v), _| v != vhost);
        self.access.topic.retain(|(_, v, _), _| v != vhost);
    }

    /// Walks the access invariant (every permission names a live user and vhost).
    pub(super) fn check_access_invariants(&self) {
        for (user, vhost, _) in self.access.topic.keys() {
            assert!(
                self.access.users.contains_key(user) && self.vhosts.contains_key(vhost),
                "topic permission of a deleted user '{user}' or vhost '{vhost}'"
            );
        }
        for (user, vhost) in self.access.permissions.keys() {
            assert!(
                self.access.users.contains_key(user),
                "permission of a deleted user '{user}'"
            );
            assert!(
                self.vhosts.contains_key(vhost),
                "permission on a deleted vhost '{vhost}'"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use crate::types::Command;

    fn put(b: &mut Broker, name: &str) -> Outcome {
        b.handle(
            Command::UserPut {
                name: name.into(),
                password_hash: "aGFzaA==".into(),
                tags: vec!["administrator".into()],
            },
            0,
        )
        .unwrap()
    }

    fn perm(user: &str, vhost: &str) -> Command {
        Command::PermissionSet {
            user: user.into(),
            vhost: vhost.into(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }

    #[test]
    fn put_logs_once_and_replays_to_the_same_state() {
        let mut b = Broker::new();
        assert!(!b.users_ever_defined());
        assert_eq!(put(&mut b, "u").events.len(), 1);
        assert!(
            put(&mut b, "u").events.is_empty(),
            "same definition: no event"
        );
        let set = b.handle(perm("u", "/"), 0).unwrap();
        assert_eq!(set.events.len(), 1);
        let mut replayed = Broker::new();
        for e in put(&mut Broker::new(), "u")
            .events
            .iter()
            .chain(&set.events)
        {
            replayed.apply(e).unwrap();
        }
        assert_eq!(replayed.users(), b.users());
        assert_eq!(replayed.permissions(), b.permissions());
        assert!(replayed.users_ever_defined());
    }

    #[test]
    fn permission_needs_user_vhost_and_valid_regexes() {
        let mut b = Broker::new();
        assert_eq!(
            b.handle(perm("nobody", "/"), 0).unwrap_err().kind,
            ErrorKind::NotFound
        );
        put(&mut b, "u");
        assert_eq!(
            b.handle(perm("u", "nope"), 0).unwrap_err().kind,
            ErrorKind::NotFound
        );
        let bad = Command::PermissionSet {
            user: "u".into(),
            vhost: "/".into(),
            configure: "(".into(),
            write: String::new(),
            read: String::new(),
        };
        let e = b.handle(bad, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::PreconditionFailed);
        assert!(b.permissions().is_empty());
    }

    #[test]
    fn deleting_a_user_or_vhost_drops_its_permissions() {
        let mut b = Broker::new();
        put(&mut b, "u");
        b.handle(Command::VhostAdd { vhost: "v".into() }, 0)
            .unwrap();
        b.handle(perm("u", "/"), 0).unwrap();
        b.handle(perm("u", "v"), 0).unwrap();
        b.handle(Command::VhostDelete { vhost: "v".into() }, 0)
            .unwrap();
        assert_eq!(b.permissions().len(), 1);
        let out = b
            .handle(Command::UserDelete { name: "u".into() }, 0)
            .unwrap();
        assert_eq!(out.events, vec![Event::UserDeleted { name: "u".into() }]);
        assert!(b.permissions().is_empty());
        assert!(b.users_ever_defined(), "a delete is history too");
        assert_eq!(
            b.handle(Command::UserDelete { name: "u".into() }, 0)
                .unwrap_err()
                .kind,
            ErrorKind::NotFound
        );
    }

    #[test]
    fn clearing_an_absent_permission_logs_nothing() {
        let mut b = Broker::new();
        put(&mut b, "u");
        let out = b
            .handle(
                Command::PermissionClear {
                    user: "u".into(),
                    vhost: "/".into(),
                },
                0,
            )
            .unwrap();
        assert!(out.events.is_empty());
    }
}
