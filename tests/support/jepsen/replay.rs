//! Reading a written history back (the file a failed run keeps, `history.txt`: one
//! [`Event`] a line as its `Display` writes it), so a kept history can be checked again by
//! the current checker (`cargo test --test process jepsen_history_again -- --ignored` with
//! `WHARF_JEPSEN_HISTORY=<path>`). Depends on std.

use super::history::{Event, Msg, Op, Queue, Settle};

/// The text after `key` (e.g. `"conn: "`) in `s`, up to the next `,`, ` ` or `}`.
fn word<'a>(s: &'a str, key: &str) -> Result<&'a str, String> {
    let at = s.find(key).ok_or_else(|| format!("no `{key}` in {s:?}"))? + key.len();
    let rest = &s[at..];
    let end = rest.find([',', ' ', '}']).unwrap_or(rest.len());
    Ok(&rest[..end])
}

fn number(s: &str, key: &str) -> Result<u64, String> {
    let w = word(s, key)?;
    w.parse().map_err(|_| format!("`{key}{w}` is not a number"))
}

fn flag(s: &str, key: &str) -> Result<bool, String> {
    match word(s, key)? {
        "true" => Ok(true),
        "false" => Ok(false),
        w => Err(format!("`{key}{w}` is not a bool")),
    }
}

/// A string field as `Debug` writes it (quoted, `\"` and `\\` escaped).
fn text(s: &str, key: &str) -> Result<String, String> {
    let at = s.find(key).ok_or_else(|| format!("no `{key}` in {s:?}"))? + key.len();
    let mut chars = s[at..].chars();
    if chars.next() != Some('"') {
        return Err(format!("`{key}` is not a string in {s:?}"));
    }
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(out),
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(e) => out.push(e),
                None => break,
            },
            c => out.push(c),
        }
    }
    Err(format!("an unterminated string in {s:?}"))
}

fn msg(s: &str) -> Result<Msg, String> {
    let seq = number(s, "seq: ")?;
    let publisher = number(s, "publisher: ")?;
    Ok(Msg {
        publisher: u32::try_from(publisher).map_err(|e| e.to_string())?,
        seq,
    })
}

fn queue(s: &str) -> Result<Queue, String> {
    match word(s, "queue: ")? {
        "Source" => Ok(Queue::Source),
        "Dead" => Ok(Queue::Dead),
        w => Err(format!("no queue {w:?}")),
    }
}

/// One line of a written history.
pub fn parse_event(line: &str) -> Result<Event, String> {
    let mut parts = line.split_whitespace();
    let (Some(time), Some(client), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("a short line: {line:?}"));
    };
    let (secs, micros) = time
        .split_once('.')
        .ok_or_else(|| format!("no time in {line:?}"))?;
    let at_us = secs.parse::<u64>().map_err(|e| e.to_string())? * 1_000_000
        + micros.parse::<u64>().map_err(|e| e.to_string())?;
    let body = &line[line
        .find(" {")
        .ok_or_else(|| format!("no fields in {line:?}"))?..];
    let conn = || number(body, "conn: ");
    let op = match name {
        "Open" => Op::Open {
            conn: conn()?,
            node: number(body, "node: ")?,
        },
        "Closed" => Op::Closed {
            conn: conn()?,
            why: text(body, "why: ")?,
        },
        "Publish" => Op::Publish {
            conn: conn()?,
            msg: msg(body)?,
        },
        "Confirm" => Op::Confirm {
            conn: conn()?,
            msg: msg(body)?,
            ack: flag(body, "ack: ")?,
        },
        "Deliver" => Op::Deliver {
            conn: conn()?,
            queue: queue(body)?,
            body: text(body, "body: ")?,
            redelivered: flag(body, "redelivered: ")?,
        },
        "Settle" => Op::Settle {
            conn: conn()?,
            queue: queue(body)?,
            msg: msg(body)?,
            how: match word(body, "how: ")? {
                "Ack" => Settle::Ack,
                "Reject" => Settle::Reject,
                w => return Err(format!("no settlement {w:?}")),
            },
        },
        "Synced" => Op::Synced { conn: conn()? },
        "Nemesis" => Op::Nemesis {
            what: text(body, "what: ")?,
        },
        other => return Err(format!("no operation {other:?} in {line:?}")),
    };
    Ok(Event {
        at_us,
        client: client.to_owned(),
        op,
    })
}
