//! The store's record codec: golden bytes (the same bytes as `storage-format.md`'s example),
//! decode(encode(e)) == e for generated events, and a decoder that never panics and never
//! accepts a second spelling of a record (arbitrary and mutated bytes).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use wharf_base::limits;
use wharf_broker::{
    ApplyTo, DeathReason, DelayedType, DestName, Event, ExchangeKind, HeldDeath, Message,
    MessageId, MessageRecord, Placement, PolicySpec, Properties, SettleKind,
};
use wharf_broker::{FieldTable, Value};
use wharf_store::codec::{
    self, EncodeError, RecordKind, STORE_FORMAT_VERSION, StoreRecord, decode, encode_event,
};

fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

fn encode(e: &Event) -> (u8, Vec<u8>) {
    let mut out = Vec::new();
    let kind = encode_event(e, &mut out).unwrap();
    (kind.byte(), out)
}

/// The example of `storage-format.md` ("Store records", "Example"). Keep both in step.
fn golden_published() -> Event {
    Event::Published {
        vhost: "/".into(),
        message: MessageRecord {
            message: Arc::new(Message {
                id: MessageId(7),
                enqueued_at_ms: 1_700_000_000_000,
                ttl_ms: Some(60_000),
                exchange: String::new(),
                routing_key: "q".into(),
                properties: Properties {
                    delivery_mode: Some(2),
                    expiration: Some("60000".into()),
                    ..Properties::default()
                },
                body: Bytes::from_static(b"hello"),
                stored: wharf_broker::StoredSlot::default(),
            }),
        },
        queues: vec!["q".into()],
        scheduled: None,
    }
}

const GOLDEN_PUBLISHED_HEX: &str = "
    01 00 2f
    00
    01 00 00 00  01 00 71
    07 00 00 00 00 00 00 00
    00 68 e5 cf 8b 01 00 00
    01  60 ea 00 00
    00 00
    01 00 71
    88 00  02  05 00 36 30 30 30 30
    05 00 00 00 68 65 6c 6c 6f";

#[test]
fn golden_published_record_matches_storage_format_md() {
    let (kind, bytes) = encode(&golden_published());
    assert_eq!(kind, 0x20);
    assert_eq!(bytes, hex(GOLDEN_PUBLISHED_HEX));
    assert_eq!(
        decode(kind, &bytes).unwrap(),
        StoreRecord::Event(golden_published())
    );
    // The document carries the same bytes: a change to either must change both.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../storage-format.md"
    ))
    .unwrap();
    let section = doc
        .split("## Store records")
        .nth(1)
        .expect("section present");
    let example = section
        .split("```text\nPublished, kind 0x20")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("hex example present");
    let doc_bytes: Vec<u8> = example
        .lines()
        .skip(1)
        .flat_map(|l| l.split('|').next().unwrap_or("").split_whitespace())
        .map(|b| u8::from_str_radix(b, 16).expect("hex byte"))
        .collect();
    assert_eq!(doc_bytes, bytes, "storage-format.md example differs");
}

/// S-BIG-3: the store logs a record holding a body as its head followed by the body by
/// reference, and the two together are exactly the record's documented bytes; a record
/// without a body is all head.
#[test]
fn s_big_3_a_record_with_its_body_left_out_is_the_same_bytes() {
    let event = golden_published();
    let mut head = Vec::new();
    let (kind, body) = wharf_store::codec::encode_event_leaving_body(&event, &mut head).unwrap();
    assert_eq!(kind.byte(), 0x20);
    assert_eq!(&body[..], b"hello");
    let Event::Published { message, .. } = &event else {
        unreachable!()
    };
    assert_eq!(body.as_ptr(), message.message.body.as_ptr(), "not copied");
    head.extend_from_slice(&body);
    assert_eq!(head, hex(GOLDEN_PUBLISHED_HEX));
    let vhost = Event::VhostAdded { vhost: "v".into() };
    let mut out = Vec::new();
    let (_, body) = wharf_store::codec::encode_event_leaving_body(&vhost, &mut out).unwrap();
    assert!(body.is_empty());
    assert_eq!(out, encode(&vhost).1);
}

