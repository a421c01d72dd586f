//! One family's text: its samples ([`Labels`], [`Value`]) and [`family`], which writes them
//! with `prometheus-client`'s encoder. Shared by `families.rs` and `objects.rs`.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Labels of one sample, in order.
pub(super) type Labels = Vec<(&'static str, String)>;

/// A sample's value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value {
    Int(u64),
    Float(f64),
}

/// Writes one family: its `HELP` and `TYPE` lines, then its samples.
pub(super) fn family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels, Value)],
) -> fmt::Result {
    // The encoder appends `_total` to a counter's name, as the text format wants.
    let name = match kind {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let mut metric = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let mut m = metric.encode_family(labels)?;
        match (kind, *value) {
            (MetricType::Counter, Value::Int(v)) => {
                m.encode_counter::<NoLabelSet, _, u64>(&v, None)
            }
            (MetricType::Counter, Value::Float(v)) => {
                m.encode_counter::<NoLabelSet, _, u64>(&v, None)
            }
            (_, Value::Int(v)) => m.encode_gauge(&v),
            (_, Value::Float(v)) => m.encode_gauge(&v),
        }?;
    }
    Ok(())
}
