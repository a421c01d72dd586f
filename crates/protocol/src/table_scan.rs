//! A non-recursive pre-scan that measures how deeply the field tables of a method or content
//! header payload nest, so that nesting beyond `limits::FIELD_TABLE_DEPTH_MAX` is refused
//! before a recursive parser sees it: amq-protocol's for method arguments, ours
//! (`properties`, which reads tables the same way) for content headers and standalone tables.
//! A 128 KiB frame can hold ~26 000 nested arrays, five octets each, which would overflow any
//! thread's stack.
//!
//! The scan reads the bytes exactly as amq-protocol's `parse_field_table` does (same type tags,
//! same sizes, each container bounded by its own length) and stops where that parser would stop
//! at the first malformed element, reporting "shallow enough": the parser then refuses the frame
//! itself, having recursed no deeper than the scan did. Where the scan cannot tell (a short
//! string that is not UTF-8, which the parser refuses), it goes on, so it is conservative: it
//! may refuse a frame the parser would also refuse, never accept one the parser would recurse
//! too deeply on. Pure functions over `&[u8]`; no allocation beyond a stack of at most
//! `depth_max` container ends.

/// Where a table sits inside a method's arguments: the fields before it, in order.
#[derive(Clone, Copy)]
enum Skip {
    /// A fixed number of octets (shorts, octets, packed bits).
    Octets(usize),
    /// A short string: one length octet, then that many octets.
    ShortStr,
}

/// The methods of AMQP 0-9-1 that carry a field table, with the fields before the table, as in
/// amq-protocol's generated parsers. A test in this file checks the list against amq-protocol's
/// generator, method by method.
fn fields_before_table(class_id: u16, method_id: u16) -> Option<&'static [Skip]> {
    use Skip::{Octets, ShortStr};
    let fields: &'static [Skip] = match (class_id, method_id) {
        // connection.start: version-major, version-minor, server-properties, ...
        (10, 10) => &[Octets(2)],
        // connection.start-ok: client-properties, ...
        (10, 11) => &[],
        // exchange.declare: reserved-1, exchange, type, 5 bits, arguments
        // basic.consume: reserved-1, queue, consumer-tag, 4 bits, arguments
        (40, 10) | (60, 20) => &[Octets(2), ShortStr, ShortStr, Octets(1)],
        // exchange.bind / exchange.unbind: reserved-1, destination, source, routing-key, no-wait
        // queue.bind: reserved-1, queue, exchange, routing-key, no-wait
        (40, 30 | 40) | (50, 20) => &[Octets(2), ShortStr, ShortStr, ShortStr, Octets(1)],
        // queue.declare: reserved-1, queue, 5 bits, arguments
        (50, 10) => &[Octets(2), ShortStr, Octets(1)],
        // queue.unbind: reserved-1, queue, exchange, routing-key, arguments (no no-wait bit)
        (50, 50) => &[Octets(2), ShortStr, ShortStr, ShortStr],
        _ => return None,
    };
    Some(fields)
}

/// The result of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Nesting stays within the limit (or the payload is malformed before it could exceed it;
    /// the parser will refuse it).
    WithinLimit,
    /// A table or array is nested deeper than the limit.
    TooDeep,
}

/// Scans the arguments of a method (the payload after class id and method id).
pub(crate) fn scan_method_arguments(
    class_id: u16,
    method_id: u16,
    arguments: &[u8],
    depth_max: usize,
) -> Depth {
    let Some(fields) = fields_before_table(class_id, method_id) else {
        return Depth::WithinLimit;
    };
    match skip_fields(arguments, fields) {
        Some(offset) => scan_table_at(arguments, offset, depth_max),
        None => Depth::WithinLimit,
    }
}

/// Scans a content header payload (class id, weight, body size, property flags, properties):
/// only the `headers` property (flag bit 13) is a table; `content-type` (bit 15) and
/// `content-encoding` (bit 14) come before it.
pub(crate) fn scan_content_header(payload: &[u8], depth_max: usize) -> Depth {
    const FLAGS_OFFSET: usize = 2 + 2 + 8;
    let Some(flags) = read_u16(payload, FLAGS_OFFSET) else {
        return Depth::WithinLimit;
    };
    if flags & (1 << 13) == 0 {
        return Depth::WithinLimit;
    }
    let mut fields: [Skip; 3] = [
        Skip::Octets(FLAGS_OFFSET + 2),
        Skip::Octets(0),
        Skip::Octets(0),
    ];
    if flags & (1 << 15) != 0 {
        fields[1] = Skip::ShortStr;
    }
    if flags & (1 << 14) != 0 {
        fields[2] = Skip::ShortStr;
    }
    match skip_fields(payload, &fields) {
        Some(offset) => scan_table_at(payload, offset, depth_max),
        None => Depth::WithinLimit,
    }
}

/// Offset just after `fields`, or `None` when the payload ends first.
fn skip_fields(bytes: &[u8], fields: &[Skip]) -> Option<usize> {
    let mut offset = 0usize;
    for field in fields {
        let len = match field {
            Skip::Octets(n) => *n,
            Skip::ShortStr => 1 + usize::from(*bytes.get(offset)?),
        };
        offset = offset.checked_add(len)?;
    }
    (offset <= bytes.len()).then_some(offset)
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(b.try_into().ok()?))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    usize::try_from(u32::from_be_bytes(b.try_into().ok()?)).ok()
}

