//! Searching a queue while browsing it (S-UI-22): the ready messages whose message id,
//! correlation id or one header equals a given text, in delivery order, found by a bounded
//! scan that a caller continues from where the last one stopped. Read-only, as browsing is
//! (S-UI-1): paged-out content is read into the answer only (S-UI-2).

use super::Broker;
use super::browse::{BrowsedMessage, browsed};
use crate::types::Message;
use crate::value::Value;

/// What a search looks for: one field equal to a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageMatch {
    /// The `message-id` property.
    MessageId(String),
    /// The `correlation-id` property.
    CorrelationId(String),
    /// A header `name` whose value, as text, is `value` (strings as they are, integers in
    /// decimal, booleans `true` / `false`).
    Header {
        /// The header's name.
        name: String,
        /// Its value as text.
        value: String,
    },
}

impl MessageMatch {
    /// Whether `m` matches.
    pub fn matches(&self, m: &Message) -> bool {
        let p = &m.properties;
        match self {
            MessageMatch::MessageId(id) => p.message_id.as_deref() == Some(id.as_str()),
            MessageMatch::CorrelationId(id) => p.correlation_id.as_deref() == Some(id.as_str()),
            MessageMatch::Header { name, value } => p
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .and_then(value_text)
                .is_some_and(|t| t == *value),
        }
    }
}

/// A header value as the text a search compares: strings, integers and booleans only.
fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::Bool(b) => Some(b.to_string()),
        Value::Timestamp(t) => Some(t.to_string()),
        _ => v
            .as_str()
            .map(str::to_owned)
            .or_else(|| v.as_integer().map(|i| i.to_string())),
    }
}

/// What one search step found ([`Broker::search`]).
#[derive(Debug, Clone)]
pub struct QueueSearch {
    /// The queue's ready messages when it was read.
    pub ready: u64,
    /// The matching messages found, in delivery order, each with its position.
    pub messages: Vec<BrowsedMessage>,
    /// The position the next step starts from: after the last message looked at.
    pub next: u64,
    /// Whether the scan reached the end of the queue.
    pub done: bool,
}

impl Broker {
    /// Looks at a queue's ready messages from position `from` on, in delivery order, and
    /// keeps those matching `what`, until `count` are found or `scan` messages were looked at
    /// (S-UI-22): the work per call is bounded by `scan`, and [`QueueSearch::next`] says where
    /// to continue. A message whose content cannot be read is not a match. `None` when there
    /// is no such queue.
    pub fn search(
        &self,
        vhost: &str,
        queue: &str,
        from: u64,
        count: usize,
        scan: usize,
        what: &MessageMatch,
    ) -> Option<QueueSearch> {
        let q = self.queue_named(vhost, queue)?;
        let ttl = q.ready.ttl_ms();
        let ready = u64::try_from(q.ready.len()).unwrap_or(u64::MAX);
        let skip = usize::try_from(from).unwrap_or(usize::MAX);
        let mut messages = Vec::new();
        let mut next = from;
        for ((m, e), position) in q.ready.iter_from(skip).take(scan).zip(from..) {
            next = position + 1;
            if let Ok(content) = self.read(m)
                && what.matches(&content)
            {
                messages.push(browsed(m, e, ttl, position, Ok(content)));
                if messages.len() >= count {
                    break;
                }
            }
        }
        Some(QueueSearch {
            ready,
            messages,
            next: next.max(from),
            done: next >= ready,
        })
    }
}