/// The bytes of the `storage-format.md` example block that opens with `title`
/// ("Store records" section; `|` starts a comment).
fn doc_example(title: &str) -> Vec<u8> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../storage-format.md"
    ))
    .unwrap();
    let section = doc.split("## Store records").nth(1).unwrap();
    let example = section
        .split(&format!("```text\n{title}"))
        .nth(1)
        .and_then(|s| s.split("```").next())
        .unwrap_or_else(|| panic!("example {title} in storage-format.md"));
    example
        .lines()
        .skip(1)
        .flat_map(|l| l.split('|').next().unwrap_or("").split_whitespace())
        .map(|b| u8::from_str_radix(b, 16).expect("hex byte"))
        .collect()
}

#[test]
fn golden_user_put_and_permission_set_match_storage_format_md() {
    let user = Event::UserPut {
        name: "u".into(),
        password_hash: "aGFzaA==".into(),
        tags: vec!["management".into()],
    };
    let (kind, bytes) = encode(&user);
    assert_eq!(kind, 0x1a);
    assert_eq!(
        bytes,
        hex("01 00 75  08 00 00 00 61 47 46 7a 61 41 3d 3d
             01 00 00 00  0a 00 6d 61 6e 61 67 65 6d 65 6e 74")
    );
    assert_eq!(bytes, doc_example("UserPut, kind 0x1a"));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(user));

    let perm = Event::PermissionSet {
        user: "u".into(),
        vhost: "/".into(),
        configure: ".*".into(),
        write: ".*".into(),
        read: String::new(),
    };
    let (kind, bytes) = encode(&perm);
    assert_eq!(kind, 0x1c);
    assert_eq!(
        bytes,
        hex("01 00 2f  01 00 75  02 00 00 00 2e 2a  02 00 00 00 2e 2a  00 00 00 00")
    );
    assert_eq!(bytes, doc_example("PermissionSet, kind 0x1c"));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(perm));
}

/// S-TPERM-1: topic permissions are format-3 records (storage-format.md, version 3).
#[test]
fn golden_topic_permission_records_match_storage_format_md() {
    let set = Event::TopicPermissionSet {
        user: "u".into(),
        vhost: "/".into(),
        exchange: "x".into(),
        write: "^a.".into(),
        read: ".*".into(),
    };
    let (kind, bytes) = encode(&set);
    assert_eq!(kind, 0x1e);
    assert_eq!(
        bytes,
        hex("01 00 2f  01 00 75  01 00 78  03 00 00 00 5e 61 2e  02 00 00 00 2e 2a")
    );
    assert_eq!(bytes, doc_example("TopicPermissionSet, kind 0x1e"));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(set));
    let cleared = Event::TopicPermissionCleared {
        user: "u".into(),
        vhost: "/".into(),
        exchange: "x".into(),
    };
    let (kind, bytes) = encode(&cleared);
    assert_eq!(
        (kind, bytes.clone()),
        (0x1f, hex("01 00 2f  01 00 75  01 00 78"))
    );
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(cleared));
}

/// S-QQ-10: holding a message to dead-letter it is a format-4 record, and a held placement a
/// format-4 flag of a checkpoint's `Carried` record (storage-format.md, version 4).
#[test]
fn s_qq_10_golden_dead_letter_held_record_and_held_placement() {
    let held = Event::DeadLetterHeld {
        vhost: "/".into(),
        queue: "q".into(),
        reason: DeathReason::Rejected,
        at_ms: 1_700_000_000_000,
        ids: vec![MessageId(7)],
    };
    let (kind, bytes) = encode(&held);
    assert_eq!(kind, 0x28);
    assert_eq!(bytes, doc_example("DeadLetterHeld, kind 0x28"));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(held));
    assert_eq!(STORE_FORMAT_VERSION, 4);

    let placement = Placement {
        queue: "q".into(),
        delivery_count: 0,
        redelivered: true,
        held: Some(HeldDeath {
            reason: DeathReason::Rejected,
            at_ms: 1_700_000_000_000,
        }),
    };
    let message = Message {
        id: MessageId(7),
        enqueued_at_ms: 1_700_000_000_000,
        ttl_ms: None,
        exchange: String::new(),
        routing_key: "q".into(),
        properties: Properties::default(),
        body: Bytes::from_static(b"hi"),
        stored: wharf_broker::StoredSlot::default(),
    };
    let mut out = Vec::new();
    codec::encode_carried("/", std::slice::from_ref(&placement), &message, &mut out).unwrap();
    let mut want = hex("01 00 2f  01 00 00 00");
    want.extend(doc_example("Carried placement, held"));
    assert_eq!(out[..want.len()], want[..]);
    let carried = codec::decode_carried(&out).unwrap();
    assert_eq!(carried.placements, vec![placement]);
    // Bit 1 without its reason and time, or with an unknown reason, is damage.
    let cut = want.len() - 9;
    assert!(codec::decode_carried(&out[..cut]).is_err());
    let mut bad = out.clone();
    bad[cut] = 9;
    assert!(codec::decode_carried(&bad).is_err());
}

