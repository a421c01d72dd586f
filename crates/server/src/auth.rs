//! Authentication and authorisation as RabbitMQ does them: passwords hashed with
//! `rabbit_password_hashing_sha256` (so definitions exported from RabbitMQ import unchanged),
//! one shared, cheaply readable [`UserRegistry`] (a snapshot of the broker's users and
//! compiled permissions, swapped by the broker task whenever definitions change) that
//! connections and the management API both log in through, and the one mapping from a broker
//! command to the permissions it needs ([`required_permissions`], after `rabbit_channel`).
//!
//! The definitions live in the broker (`broker::access`); this file decides with them. It
//! must not depend on sockets or tokio: it is plain data, used from the connection tasks.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use regex::Regex;
use sha2::{Digest as _, Sha256, Sha512};

use wharf_broker::{Broker, Command, Publish, UserInfo};

/// Salt bytes in a RabbitMQ password hash.
const SALT_BYTES: usize = 4;
/// Permission decisions a connection remembers, oldest forgotten first (RabbitMQ keeps 12).
const PERM_CACHE_ENTRIES_MAX: usize = 16;
/// The resource name RabbitMQ checks for the default exchange (`rabbit_access_control`).
const DEFAULT_EXCHANGE_RESOURCE: &str = "amq.default";
/// What a server-named queue's configure permission is checked against: the broker picks the
/// name after authorisation, so we check a name of its shape (`amq.gen-` + 16 hex digits).
const SERVER_NAMED_QUEUE_SHAPE: &str = "amq.gen-0000000000000000";

/// `base64(salt ++ sha256(salt ++ utf8(password)))` with 4 random salt bytes: RabbitMQ's
/// default `rabbit_password_hashing_sha256`.
///
/// # Errors
/// The system's randomness source failed (then no user can be created safely).
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; SALT_BYTES];
    getrandom::fill(&mut salt).map_err(|e| format!("no randomness for a password salt: {e}"))?;
    Ok(hash_password_with_salt(salt, password))
}

/// [`hash_password`] with a given salt (for tests and golden values).
pub fn hash_password_with_salt(salt: [u8; SALT_BYTES], password: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password.as_bytes());
    let mut stored = salt.to_vec();
    stored.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(stored)
}

/// True when `password` matches `password_hash` (RabbitMQ's SHA-256 format, or its SHA-512
/// one, told apart by length). The digests are compared in constant time; an empty,
/// undecodable or MD5 hash matches nothing.
pub fn verify_password(password_hash: &str, password: &str) -> bool {
    let Ok(stored) = base64::engine::general_purpose::STANDARD.decode(password_hash) else {
        return false;
    };
    let Some((salt, digest)) = stored.split_at_checked(SALT_BYTES) else {
        return false;
    };
    let computed: Vec<u8> = match digest.len() {
        32 => Sha256::new()
            .chain_update(salt)
            .chain_update(password.as_bytes())
            .finalize()
            .to_vec(),
        64 => Sha512::new()
            .chain_update(salt)
            .chain_update(password.as_bytes())
            .finalize()
            .to_vec(),
        _ => return false,
    };
    constant_time_eq(&computed, digest)
}

/// Equal-length slices compared without an early exit (the length is no secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Who logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// User name.
    pub name: String,
    /// Tags (`administrator`, `management`, `monitoring`, `policymaker`, ...).
    pub tags: Vec<String>,
}

impl Principal {
    /// True when the user carries `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

/// RabbitMQ's three permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Declare, delete.
    Configure,
    /// Publish to, bind to.
    Write,
    /// Consume, get, purge, bind from.
    Read,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permission::Configure => "configure",
            Permission::Write => "write",
            Permission::Read => "read",
        })
    }
}

/// The kind of a resource a permission is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A queue.
    Queue,
    /// An exchange.
    Exchange,
}

/// One permission an operation needs: `permission` on the resource `kind` named `name`
/// (in the connection's vhost).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Need {
    /// Queue or exchange.
    pub kind: ResourceKind,
    /// Its name as checked (the default exchange is `amq.default`, as in RabbitMQ).
    pub name: String,
    /// The permission.
    pub permission: Permission,
}