/// Kind of an open container: tables have a short-string key before each value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Table,
    Array,
}

/// Size in octets of a value of a fixed-size type, after its tag; `None` for variable-size and
/// unknown tags. Same type table as amq-protocol's `AMQPType::from_id` (RabbitMQ's reading).
fn fixed_size(tag: u8) -> Option<usize> {
    Some(match tag {
        b'V' => 0,
        b't' | b'b' | b'B' => 1,
        b's' | b'U' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'D' => 5,
        b'L' | b'l' | b'd' | b'T' => 8,
        _ => return None,
    })
}

/// Walks the table whose 4-octet length sits at `bytes[start]`, with an explicit stack of open
/// containers instead of recursion. Each element is visited once: O(len) time.
pub(crate) fn scan_table_at(bytes: &[u8], start: usize, depth_max: usize) -> Depth {
    let Some(len) = read_u32(bytes, start) else {
        return Depth::WithinLimit;
    };
    let Some(end) = start.checked_add(4).and_then(|s| s.checked_add(len)) else {
        return Depth::WithinLimit;
    };
    if end > bytes.len() || depth_max == 0 {
        return if end > bytes.len() {
            Depth::WithinLimit
        } else {
            Depth::TooDeep
        };
    }
    // (end offset, kind) of each open container; its length is the current depth.
    let mut open: Vec<(usize, Container)> = Vec::with_capacity(depth_max);
    open.push((end, Container::Table));
    let mut pos = start + 4;
    while let Some(&(end, kind)) = open.last() {
        if pos == end {
            open.pop();
            continue;
        }
        match step(bytes, pos, end, kind) {
            Step::Next(next) => pos = next,
            Step::Open(inner_end, inner_kind, next) => {
                if open.len() == depth_max {
                    return Depth::TooDeep;
                }
                open.push((inner_end, inner_kind));
                pos = next;
            }
            Step::Malformed => return Depth::WithinLimit,
        }
    }
    Depth::WithinLimit
}

/// What one element of a container turned out to be.
enum Step {
    /// A scalar, string or byte array; continue at this offset.
    Next(usize),
    /// A nested container ending at `.0`, of kind `.1`, whose elements start at `.2`.
    Open(usize, Container, usize),
    /// The element does not fit or has an unknown tag: the parser stops here too.
    Malformed,
}

/// Reads one element (key and value for tables, value for arrays) at `pos`, which is `< end`.
fn step(bytes: &[u8], mut pos: usize, end: usize, kind: Container) -> Step {
    let within = |p: usize| bytes.get(..end).and_then(|b| b.get(p)).copied();
    if kind == Container::Table {
        let Some(key_len) = within(pos) else {
            return Step::Malformed;
        };
        pos += 1 + usize::from(key_len);
    }
    let Some(tag) = within(pos) else {
        return Step::Malformed;
    };
    pos += 1;
    let next = if let Some(size) = fixed_size(tag) {
        pos + size
    } else {
        let Some(len) = read_u32(bytes, pos) else {
            return Step::Malformed;
        };
        let Some(after) = (pos + 4).checked_add(len) else {
            return Step::Malformed;
        };
        if after > end {
            return Step::Malformed;
        }
        match tag {
            b'S' | b'x' => after,
            b'F' => return Step::Open(after, Container::Table, pos + 4),
            b'A' => return Step::Open(after, Container::Array, pos + 4),
            _ => return Step::Malformed,
        }
    };
    if next > end {
        Step::Malformed
    } else {
        Step::Next(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table holding `levels - 1` arrays nested inside each other (total depth `levels`).
    fn nested_arrays(levels: usize) -> Vec<u8> {
        // Build from the inside out: an empty array is 'A' + len 0.
        let mut inner: Vec<u8> = Vec::new();
        for _ in 1..levels {
            let mut outer = vec![b'A'];
            outer.extend_from_slice(&u32::try_from(inner.len()).unwrap().to_be_bytes());
            outer.extend_from_slice(&inner);
            inner = outer;
        }
        // The top-level table holds one entry "k" -> inner (or nothing if levels == 1).
        let mut entries = Vec::new();
        if levels > 1 {
            entries.extend_from_slice(&[1, b'k']);
            entries.extend_from_slice(&inner);
        }
        let mut table = u32::try_from(entries.len()).unwrap().to_be_bytes().to_vec();
        table.extend_from_slice(&entries);
        table
    }

    #[test]
    fn depth_is_counted_from_the_top_level_table() {
        for depth in 1..=20 {
            let t = nested_arrays(depth);
            let want = if depth <= 16 {
                Depth::WithinLimit
            } else {
                Depth::TooDeep
            };
            assert_eq!(scan_table_at(&t, 0, 16), want, "depth {depth}");
        }
    }

    #[test]
    fn a_frame_full_of_nesting_is_refused_quickly() {
        let t = nested_arrays(26_000);
        assert!(t.len() < 132_000);
        assert_eq!(scan_table_at(&t, 0, 16), Depth::TooDeep);
    }

    #[test]
    fn truncated_tables_are_left_to_the_parser() {
        let t = nested_arrays(30);
        for cut in 0..t.len() {
            // A cut table is malformed; the scan must not read out of bounds or loop.
            let _ = scan_table_at(&t[..cut], 0, 16);
        }
    }
}
