//! The users a server is configured with ([`Users`]): who is put into the broker at start,
//! with which tags and vhosts, and the plain check of a login against that list.

use std::net::{IpAddr, SocketAddr};

/// A user from the configuration: put into the broker at start (its password hashed; the
/// log never holds it in clear) with full permissions on its vhosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password (plain in the configuration only; hashed before it reaches the broker).
    pub password: String,
    /// Only from a loopback address (RabbitMQ's rule for `guest`).
    pub loopback_only: bool,
    /// The vhosts this user gets full permissions on at start; `"*"` stands for every vhost
    /// that exists then.
    pub vhosts: Vec<String>,
    /// Tags (`administrator`, `management`, `monitoring`, `policymaker`).
    pub tags: Vec<String>,
    /// Put only on a broker whose log never defined a user (RabbitMQ's default user on a
    /// fresh node): once an operator deleted it, it stays deleted.
    pub initial_only: bool,
}

/// The users of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Users(pub Vec<User>);

impl Default for Users {
    /// `guest`/`guest`, loopback only, as RabbitMQ ships.
    fn default() -> Self {
        Users(vec![User {
            name: "guest".to_owned(),
            password: "guest".to_owned(),
            loopback_only: true,
            vhosts: vec!["/".to_owned()],
            tags: vec!["administrator".to_owned()],
            initial_only: true,
        }])
    }
}

impl Users {
    /// `None` if `name`/`password` may log in from `peer` by this list alone, else RabbitMQ's
    /// refusal text. A running server checks its [`crate::auth::UserRegistry`] instead.
    pub fn check(&self, name: &str, password: &str, peer: SocketAddr) -> Option<String> {
        let refused = || {
            Some(
                "Login was refused using authentication mechanism PLAIN. For details see the \
                 broker logfile."
                    .to_owned(),
            )
        };
        let Some(user) = self.0.iter().find(|u| u.name == name) else {
            return refused();
        };
        if user.password != password {
            return refused();
        }
        if user.loopback_only && !is_loopback(peer.ip()) {
            return Some(format!("user '{name}' can only connect via localhost"));
        }
        None
    }

    /// Whether `name` may open `vhost` (its list names it, or holds `"*"`).
    #[must_use]
    pub fn may_open(&self, name: &str, vhost: &str) -> bool {
        self.0
            .iter()
            .find(|u| u.name == name)
            .is_some_and(|u| u.vhosts.iter().any(|v| v == "*" || v == vhost))
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}