/// One [`Need`]; the default exchange (`""`) is named `amq.default`, as RabbitMQ checks it.
pub fn need(kind: ResourceKind, name: &str, permission: Permission) -> Need {
    let name = if kind == ResourceKind::Exchange && name.is_empty() {
        DEFAULT_EXCHANGE_RESOURCE
    } else {
        name
    };
    Need {
        kind,
        name: name.to_owned(),
        permission,
    }
}

/// The permissions a command needs, in the order RabbitMQ checks them (`rabbit_channel`):
/// declares and deletes need configure; a binding needs write on its destination and read on
/// its source; publish needs write on the exchange; consume, get and purge need read on the
/// queue. A non-passive queue declare naming a dead-letter exchange also needs read on the
/// queue and write on that exchange; an exchange declare naming an alternate exchange needs
/// read on the exchange and write on the alternate. (RabbitMQ makes these two extra checks
/// only when the entity is new; we cannot know that before the broker runs, so a redeclare
/// is checked too.) Passive declares, acks, qos and the like need nothing.
pub fn required_permissions(cmd: &Command) -> Vec<Need> {
    use Permission::{Configure, Read, Write};
    use ResourceKind::{Exchange, Queue};
    match cmd {
        Command::ExchangeDeclare(d) if !d.passive => {
            let mut needs = vec![need(Exchange, &d.exchange, Configure)];
            if let Some(ae) = d
                .arguments
                .get("alternate-exchange")
                .and_then(|v| v.as_str())
            {
                needs.push(need(Exchange, &d.exchange, Read));
                needs.push(need(Exchange, ae, Write));
            }
            needs
        }
        Command::ExchangeDelete { exchange, .. } => vec![need(Exchange, exchange, Configure)],
        Command::ExchangeBind {
            destination,
            source,
            ..
        } => vec![
            need(Exchange, destination, Write),
            need(Exchange, source, Read),
        ],
        Command::QueueDeclare(d) if !d.passive => {
            let name = if d.queue.is_empty() {
                SERVER_NAMED_QUEUE_SHAPE
            } else {
                &d.queue
            };
            let mut needs = vec![need(Queue, name, Configure)];
            if let Some(dlx) = d
                .arguments
                .get("x-dead-letter-exchange")
                .and_then(|v| v.as_str())
            {
                needs.push(need(Queue, name, Read));
                needs.push(need(Exchange, dlx, Write));
            }
            needs
        }
        Command::QueueBind {
            queue, exchange, ..
        } => vec![need(Queue, queue, Write), need(Exchange, exchange, Read)],
        Command::QueueDelete { queue, .. } => vec![need(Queue, queue, Configure)],
        Command::QueuePurge { queue, .. }
        | Command::Consume { queue, .. }
        | Command::Get { queue, .. } => vec![need(Queue, queue, Read)],
        Command::Publish(p) => publish_permissions(p),
        _ => Vec::new(),
    }
}

/// S-TPERM-2/3: what a topic permission is checked against for `cmd`: (vhost, exchange,
/// routing key, whether it writes). A publish writes to its exchange; a binding (bind or
/// unbind, to a queue or an exchange) reads from its source. Other commands use no topic.
pub fn topic_use(cmd: &Command) -> Option<(&str, &str, &str, bool)> {
    match cmd {
        Command::Publish(p) | Command::PublishOn { publish: p, .. } => {
            Some((&p.vhost, &p.exchange, &p.routing_key, true))
        }
        Command::QueueBind {
            vhost,
            exchange,
            routing_key,
            ..
        }
        | Command::ExchangeBind {
            vhost,
            source: exchange,
            routing_key,
            ..
        } => Some((vhost, exchange, routing_key, false)),
        _ => None,
    }
}

/// RabbitMQ's text refusing `user` the topic `key` of `exchange` (S-TPERM-2).
pub fn topic_refusal_text(user: &str, vhost: &str, exchange: &str, key: &str) -> String {
    format!(
        "access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
    )
}

