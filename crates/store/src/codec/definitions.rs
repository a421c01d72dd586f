//! The records of definitions (storage-format.md, "Store records"): virtual hosts,
//! exchanges, queues, bindings, policies, users, permissions and topic permissions, each
//! encoder next to its decoder. Every record but a user's starts with its vhost, which the
//! caller reads first.

use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use super::kind::RecordKind;
use super::value::{get_table, put_table};
use wharf_broker::{ApplyTo, DelayedType, DestName, Event, ExchangeKind, PolicySpec};

// Flag bits, one per boolean field, so an unknown bit is detectable.
const FLAG_AUTO_DELETE: u8 = 1 << 0;
const FLAG_INTERNAL: u8 = 1 << 1;

/// Appends the payload of a definition event (every event but the message events).
pub(super) fn put_definition(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::VhostAdded { vhost } | Event::VhostDeleted { vhost } => e.name("vhost", vhost),
        Event::ExchangeDeclared { .. } | Event::QueueDeclared { .. } => put_declared(e, event),
        Event::ExchangeDeleted {
            vhost,
            exchange: name,
        }
        | Event::QueueDeleted { vhost, queue: name } => {
            e.name("vhost", vhost)?;
            e.name("name", name)
        }
        Event::Bound { .. } | Event::Unbound { .. } => put_binding(e, event),
        Event::PolicySet { .. } | Event::PolicyCleared { .. } => put_policy(e, event),
        Event::UserPut { .. }
        | Event::UserDeleted { .. }
        | Event::PermissionSet { .. }
        | Event::PermissionCleared { .. }
        | Event::TopicPermissionSet { .. }
        | Event::TopicPermissionCleared { .. } => put_access(e, event),
        _ => unreachable!("encode_event sends only definitions here"),
    }
}

/// Decodes the rest of a definition record of kind `k` (not a user's) after its vhost.
pub(super) fn get_definition(
    d: &mut Dec<'_>,
    k: RecordKind,
    vhost: String,
) -> Result<Event, DecodeError> {
    Ok(match k {
        RecordKind::PermissionSet => Event::PermissionSet {
            user: d.name("user")?,
            vhost,
            configure: d.text("configure regex")?,
            write: d.text("write regex")?,
            read: d.text("read regex")?,
        },
        RecordKind::PermissionCleared => Event::PermissionCleared {
            user: d.name("user")?,
            vhost,
        },
        RecordKind::TopicPermissionSet => Event::TopicPermissionSet {
            user: d.name("user")?,
            vhost,
            exchange: d.name("exchange")?,
            write: d.text("write regex")?,
            read: d.text("read regex")?,
        },
        RecordKind::TopicPermissionCleared => Event::TopicPermissionCleared {
            user: d.name("user")?,
            vhost,
            exchange: d.name("exchange")?,
        },
        RecordKind::VhostAdded => Event::VhostAdded { vhost },
        RecordKind::VhostDeleted => Event::VhostDeleted { vhost },
        RecordKind::ExchangeDeclared => get_exchange_declared(d, vhost)?,
        RecordKind::QueueDeclared => {
            let queue = d.name("queue")?;
            let flags = d.flags(FLAG_AUTO_DELETE, "queue flags")?;
            Event::QueueDeclared {
                vhost,
                queue,
                auto_delete: flags & FLAG_AUTO_DELETE != 0,
                arguments: get_table(d, 1)?,
            }
        }
        RecordKind::ExchangeDeleted => Event::ExchangeDeleted {
            vhost,
            exchange: d.name("name")?,
        },
        RecordKind::QueueDeleted => Event::QueueDeleted {
            vhost,
            queue: d.name("name")?,
        },
        RecordKind::Bound | RecordKind::Unbound => get_binding(d, k, vhost)?,
        RecordKind::PolicySet | RecordKind::PolicyCleared => get_policy(d, k, vhost)?,
        _ => unreachable!("decode sends only definitions with a vhost here"),
    })
}

