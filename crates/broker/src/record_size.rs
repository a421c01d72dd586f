//! The default of the store's record-size rule ([`RecordSize`]), for a broker the store has
//! not handed its own (`Broker::set_record_size`): tests, or a broker without a log. It is the
//! store's rule, an upper bound of the size of the record that logs a message
//! (storage-format.md "Store records"), kept here so that a broker without a store refuses
//! what a logged one would; `wharf-store`'s `record_size.rs` holds the rule it installs, and
//! the two must agree.

use wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX;

use crate::types::{Message, Properties, RecordSize};
use crate::value::{FieldTable, Value};

/// The bound `wharf-store` uses, for a broker without a store.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DefaultRecordSize;

impl RecordSize for DefaultRecordSize {
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

/// An upper bound of the bytes the store's record encoding gives `p`
/// (storage-format.md "Properties": strings as a length and the bytes, tables as a count
/// and the entries), so that a message whose record could not fit the log is refused
/// before it changes anything.
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