/// What `basic.publish` needs: write on its exchange.
pub fn publish_permissions(p: &Publish) -> Vec<Need> {
    vec![need(ResourceKind::Exchange, &p.exchange, Permission::Write)]
}

/// One user's compiled permissions on one vhost (`None`: the empty regex, which RabbitMQ
/// treats as "nothing").
#[derive(Debug)]
struct CompiledPermission {
    configure: Option<Regex>,
    write: Option<Regex>,
    read: Option<Regex>,
}

fn compile(re: &str) -> Option<Regex> {
    if re.is_empty() {
        return None;
    }
    // The broker refused invalid regexes when they were set; one that fails here anyway
    // (a log written by another build) permits nothing rather than everything.
    Regex::new(re).ok()
}

/// An immutable view of the users and permissions at one point (one generation).
#[derive(Debug, Default)]
pub struct Snapshot {
    users: HashMap<String, UserInfo>,
    permissions: HashMap<(String, String), CompiledPermission>,
    /// Topic permissions by (user, vhost, exchange): (write, read), with `{username}` and
    /// `{vhost}` already expanded (S-TPERM-2).
    topic: HashMap<(String, String, String), TopicRegexes>,
    vhosts: HashSet<String>,
}

/// A topic permission's compiled (write, read) regexes.
type TopicRegexes = (Option<Regex>, Option<Regex>);

/// A topic permission regex with RabbitMQ's variables expanded (`{username}`, `{vhost}`; the
/// values are escaped, so they match literally), compiled as a permission regex is.
fn compile_topic(re: &str, user: &str, vhost: &str) -> Option<Regex> {
    let expanded = re
        .replace("{username}", &regex::escape(user))
        .replace("{vhost}", &regex::escape(vhost));
    compile(&expanded)
}

impl Snapshot {
    fn of(broker: &Broker) -> Self {
        Snapshot {
            users: broker
                .users()
                .into_iter()
                .map(|u| (u.name.clone(), u))
                .collect(),
            permissions: broker
                .permissions()
                .into_iter()
                .map(|p| {
                    let compiled = CompiledPermission {
                        configure: compile(&p.configure),
                        write: compile(&p.write),
                        read: compile(&p.read),
                    };
                    ((p.user, p.vhost), compiled)
                })
                .collect(),
            topic: broker
                .topic_permissions()
                .into_iter()
                .map(|p| {
                    let write = compile_topic(&p.write, &p.user, &p.vhost);
                    let read = compile_topic(&p.read, &p.user, &p.vhost);
                    ((p.user, p.vhost, p.exchange), (write, read))
                })
                .collect(),
            vhosts: broker.vhost_names().into_iter().collect(),
        }
    }

    /// Whether any topic permission exists (the publish path asks this first, so it costs
    /// one comparison while none is set).
    pub fn has_topic_permissions(&self) -> bool {
        !self.topic.is_empty()
    }

    /// S-TPERM-2/3: whether `user` may use `routing_key` on the topic exchange `exchange`
    /// (`write` for a publish, read for a binding). Without a topic permission for that
    /// exchange everything is allowed, as in RabbitMQ; an empty regex allows nothing.
    pub fn topic_permits(
        &self,
        user: &str,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        write: bool,
    ) -> bool {
        let key = (user.to_owned(), vhost.to_owned(), exchange.to_owned());
        let Some((w, r)) = self.topic.get(&key) else {
            return true;
        };
        let re = if write { w } else { r };
        re.as_ref().is_some_and(|re| re.is_match(routing_key))
    }

    /// Whether `user` has a topic permission on `exchange` (then its type decides whether it
    /// applies).
    pub fn restricts_topic(&self, user: &str, vhost: &str, exchange: &str) -> bool {
        self.topic
            .contains_key(&(user.to_owned(), vhost.to_owned(), exchange.to_owned()))
    }

    /// `connection.open`: RabbitMQ lets a user open a vhost on which it has any permission.
    pub fn may_open(&self, user: &str, vhost: &str) -> bool {
        self.permissions
            .contains_key(&(user.to_owned(), vhost.to_owned()))
    }