#[test]
fn golden_user_deleted_and_permission_cleared() {
    let e = Event::UserDeleted { name: "u".into() };
    let (kind, bytes) = encode(&e);
    assert_eq!((kind, bytes.clone()), (0x1b, hex("01 00 75")));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(e));
    let e = Event::PermissionCleared {
        user: "u".into(),
        vhost: "/".into(),
    };
    let (kind, bytes) = encode(&e);
    assert_eq!((kind, bytes.clone()), (0x1d, hex("01 00 2f  01 00 75")));
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(e));
}

#[test]
fn golden_settled_record() {
    let e = Event::Settled {
        vhost: "/".into(),
        queue: "q".into(),
        ids: vec![MessageId(7), MessageId(0x0102_0304_0506_0708)],
        kind: SettleKind::Expire,
    };
    let (kind, bytes) = encode(&e);
    assert_eq!(kind, 0x23);
    let want = hex("01 00 2f  01 00 71  01  02 00 00 00
                    07 00 00 00 00 00 00 00  08 07 06 05 04 03 02 01");
    assert_eq!(bytes, want);
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(e));
}

#[test]
fn golden_queue_declared_with_every_scalar_value_type() {
    let mut t = FieldTable::new();
    t.insert("t", Value::Bool(true));
    t.insert("b", Value::I8(-1));
    t.insert("s", Value::I16(-2));
    t.insert("I", Value::I32(-3));
    t.insert("l", Value::I64(-4));
    t.insert("d", Value::Decimal { scale: 2, value: 5 });
    t.insert("z", Value::ShortStr("ab".into()));
    t.insert("A", Value::Array(vec![Value::Void, Value::U8(9)]));
    let e = Event::QueueDeclared {
        vhost: "/".into(),
        queue: "q".into(),
        auto_delete: true,
        arguments: t,
    };
    let (kind, bytes) = encode(&e);
    assert_eq!(kind, 0x14);
    let want = hex("01 00 2f  01 00 71  01  08 00 00 00
        01 00 74  74 01
        01 00 62  62 ff
        01 00 73  73 fe ff
        01 00 49  49 fd ff ff ff
        01 00 6c  6c fc ff ff ff ff ff ff ff
        01 00 64  44 02 05 00 00 00
        01 00 7a  7a 02 00 00 00 61 62
        01 00 41  41 02 00 00 00 56 42 09");
    assert_eq!(bytes, want);
    assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(e));
}

#[test]
fn golden_format_marker() {
    let mut out = Vec::new();
    assert_eq!(codec::encode_format(&mut out), RecordKind::Format);
    assert_eq!(out, STORE_FORMAT_VERSION.to_le_bytes());
    assert_eq!(
        decode(0x01, &out).unwrap(),
        StoreRecord::Format {
            version: STORE_FORMAT_VERSION
        }
    );
}

#[test]
fn record_kinds_are_distinct_and_round_trip() {
    for k in RecordKind::ALL {
        assert_eq!(RecordKind::from_byte(k.byte()), Some(k));
        assert_eq!(
            RecordKind::ALL
                .iter()
                .filter(|o| o.byte() == k.byte())
                .count(),
            1
        );
    }
    assert_eq!(RecordKind::from_byte(0x00), None);
    assert_eq!(RecordKind::from_byte(0xff), None);
}

#[test]
fn a_huge_count_is_refused_before_allocating() {
    // Settled with 2^32-1 ids announced and none present.
    let bytes = hex("01 00 2f  01 00 71  00  ff ff ff ff");
    let err = decode(0x23, &bytes).unwrap_err();
    assert_eq!(err.what, "count larger than the record");
    assert_eq!(err.offset, 11, "offset is just past the count");
    // A body length far past the payload.
    let (kind, mut good) = encode(&golden_published());
    let len_at = good.len() - 9;
    good[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode(kind, &good).is_err());
}

fn nested(levels: usize) -> FieldTable {
    // A table holding `levels - 1` arrays nested inside each other: total depth `levels`.
    let mut v = Value::Void;
    for _ in 1..levels {
        v = Value::Array(vec![v]);
    }
    let mut t = FieldTable::new();
    t.insert("x", v);
    t
}