fn put_binding(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    let (Event::Bound {
        vhost,
        source,
        destination,
        routing_key,
        arguments,
    }
    | Event::Unbound {
        vhost,
        source,
        destination,
        routing_key,
        arguments,
    }) = event
    else {
        unreachable!("put_definition sends only bindings here")
    };
    e.name("vhost", vhost)?;
    e.name("source", source)?;
    put_dest(e, destination)?;
    e.name("routing key", routing_key)?;
    put_table(e, arguments, 1)
}

fn get_binding(d: &mut Dec<'_>, k: RecordKind, vhost: String) -> Result<Event, DecodeError> {
    let source = d.name("source")?;
    let destination = get_dest(d)?;
    let routing_key = d.name("routing key")?;
    let arguments = get_table(d, 1)?;
    Ok(if k == RecordKind::Bound {
        Event::Bound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        }
    } else {
        Event::Unbound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        }
    })
}

/// Users and permissions (format 2) and topic permissions (format 3). User records carry no
/// vhost; permission records start with theirs, like every other record.
fn put_access(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::UserPut {
            name,
            password_hash,
            tags,
        } => {
            e.name("user", name)?;
            e.bytes32("password hash", password_hash.as_bytes())?;
            e.names("tag", tags)
        }
        Event::UserDeleted { name } => e.name("user", name),
        Event::PermissionSet {
            user,
            vhost,
            configure,
            write,
            read,
        } => {
            e.name("vhost", vhost)?;
            e.name("user", user)?;
            e.bytes32("configure regex", configure.as_bytes())?;
            e.bytes32("write regex", write.as_bytes())?;
            e.bytes32("read regex", read.as_bytes())
        }
        Event::PermissionCleared { user, vhost } => {
            e.name("vhost", vhost)?;
            e.name("user", user)
        }
        Event::TopicPermissionSet {
            user,
            vhost,
            exchange,
            write,
            read,
        } => {
            e.name("vhost", vhost)?;
            e.name("user", user)?;
            e.name("exchange", exchange)?;
            e.bytes32("write regex", write.as_bytes())?;
            e.bytes32("read regex", read.as_bytes())
        }
        Event::TopicPermissionCleared {
            user,
            vhost,
            exchange,
        } => {
            e.name("vhost", vhost)?;
            e.name("user", user)?;
            e.name("exchange", exchange)
        }
        _ => unreachable!("encode_event sends only users and permissions here"),
    }
}

pub(super) fn get_user_event(d: &mut Dec<'_>, k: RecordKind) -> Result<Event, DecodeError> {
    let name = d.name("user")?;
    Ok(match k {
        RecordKind::UserPut => Event::UserPut {
            name,
            password_hash: d.text("password hash")?,
            tags: d.names("tag")?,
        },
        _ => Event::UserDeleted { name },
    })
}

fn put_declared(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::ExchangeDeclared {
            vhost,
            exchange,
            kind,
            auto_delete,
            internal,
            arguments,
        } => {
            e.name("vhost", vhost)?;
            e.name("exchange", exchange)?;
            e.u8(exchange_kind_byte(*kind));
            let flags = if *auto_delete { FLAG_AUTO_DELETE } else { 0 }
                | if *internal { FLAG_INTERNAL } else { 0 };
            e.u8(flags);
            put_table(e, arguments, 1)
        }
        Event::QueueDeclared {
            vhost,
            queue,
            auto_delete,
            arguments,
        } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.u8(if *auto_delete { FLAG_AUTO_DELETE } else { 0 });
            put_table(e, arguments, 1)
        }
        _ => unreachable!("encode_event sends only declarations here"),
    }
}

fn put_policy(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::PolicySet {
            vhost,
            policy,
            operator,
        } => {
            e.name("vhost", vhost)?;
            e.bool(*operator);
            e.name("policy name", &policy.name)?;
            e.bytes32("policy pattern", policy.pattern.as_bytes())?;
            e.u8(apply_to_byte(policy.apply_to));
            e.u32(policy.priority.cast_unsigned());
            e.bytes32("policy definition", policy.definition.as_bytes())
        }
        Event::PolicyCleared {
            vhost,
            name,
            operator,
        } => {
            e.name("vhost", vhost)?;
            e.bool(*operator);
            e.name("policy name", name)
        }
        _ => unreachable!("encode_event sends only policies here"),
    }
}

