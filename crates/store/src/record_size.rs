//! The size rule of the one log record that holds a published message, handed to the broker
//! (`wharf_broker::RecordSize`, installed by `Store::open`), so that the broker refuses a
//! persistent message whose record could not fit the log before it changes anything
//! (S-DUR-3) instead of the log failing after the broker applied it.
//!
//! An upper bound of what `codec/` writes for a `Published` record (storage-format.md
//! "Store records", "Properties": strings as a length and the bytes, tables as a count and
//! the entries, 64 bytes for the fixed fields). This is the only copy of the rule: a change
//! of the encoding changes this file with it. A broker without a store (the broker's own
//! tests, tools) has no rule and logs nothing, so it bounds nothing.

use wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX;
use wharf_broker::{FieldTable, Message, Properties, RecordSize, Value};

/// The store's record-size rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageRecordSize;

impl RecordSize for MessageRecordSize {
    fn message_fits(
        &self,
        vhost: &str,
        message: &Message,
        queues: &mut dyn Iterator<Item = &str>,
    ) -> bool {
        let names: usize = queues.map(|q| 2 + q.len()).sum();
        let bound = 64
            + vhost.len()
            + message.exchange.len()
            + message.routing_key.len()
            + properties_bytes_bound(&message.properties)
            + message.body.len()
            + names;
        bound <= RECORD_PAYLOAD_BYTES_MAX
    }
}

/// An upper bound of the bytes the record encoding gives `p`.
fn properties_bytes_bound(p: &Properties) -> usize {
    let strings = [
        &p.content_type,
        &p.content_encoding,
        &p.correlation_id,
        &p.reply_to,
        &p.expiration,
        &p.message_id,
        &p.kind,
        &p.user_id,
        &p.app_id,
        &p.cluster_id,
    ];
    let text: usize = strings
        .iter()
        .filter_map(|s| s.as_ref())
        .map(|s| 4 + s.len())
        .sum();
    2 + 2 + 8 + text + p.headers.as_ref().map_or(0, table_bytes_bound)
}

fn table_bytes_bound(t: &FieldTable) -> usize {
    4 + t
        .iter()
        .map(|(k, v)| 2 + k.len() + value_bytes_bound(v))
        .sum::<usize>()
}

fn value_bytes_bound(v: &Value) -> usize {
    1 + match v {
        Value::ShortStr(s) => 4 + s.len(),
        Value::LongStr(b) | Value::Bytes(b) => 4 + b.len(),
        Value::Array(items) => 4 + items.iter().map(value_bytes_bound).sum::<usize>(),
        Value::Table(t) => table_bytes_bound(t),
        _ => 8,
    }
}