    /// The vhosts `user` holds a permission on (what a `management` user sees in the API).
    pub fn vhosts_of(&self, user: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .permissions
            .keys()
            .filter(|(u, _)| u == user)
            .map(|(_, v)| v.clone())
            .collect();
        out.sort();
        out
    }

    /// The vhost exists.
    pub fn has_vhost(&self, vhost: &str) -> bool {
        self.vhosts.contains(vhost)
    }

    /// Whether `user` holds `n` in `vhost` (an unanchored regex match, as RabbitMQ).
    pub fn permits(&self, user: &str, vhost: &str, n: &Need) -> bool {
        let Some(p) = self.permissions.get(&(user.to_owned(), vhost.to_owned())) else {
            return false;
        };
        let re = match n.permission {
            Permission::Configure => &p.configure,
            Permission::Write => &p.write,
            Permission::Read => &p.read,
        };
        re.as_ref().is_some_and(|re| re.is_match(&n.name))
    }
}

/// The text RabbitMQ sends when it refuses a login (for any reason but loopback).
fn login_refused() -> String {
    "Login was refused using authentication mechanism PLAIN. For details see the broker \
     logfile."
        .to_owned()
}

/// The users and permissions every connection (and the management API) checks against:
/// an `Arc`'d snapshot that the broker task replaces whenever definitions change, and a
/// generation counter that lets per-connection caches notice (RabbitMQ re-checks each
/// operation through a small cache too).
#[derive(Debug)]
pub struct UserRegistry {
    snapshot: RwLock<Arc<Snapshot>>,
    generation: AtomicU64,
    /// RabbitMQ's `loopback_users`: these names may log in only from a loopback address.
    loopback: BTreeSet<String>,
}

impl UserRegistry {
    /// An empty registry (nobody may log in until [`UserRegistry::refresh`]).
    pub fn new(loopback_users: impl IntoIterator<Item = String>) -> Self {
        UserRegistry {
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            generation: AtomicU64::new(0),
            loopback: loopback_users.into_iter().collect(),
        }
    }