fn get_exchange_declared(d: &mut Dec<'_>, vhost: String) -> Result<Event, DecodeError> {
    let exchange = d.name("exchange")?;
    let kind = d.u8("exchange type")?;
    let kind = exchange_kind_of(kind).ok_or_else(|| d.err("unknown exchange type"))?;
    let flags = d.flags(FLAG_AUTO_DELETE | FLAG_INTERNAL, "exchange flags")?;
    Ok(Event::ExchangeDeclared {
        vhost,
        exchange,
        kind,
        auto_delete: flags & FLAG_AUTO_DELETE != 0,
        internal: flags & FLAG_INTERNAL != 0,
        arguments: get_table(d, 1)?,
    })
}

fn get_policy(d: &mut Dec<'_>, k: RecordKind, vhost: String) -> Result<Event, DecodeError> {
    let operator = d.bool("operator flag")?;
    let name = d.name("policy name")?;
    if k == RecordKind::PolicyCleared {
        return Ok(Event::PolicyCleared {
            vhost,
            name,
            operator,
        });
    }
    let pattern = d.text("policy pattern")?;
    let apply_to = d.u8("apply-to")?;
    let apply_to = apply_to_of(apply_to).ok_or_else(|| d.err("unknown apply-to"))?;
    let priority = d.u32("policy priority")?.cast_signed();
    let definition = d.text("policy definition")?;
    Ok(Event::PolicySet {
        vhost,
        policy: PolicySpec {
            name,
            pattern,
            apply_to,
            priority,
            definition,
        },
        operator,
    })
}

// ----- small enums (storage-format.md, "Enumerations") -----

fn exchange_kind_byte(k: ExchangeKind) -> u8 {
    match k {
        ExchangeKind::Direct => 0,
        ExchangeKind::Fanout => 1,
        ExchangeKind::Topic => 2,
        ExchangeKind::Headers => 3,
        ExchangeKind::Delayed(DelayedType::Direct) => 4,
        ExchangeKind::Delayed(DelayedType::Fanout) => 5,
        ExchangeKind::Delayed(DelayedType::Topic) => 6,
        ExchangeKind::Delayed(DelayedType::Headers) => 7,
    }
}

fn exchange_kind_of(b: u8) -> Option<ExchangeKind> {
    Some(match b {
        0 => ExchangeKind::Direct,
        1 => ExchangeKind::Fanout,
        2 => ExchangeKind::Topic,
        3 => ExchangeKind::Headers,
        4 => ExchangeKind::Delayed(DelayedType::Direct),
        5 => ExchangeKind::Delayed(DelayedType::Fanout),
        6 => ExchangeKind::Delayed(DelayedType::Topic),
        7 => ExchangeKind::Delayed(DelayedType::Headers),
        _ => return None,
    })
}

fn apply_to_byte(a: ApplyTo) -> u8 {
    match a {
        ApplyTo::Queues => 0,
        ApplyTo::Exchanges => 1,
        ApplyTo::All => 2,
    }
}

fn apply_to_of(b: u8) -> Option<ApplyTo> {
    Some(match b {
        0 => ApplyTo::Queues,
        1 => ApplyTo::Exchanges,
        2 => ApplyTo::All,
        _ => return None,
    })
}

fn put_dest(e: &mut Enc<'_>, dest: &DestName) -> Result<(), EncodeError> {
    match dest {
        DestName::Queue(q) => {
            e.u8(0);
            e.name("destination queue", q)
        }
        DestName::Exchange(x) => {
            e.u8(1);
            e.name("destination exchange", x)
        }
    }
}

fn get_dest(d: &mut Dec<'_>) -> Result<DestName, DecodeError> {
    match d.u8("destination type")? {
        0 => Ok(DestName::Queue(d.name("destination queue")?)),
        1 => Ok(DestName::Exchange(d.name("destination exchange")?)),
        _ => Err(d.err("unknown destination type")),
    }
}