#[test]
fn nesting_is_bounded_like_the_protocol_decoder() {
    for depth in 1..=limits::FIELD_TABLE_DEPTH_MAX + 2 {
        let e = Event::QueueDeclared {
            vhost: "/".into(),
            queue: "q".into(),
            auto_delete: false,
            arguments: nested(depth),
        };
        let mut out = Vec::new();
        let r = encode_event(&e, &mut out);
        if depth <= limits::FIELD_TABLE_DEPTH_MAX {
            let kind = r.unwrap();
            assert_eq!(decode(kind.byte(), &out).unwrap(), StoreRecord::Event(e));
        } else {
            assert_eq!(
                r,
                Err(EncodeError::TooDeep {
                    max: limits::FIELD_TABLE_DEPTH_MAX
                })
            );
        }
    }
    // And a hand-made record one level too deep is refused by the decoder.
    let mut bytes = hex("01 00 2f  01 00 71  00  01 00 00 00  01 00 78");
    for _ in 1..=limits::FIELD_TABLE_DEPTH_MAX {
        bytes.extend_from_slice(&hex("41 01 00 00 00"));
    }
    bytes.push(0x56);
    let err = decode(0x14, &bytes).unwrap_err();
    assert_eq!(err.what, "array nested too deep");
}

#[test]
fn a_name_over_u16_is_an_encode_error_not_a_truncation() {
    let e = Event::QueueDeleted {
        vhost: "/".into(),
        queue: "q".repeat(70_000),
    };
    let mut out = Vec::new();
    assert!(matches!(
        encode_event(&e, &mut out),
        Err(EncodeError::TooLong { len: 70_000, .. })
    ));
}

#[test]
fn repeated_table_keys_and_reserved_bits_are_refused() {
    let dup = hex("01 00 2f  01 00 71  00  02 00 00 00  01 00 78 56  01 00 78 56");
    assert_eq!(
        decode(0x14, &dup).unwrap_err().what,
        "field table key repeated"
    );
    let flags = hex("01 00 2f  01 00 71  02  00 00 00 00");
    assert_eq!(
        decode(0x14, &flags).unwrap_err().what,
        "reserved flag bit set"
    );
    let trailing = hex("01 00 2f  00");
    assert_eq!(
        decode(0x10, &trailing).unwrap_err().what,
        "trailing bytes after the record"
    );
}

// ----- generated events -----

fn name() -> BoxedStrategy<String> {
    // Often a name the broker knows ("/" is the default vhost), so that generated events also
    // reach entities when they are applied to a broker.
    prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        Just("q".to_owned()),
        Just("amq.direct".to_owned()),
        "[a-z./_-]{1,12}",
        "\\PC{0,6}",
    ]
    .boxed()
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i8>().prop_map(Value::I8),
        any::<u8>().prop_map(Value::U8),
        any::<i16>().prop_map(Value::I16),
        any::<u16>().prop_map(Value::U16),
        any::<i32>().prop_map(Value::I32),
        any::<u32>().prop_map(Value::U32),
        any::<i64>().prop_map(Value::I64),
        // NaN != NaN under PartialEq; the codec keeps its bits, but equality cannot show it.
        any::<f32>()
            .prop_filter("not NaN", |f| !f.is_nan())
            .prop_map(Value::F32),
        any::<f64>()
            .prop_filter("not NaN", |f| !f.is_nan())
            .prop_map(Value::F64),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| Value::Decimal { scale, value }),
        name().prop_map(Value::ShortStr),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::LongStr),
        any::<u64>().prop_map(Value::Timestamp),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
        Just(Value::Void),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((name(), inner), 0..4)
                .prop_map(|kv| Value::Table(kv.into_iter().collect())),
        ]
    })
}

fn table() -> BoxedStrategy<FieldTable> {
    prop::collection::vec((name(), value()), 0..4)
        .prop_map(|kv| kv.into_iter().collect())
        .boxed()
}

fn opt_name() -> impl Strategy<Value = Option<String>> {
    prop::option::of(name())
}