    /// Rebuilds the snapshot from the broker's definitions (the broker task calls this after
    /// applying definition changes) and bumps the generation.
    pub fn refresh(&self, broker: &Broker) {
        let fresh = Arc::new(Snapshot::of(broker));
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Bumped by every [`UserRegistry::refresh`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Authenticates `name`/`password` coming from `peer`: the user's tags, or RabbitMQ's
    /// refusal text (the same text for an unknown user and a wrong password).
    ///
    /// # Errors
    /// The refusal text.
    pub fn check(&self, name: &str, password: &str, peer: SocketAddr) -> Result<Principal, String> {
        let snapshot = self.snapshot();
        let Some(user) = snapshot.users.get(name) else {
            return Err(login_refused());
        };
        if !verify_password(&user.password_hash, password) {
            return Err(login_refused());
        }
        if self.loopback.contains(name) && !is_loopback(peer.ip()) {
            return Err(format!("user '{name}' can only connect via localhost"));
        }
        Ok(Principal {
            name: user.name.clone(),
            tags: user.tags.clone(),
        })
    }
}

/// One connection's memory of permission decisions, dropped whenever the registry's
/// generation moves (so a changed permission applies to the next operation). A few entries
/// scanned in order: a connection uses few resources, and a hit costs no allocation (the
/// publish path asks once per message).
#[derive(Debug, Default)]
pub struct PermissionCache {
    generation: u64,
    snapshot: Option<Arc<Snapshot>>,
    decided: Vec<(ResourceKind, Permission, String, bool)>,
}

fn refusal(n: &Need, user: &str, vhost: &str) -> String {
    let kind = match n.kind {
        ResourceKind::Queue => "queue",
        ResourceKind::Exchange => "exchange",
    };
    format!(
        "{} access to {kind} '{}' in vhost '{vhost}' refused for user '{user}'",
        n.permission, n.name
    )
}

impl PermissionCache {
    /// `Ok` when `user` holds every permission in `needs` on `vhost`; else RabbitMQ's
    /// refusal text for the first one missing (`write access to exchange 'x' in vhost '/'
    /// refused for user 'u'`).
    ///
    /// # Errors
    /// The refusal text (the caller closes the channel with 403 `ACCESS_REFUSED`).
    pub fn authorize(
        &mut self,
        registry: &UserRegistry,
        user: &str,
        vhost: &str,
        needs: &[Need],
    ) -> Result<(), String> {
        for n in needs {
            if !self.allowed(registry, user, vhost, n.kind, &n.name, n.permission) {
                return Err(refusal(n, user, vhost));
            }
        }
        Ok(())
    }

    /// [`PermissionCache::authorize`] for `basic.publish` to `exchange`: write on it, with
    /// no allocation when the decision is cached.
    ///
    /// # Errors
    /// The refusal text.
    pub fn authorize_publish(
        &mut self,
        registry: &UserRegistry,
        user: &str,
        vhost: &str,
        exchange: &str,
    ) -> Result<(), String> {
        let name = if exchange.is_empty() {
            DEFAULT_EXCHANGE_RESOURCE
        } else {
            exchange
        };
        if self.allowed(
            registry,
            user,
            vhost,
            ResourceKind::Exchange,
            name,
            Permission::Write,
        ) {
            Ok(())
        } else {
            Err(refusal(
                &need(ResourceKind::Exchange, exchange, Permission::Write),
                user,
                vhost,
            ))
        }
    }

    fn allowed(
        &mut self,
        registry: &UserRegistry,
        user: &str,
        vhost: &str,
        kind: ResourceKind,
        name: &str,
        permission: Permission,
    ) -> bool {
        let generation = registry.generation();
        if self.snapshot.is_none() || generation != self.generation {
            self.generation = generation;
            self.snapshot = Some(registry.snapshot());
            self.decided.clear();
        }
        if let Some(&(.., a)) = self
            .decided
            .iter()
            .find(|(k, p, n, _)| *k == kind && *p == permission && n == name)
        {
            return a;
        }
        let n = Need {
            kind,
            name: name.to_owned(),
            permission,
        };
        let a = self
            .snapshot
            .as_ref()
            .is_some_and(|s| s.permits(user, vhost, &n));
        if self.decided.len() >= PERM_CACHE_ENTRIES_MAX {
            self.decided.remove(0);
        }
        self.decided.push((kind, permission, n.name, a));
        a
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use wharf_broker::{FieldTable, QueueDeclare, Value};

    /// `guest` / `guest` as RabbitMQ 3.13.2 exports it (`"hashing_algorithm":
    /// "rabbit_password_hashing_sha256"`).
    const RABBITMQ_GUEST_HASH: &str = "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN";

    #[test]
    fn hashes_have_rabbitmq_shape_and_verify() {
        let h = hash_password_with_salt([1, 2, 3, 4], "s3cret");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&h)
            .unwrap();
        assert_eq!(raw.len(), 36, "4 salt bytes + 32 digest bytes");
        assert_eq!(raw[..4], [1, 2, 3, 4]);
        assert!(verify_password(&h, "s3cret"));
        assert!(!verify_password(&h, "s3cret "));
        assert!(!verify_password("", ""));
        assert!(!verify_password("not base64!", "x"));
        let a = hash_password("pw").unwrap();
        let b = hash_password("pw").unwrap();
        assert_ne!(a, b, "a fresh salt each time");
        assert!(verify_password(&a, "pw") && verify_password(&b, "pw"));
    }

    #[test]
    fn a_rabbitmq_exported_sha256_hash_verifies() {
        assert!(verify_password(RABBITMQ_GUEST_HASH, "guest"));
        assert!(!verify_password(RABBITMQ_GUEST_HASH, "Guest"));
    }

    fn registry() -> (Broker, UserRegistry) {
        let mut b = Broker::new();
        b.handle(
            Command::UserPut {
                name: "u".into(),
                password_hash: hash_password_with_salt([9, 9, 9, 9], "pw"),
                tags: vec!["management".into()],
            },
            0,
        )
        .unwrap();
        b.handle(
            Command::PermissionSet {
                user: "u".into(),
                vhost: "/".into(),
                configure: "^app\\.".into(),
                write: "^amq\\.default$".into(),
                read: String::new(),
            },
            0,
        )
        .unwrap();
        let r = UserRegistry::new(["local".to_owned()]);
        r.refresh(&b);
        (b, r)
    }

    #[test]
    fn check_returns_tags_and_refuses_wrong_passwords_and_far_loopback_users() {
        let (mut b, r) = registry();
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let far: SocketAddr = "10.0.0.1:1".parse().unwrap();
        assert_eq!(r.check("u", "pw", far).unwrap().tags, ["management"]);
        assert_eq!(r.check("u", "no", local).unwrap_err(), login_refused());
        assert_eq!(r.check("x", "pw", local).unwrap_err(), login_refused());
        b.handle(
            Command::UserPut {
                name: "local".into(),
                password_hash: hash_password_with_salt([0; 4], "pw"),
                tags: Vec::new(),
            },
            0,
        )
        .unwrap();
        r.refresh(&b);
        assert!(r.check("local", "pw", local).is_ok());
        assert_eq!(
            r.check("local", "pw", far).unwrap_err(),
            "user 'local' can only connect via localhost"
        );
    }

    #[test]
    fn queue_declare_needs_configure_and_dlx_write_with_rabbitmq_text() {
        let (_, r) = registry();
        let mut cache = PermissionCache::default();
        let mut declare = QueueDeclare {
            vhost: "/".into(),
            queue: "app.q".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
            owner: None,
        };
        let cmd = Command::QueueDeclare(declare.clone());
        assert!(
            cache
                .authorize(&r, "u", "/", &required_permissions(&cmd))
                .is_ok()
        );
        declare
            .arguments
            .insert("x-dead-letter-exchange", Value::LongStr(b"dlx".to_vec()));
        let cmd = Command::QueueDeclare(declare.clone());
        let e = cache
            .authorize(&r, "u", "/", &required_permissions(&cmd))
            .unwrap_err();
        assert_eq!(
            e,
            "read access to queue 'app.q' in vhost '/' refused for user 'u'"
        );
        declare.queue = "other".into();
        declare.passive = true;
        let cmd = Command::QueueDeclare(declare);
        assert!(required_permissions(&cmd).is_empty(), "passive: no check");
    }

    #[test]
    fn the_default_exchange_is_checked_as_amq_default() {
        let (_, r) = registry();
        let mut cache = PermissionCache::default();
        let p = Publish {
            vhost: "/".into(),
            exchange: String::new(),
            routing_key: "k".into(),
            mandatory: false,
            properties: wharf_broker::Properties::default(),
            body: bytes::Bytes::new(),
        };
        assert!(
            cache
                .authorize(&r, "u", "/", &publish_permissions(&p))
                .is_ok()
        );
        let p = Publish {
            exchange: "amq.topic".into(),
            ..p
        };
        assert_eq!(
            cache
                .authorize(&r, "u", "/", &publish_permissions(&p))
                .unwrap_err(),
            "write access to exchange 'amq.topic' in vhost '/' refused for user 'u'"
        );
        assert_eq!(
            cache.authorize_publish(&r, "u", "/", "amq.topic"),
            cache.authorize(&r, "u", "/", &publish_permissions(&p))
        );
    }

    #[test]
    fn a_refresh_invalidates_cached_decisions() {
        let (mut b, r) = registry();
        let mut cache = PermissionCache::default();
        let get = Command::Get {
            chan: wharf_broker::ChanRef::new(1, 1),
            queue: "q".into(),
            no_ack: true,
        };
        let needs = required_permissions(&get);
        assert!(
            cache.authorize(&r, "u", "/", &needs).is_err(),
            "empty read regex"
        );
        b.handle(
            Command::PermissionSet {
                user: "u".into(),
                vhost: "/".into(),
                configure: String::new(),
                write: String::new(),
                read: ".*".into(),
            },
            0,
        )
        .unwrap();
        assert!(
            cache.authorize(&r, "u", "/", &needs).is_err(),
            "not refreshed yet"
        );
        r.refresh(&b);
        assert!(cache.authorize(&r, "u", "/", &needs).is_ok());
    }
}
