//! The records of message events (storage-format.md, "Store records"): publishes,
//! schedules, dead-letterings and the id-list events of a queue (settled, delivered, returned,
//! purged), each encoder next to its decoder. Every one starts with its vhost, which the
//! caller reads first; the ones that hold a message end with its Message part.

use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use super::kind::RecordKind;
use super::message::{get_message, put_message};
use wharf_broker::{DeathReason, Event, MessageId, SettleKind};

const FLAG_SCHEDULED: u8 = 1 << 0;
const FLAG_DL_FROM: u8 = 1 << 0;
const FLAG_DL_MESSAGE: u8 = 1 << 1;

/// Appends the payload of a message event: a publish, a schedule, a dead-lettering, or a
/// queue's id-list event (settled, delivered, returned, purged).
pub(super) fn put_message_event(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::Published {
            vhost,
            message,
            queues,
            scheduled,
        } => {
            e.name("vhost", vhost)?;
            match scheduled {
                Some(id) => {
                    e.u8(FLAG_SCHEDULED);
                    e.u64(id.0);
                }
                None => e.u8(0),
            }
            e.names("queue", queues)?;
            put_message(e, &message.message)
        }
        Event::Scheduled {
            vhost,
            exchange,
            message,
        } => {
            e.name("vhost", vhost)?;
            e.name("exchange", exchange)?;
            put_message(e, &message.message)
        }
        Event::Unscheduled { vhost, id } => {
            e.name("vhost", vhost)?;
            e.u64(id.0);
            Ok(())
        }
        Event::DeadLettered { .. } => put_dead_lettered(e, event),
        Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.u8(settle_kind_byte(*kind));
            e.ids(ids)
        }
        Event::Delivered { vhost, queue, ids }
        | Event::Returned { vhost, queue, ids }
        | Event::Purged { vhost, queue, ids } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.ids(ids)
        }
        Event::DeadLetterHeld {
            vhost,
            queue,
            reason,
            at_ms,
            ids,
        } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.u8(death_reason_byte(*reason));
            e.u64(*at_ms);
            e.ids(ids)
        }
        _ => unreachable!("encode_event sends only message events here"),
    }
}

/// A `DeadLettered` payload: flags, the source queue, the message's id there, the targets,
/// and the message copy when the record carries one.
fn put_dead_lettered(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    let Event::DeadLettered {
        vhost,
        from,
        id,
        message,
        targets,
    } = event
    else {
        unreachable!("put_message_event sends only dead-letterings here")
    };
    e.name("vhost", vhost)?;
    let flags = if from.is_some() { FLAG_DL_FROM } else { 0 }
        | if message.is_some() {
            FLAG_DL_MESSAGE
        } else {
            0
        };
    e.u8(flags);
    if let Some(from) = from {
        e.name("source queue", from)?;
    }
    e.u64(id.0);
    e.names("target queue", targets)?;
    match message {
        Some(m) => put_message(e, &m.message),
        None => Ok(()),
    }
}

/// A `Published` payload after the vhost, up to its message: the schedule it ends and the
/// queues.
pub(super) fn get_published_head(
    d: &mut Dec<'_>,
) -> Result<(Option<MessageId>, Vec<String>), DecodeError> {
    let flags = d.flags(FLAG_SCHEDULED, "publish flags")?;
    let scheduled = if flags & FLAG_SCHEDULED != 0 {
        Some(MessageId(d.u64("scheduled id")?))
    } else {
        None
    };
    Ok((scheduled, d.names("queue")?))
}

/// A `DeadLettered` payload after the vhost, up to its message copy: whether there is one,
/// the source queue, the message's id there, the targets.
pub(super) fn get_dead_letter_head(
    d: &mut Dec<'_>,
) -> Result<(bool, Option<String>, MessageId, Vec<String>), DecodeError> {
    let flags = d.flags(FLAG_DL_FROM | FLAG_DL_MESSAGE, "dead-letter flags")?;
    let from = if flags & FLAG_DL_FROM != 0 {
        Some(d.name("source queue")?)
    } else {
        None
    };
    let id = MessageId(d.u64("message id")?);
    let targets = d.names("target queue")?;
    Ok((flags & FLAG_DL_MESSAGE != 0, from, id, targets))
}

/// Decodes the rest of a message event record of kind `k` after its vhost.
pub(super) fn get_message_event(
    d: &mut Dec<'_>,
    k: RecordKind,
    vhost: String,
) -> Result<Event, DecodeError> {
    Ok(match k {
        RecordKind::Published => {
            let (scheduled, queues) = get_published_head(d)?;
            Event::Published {
                vhost,
                message: get_message(d)?,
                queues,
                scheduled,
            }
        }
        RecordKind::Scheduled => Event::Scheduled {
            vhost,
            exchange: d.name("exchange")?,
            message: get_message(d)?,
        },
        RecordKind::Unscheduled => Event::Unscheduled {
            vhost,
            id: MessageId(d.u64("message id")?),
        },
        RecordKind::DeadLettered => {
            let (has_copy, from, id, targets) = get_dead_letter_head(d)?;
            let message = if has_copy {
                Some(get_message(d)?)
            } else {
                None
            };
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            }
        }
        RecordKind::Settled => {
            let queue = d.name("queue")?;
            let kind = d.u8("settle kind")?;
            let kind = settle_kind_of(kind).ok_or_else(|| d.err("unknown settle kind"))?;
            Event::Settled {
                vhost,
                queue,
                ids: d.ids()?,
                kind,
            }
        }
        RecordKind::DeadLetterHeld => {
            let queue = d.name("queue")?;
            let reason = d.u8("death reason")?;
            let reason = death_reason_of(reason).ok_or_else(|| d.err("unknown death reason"))?;
            Event::DeadLetterHeld {
                vhost,
                queue,
                reason,
                at_ms: d.u64("death time")?,
                ids: d.ids()?,
            }
        }
        RecordKind::Delivered | RecordKind::Returned | RecordKind::Purged => {
            let queue = d.name("queue")?;
            let ids = d.ids()?;
            match k {
                RecordKind::Delivered => Event::Delivered { vhost, queue, ids },
                RecordKind::Returned => Event::Returned { vhost, queue, ids },
                _ => Event::Purged { vhost, queue, ids },
            }
        }
        _ => unreachable!("decode sends only message events here"),
    })
}

fn settle_kind_byte(k: SettleKind) -> u8 {
    match k {
        SettleKind::Ack => 0,
        SettleKind::Expire => 1,
        SettleKind::Discard => 2,
    }
}

fn settle_kind_of(b: u8) -> Option<SettleKind> {
    Some(match b {
        0 => SettleKind::Ack,
        1 => SettleKind::Expire,
        2 => SettleKind::Discard,
        _ => return None,
    })
}

/// A death reason's byte (`DeadLetterHeld`, and a held placement of `Carried`).
pub(super) fn death_reason_byte(r: DeathReason) -> u8 {
    match r {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::Maxlen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

/// The death reason a byte names.
pub(super) fn death_reason_of(b: u8) -> Option<DeathReason> {
    Some(match b {
        0 => DeathReason::Rejected,
        1 => DeathReason::Expired,
        2 => DeathReason::Maxlen,
        3 => DeathReason::DeliveryLimit,
        _ => return None,
    })
}