fn properties() -> impl Strategy<Value = Properties> {
    (
        (opt_name(), opt_name(), prop::option::of(table())),
        (
            any::<Option<u8>>(),
            any::<Option<u8>>(),
            opt_name(),
            opt_name(),
        ),
        (opt_name(), opt_name(), any::<Option<u64>>(), opt_name()),
        (opt_name(), opt_name(), opt_name()),
    )
        .prop_map(|(a, b, c, d)| Properties {
            content_type: a.0,
            content_encoding: a.1,
            headers: a.2,
            delivery_mode: b.0,
            priority: b.1,
            correlation_id: b.2,
            reply_to: b.3,
            expiration: c.0,
            message_id: c.1,
            timestamp: c.2,
            kind: c.3,
            user_id: d.0,
            app_id: d.1,
            cluster_id: d.2,
        })
}

fn message() -> impl Strategy<Value = MessageRecord> {
    (
        (any::<u64>(), any::<u64>(), any::<Option<u32>>()),
        (name(), name(), properties()),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|((id, at, ttl), (x, key, p), body)| MessageRecord {
            message: Arc::new(Message {
                id: MessageId(id),
                enqueued_at_ms: at,
                ttl_ms: ttl,
                exchange: x,
                routing_key: key,
                properties: p,
                body: Bytes::from(body),
                stored: wharf_broker::StoredSlot::default(),
            }),
        })
}

fn ids() -> impl Strategy<Value = Vec<MessageId>> {
    prop::collection::vec(any::<u64>().prop_map(MessageId), 0..6)
}

fn exchange_kind() -> impl Strategy<Value = ExchangeKind> {
    prop_oneof![
        Just(ExchangeKind::Direct),
        Just(ExchangeKind::Fanout),
        Just(ExchangeKind::Topic),
        Just(ExchangeKind::Headers),
        Just(ExchangeKind::Delayed(DelayedType::Direct)),
        Just(ExchangeKind::Delayed(DelayedType::Fanout)),
        Just(ExchangeKind::Delayed(DelayedType::Topic)),
        Just(ExchangeKind::Delayed(DelayedType::Headers)),
    ]
}

fn dest() -> BoxedStrategy<DestName> {
    prop_oneof![
        name().prop_map(DestName::Queue),
        name().prop_map(DestName::Exchange)
    ]
    .boxed()
}

fn settle_kind() -> impl Strategy<Value = SettleKind> {
    prop_oneof![
        Just(SettleKind::Ack),
        Just(SettleKind::Expire),
        Just(SettleKind::Discard)
    ]
}

fn policy() -> impl Strategy<Value = PolicySpec> {
    (
        name(),
        "\\PC{0,10}",
        prop_oneof![
            Just(ApplyTo::Queues),
            Just(ApplyTo::Exchanges),
            Just(ApplyTo::All)
        ],
        any::<i32>(),
        "\\PC{0,20}",
    )
        .prop_map(
            |(name, pattern, apply_to, priority, definition)| PolicySpec {
                name,
                pattern,
                apply_to,
                priority,
                definition,
            },
        )
}

#[expect(clippy::too_many_lines, reason = "one short arm per event type")]
fn event() -> impl Strategy<Value = Event> {
    let binding = (name(), name(), dest(), name(), table());
    prop_oneof![
        name().prop_map(|vhost| Event::VhostAdded { vhost }),
        name().prop_map(|vhost| Event::VhostDeleted { vhost }),
        (
            name(),
            name(),
            exchange_kind(),
            any::<bool>(),
            any::<bool>(),
            table()
        )
            .prop_map(
                |(vhost, exchange, kind, auto_delete, internal, arguments)| {
                    Event::ExchangeDeclared {
                        vhost,
                        exchange,
                        kind,
                        auto_delete,
                        internal,
                        arguments,
                    }
                }
            ),
        (name(), name()).prop_map(|(vhost, exchange)| Event::ExchangeDeleted { vhost, exchange }),
        (name(), name(), any::<bool>(), table()).prop_map(
            |(vhost, queue, auto_delete, arguments)| Event::QueueDeclared {
                vhost,
                queue,
                auto_delete,
                arguments
            }
        ),
        (name(), name()).prop_map(|(vhost, queue)| Event::QueueDeleted { vhost, queue }),
        binding
            .clone()
            .prop_map(|(vhost, source, destination, routing_key, arguments)| {
                Event::Bound {
                    vhost,
                    source,
                    destination,
                    routing_key,
                    arguments,
                }
            }),
        binding.prop_map(|(vhost, source, destination, routing_key, arguments)| {
            Event::Unbound {
                vhost,
                source,
                destination,
                routing_key,
                arguments,
            }
        }),
        (name(), policy(), any::<bool>()).prop_map(|(vhost, policy, operator)| {
            Event::PolicySet {
                vhost,
                policy,
                operator,
            }
        }),
        (name(), name(), any::<bool>()).prop_map(|(vhost, name, operator)| {
            Event::PolicyCleared {
                vhost,
                name,
                operator,
            }
        }),
        (
            name(),
            message(),
            prop::collection::vec(name(), 0..4),
            any::<Option<u64>>()
        )
            .prop_map(|(vhost, message, queues, s)| Event::Published {
                vhost,
                message,
                queues,
                scheduled: s.map(MessageId),
            }),
        (name(), name(), message()).prop_map(|(vhost, exchange, message)| Event::Scheduled {
            vhost,
            exchange,
            message
        }),
        (name(), any::<u64>()).prop_map(|(vhost, id)| Event::Unscheduled {
            vhost,
            id: MessageId(id)
        }),
        (name(), name(), ids(), settle_kind()).prop_map(|(vhost, queue, ids, kind)| {
            Event::Settled {
                vhost,
                queue,
                ids,
                kind,
            }
        }),
        (name(), name(), ids()).prop_map(|(vhost, queue, ids)| Event::Delivered {
            vhost,
            queue,
            ids
        }),
        (name(), name(), ids()).prop_map(|(vhost, queue, ids)| Event::Returned {
            vhost,
            queue,
            ids
        }),
        (
            name(),
            opt_name(),
            any::<u64>(),
            prop::option::of(message()),
            prop::collection::vec(name(), 0..4)
        )
            .prop_map(|(vhost, from, id, message, targets)| Event::DeadLettered {
                vhost,
                from,
                id: MessageId(id),
                message,
                targets,
            }),
        (name(), name(), ids()).prop_map(|(vhost, queue, ids)| Event::Purged { vhost, queue, ids }),
        (name(), name(), 0..4u8, any::<u64>(), ids()).prop_map(|(vhost, queue, r, at_ms, ids)| {
            Event::DeadLetterHeld {
                vhost,
                queue,
                reason: [
                    DeathReason::Rejected,
                    DeathReason::Expired,
                    DeathReason::Maxlen,
                    DeathReason::DeliveryLimit,
                ][usize::from(r)],
                at_ms,
                ids,
            }
        }),
        (name(), name(), prop::collection::vec(name(), 0..4)).prop_map(
            |(name, password_hash, tags)| Event::UserPut {
                name,
                password_hash,
                tags
            }
        ),
        name().prop_map(|name| Event::UserDeleted { name }),
        (name(), name(), name(), name(), name()).prop_map(
            |(user, vhost, configure, write, read)| Event::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read
            }
        ),
        (name(), name()).prop_map(|(user, vhost)| Event::PermissionCleared { user, vhost }),
        (name(), name(), name(), name(), name()).prop_map(
            |(user, vhost, exchange, write, read)| Event::TopicPermissionSet {
                user,
                vhost,
                exchange,
                write,
                read
            }
        ),
        (name(), name(), name()).prop_map(|(user, vhost, exchange)| {
            Event::TopicPermissionCleared {
                user,
                vhost,
                exchange,
            }
        }),
    ]
}

/// A valid encoding with some bytes flipped, cut or extended.
fn mutated() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (
        event(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(e, flips, cut, do_cut)| {
            let (kind, mut bytes) = encode(&e);
            if !bytes.is_empty() {
                for (at, x) in flips {
                    let i = at.index(bytes.len());
                    bytes[i] ^= x;
                }
                if do_cut {
                    bytes.truncate(cut.index(bytes.len()));
                }
            }
            (kind, bytes)
        })
}

/// Whatever decodes re-encodes to exactly the same bytes: the format has one spelling per
/// record, so damage that still decodes is at least never normalised away silently.
fn canonical(kind: u8, bytes: &[u8]) {
    // The decoders recovery and the read-back path use must not panic either.
    let _ = codec::decode_stored(kind, bytes, 0);
    if let Ok(part) = codec::message_part(kind, bytes) {
        let _ = codec::decode_message_part(kind, part);
    }
    let _ = codec::decode_carried_stored(bytes, 0);
    if let Ok(r) = codec::decode_referenced(bytes) {
        let mut again = Vec::new();
        codec::encode_referenced(&r, &mut again).unwrap();
        assert_eq!(again, bytes);
    }
    if let Ok(record) = decode(kind, bytes) {
        match record {
            StoreRecord::Event(e) => {
                let (k2, again) = encode(&e);
                assert_eq!(k2, kind);
                assert_eq!(again, bytes);
            }
            StoreRecord::Format { version } => assert_eq!(version.to_le_bytes(), bytes),
            StoreRecord::Copied { vhost, .. } => {
                let part = codec::message_part(kind, bytes).unwrap();
                let mut again = Vec::new();
                codec::encode_copied(&vhost, part, &mut again).unwrap();
                assert_eq!(again, bytes);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn decode_of_encode_is_identity(e in event()) {
        let (kind, bytes) = encode(&e);
        prop_assert_eq!(RecordKind::of(&e).byte(), kind);
        prop_assert_eq!(decode(kind, &bytes).unwrap(), StoreRecord::Event(e));
    }

    /// A record that decodes but does not fit the state must not panic the model (it returns
    /// an error, which recovery turns into `StoreError::Inconsistent`, S-DUR-7).
    #[test]
    fn broker_apply_of_arbitrary_events_never_panics(events in prop::collection::vec(event(), 1..12)) {
        let mut broker = wharf_broker::Broker::new();
        let declare = Event::QueueDeclared {
            vhost: "/".into(),
            queue: "q".into(),
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        broker.apply(&declare).unwrap();
        for e in &events {
            let _ = broker.apply(e);
        }
        broker.check_invariants();
    }

    /// Recovery's decoding that leaves the content on disk (DESIGN "Memory") agrees with the
    /// full decode on every field it keeps, and the Message part it would read back is the
    /// whole message.
    #[test]
    fn decode_stored_agrees_with_decode(e in event(), at in any::<u64>()) {
        let (kind, bytes) = encode(&e);
        let stored = codec::decode_stored(kind, &bytes, at).unwrap();
        let same = |s: &wharf_broker::StoredMessage, m: &wharf_broker::Message| {
            s.id == m.id
                && s.enqueued_at_ms == m.enqueued_at_ms
                && s.ttl_ms == m.ttl_ms
                && u64::from(s.body_len) == m.body.len() as u64
                && s.at == at
        };
        match (&e, stored) {
            (
                Event::Published { vhost, message, queues, scheduled },
                Some(wharf_broker::StoredEvent::Published { vhost: v, message: s, queues: q, scheduled: sch }),
            ) => {
                prop_assert!(same(&s, &message.message));
                prop_assert_eq!((vhost, queues, scheduled), (&v, &q, &sch));
                let part = codec::message_part(kind, &bytes).unwrap();
                prop_assert_eq!(&codec::decode_message_part(kind, part).unwrap(), &*message.message);
            }
            (
                Event::DeadLettered { vhost, from, id, message, targets },
                Some(wharf_broker::StoredEvent::DeadLettered { vhost: v, from: f, id: i, message: s, targets: t }),
            ) => {
                prop_assert_eq!((vhost, from, id, targets), (&v, &f, &i, &t));
                match (message, s) {
                    (Some(m), Some(s)) => prop_assert!(same(&s, &m.message)),
                    (None, None) => {}
                    (m, s) => prop_assert!(false, "copy {:?} vs {:?}", m, s),
                }
            }
            (Event::Published { .. } | Event::DeadLettered { .. }, other) => {
                prop_assert!(false, "{:?}", other);
            }
            (_, other) => prop_assert!(other.is_none(), "{:?}", other),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(kind in any::<u8>(), bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        canonical(kind, &bytes);
    }

    #[test]
    fn mutated_records_never_panic_and_stay_canonical((kind, bytes) in mutated()) {
        canonical(kind, &bytes);
    }
}

#[test]
fn decode_shared_gives_the_same_record_with_a_body_that_is_a_slice_of_the_payload() {
    let (kind, bytes) = encode(&golden_published());
    let payload = Bytes::from(bytes);
    let shared = codec::decode_shared(kind, &payload).unwrap();
    assert_eq!(shared, decode(kind, &payload).unwrap());
    let StoreRecord::Event(Event::Published { message, .. }) = shared else {
        panic!("a Published record");
    };
    let body = &message.message.body;
    assert!(!body.is_empty(), "the golden message has a body");
    let range = payload.as_ptr_range();
    assert!(
        range.contains(&body.as_ptr()),
        "the body points into the payload (no copy)"
    );
}
