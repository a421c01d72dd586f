//! Robustness (S-ERR-2): arbitrary command sequences with arbitrary arguments (any value
//! types, unknown channels and connections, bogus tags, malformed expirations and policies)
//! never panic, leave the invariants intact after every step, and the events they emit
//! still replay to the same durable state.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is a failed test"
)]

use bytes::Bytes;
use proptest::prelude::*;
use wharf_broker::ApplyTo;
use wharf_broker::{
    Broker, ChanRef, Command, ExchangeDeclare, FieldTable, PolicySpec, Properties, Publish,
    QueueDeclare, Value,
};

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("q".to_owned()),
        Just("r".to_owned()),
        Just("x".to_owned()),
        Just("amq.direct".to_owned()),
        Just("amq.gen-x".to_owned()),
        "[a-c]{1,2}",
    ]
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
        (0..100i64).prop_map(Value::I64),
        any::<f64>().prop_map(Value::F64),
        name().prop_map(Value::ShortStr),
        name().prop_map(Value::long_str),
        Just(Value::long_str("reject-publish")),
        Just(Value::long_str("reject-publish-dlx")),
        Just(Value::long_str("direct")),
        any::<u64>().prop_map(Value::Timestamp),
        Just(Value::Void),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..3)
                .prop_map(|kv| Value::Table(kv.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("x-message-ttl".to_owned()),
        Just("x-expires".to_owned()),
        Just("x-dead-letter-exchange".to_owned()),
        Just("x-dead-letter-routing-key".to_owned()),
        Just("x-max-length".to_owned()),
        Just("x-max-length-bytes".to_owned()),
        Just("x-overflow".to_owned()),
        Just("x-delivery-limit".to_owned()),
        Just("x-queue-type".to_owned()),
        Just("x-single-active-consumer".to_owned()),
        Just("x-consumer-timeout".to_owned()),
        Just("x-priority".to_owned()),
        Just("x-dead-letter-strategy".to_owned()),
        Just("x-delay".to_owned()),
        Just("x-delayed-type".to_owned()),
        Just("alternate-exchange".to_owned()),
        Just("x-match".to_owned()),
        Just("x-death".to_owned()),
        Just("CC".to_owned()),
        Just("BCC".to_owned()),
        "[a-c]",
    ]
}

fn table() -> impl Strategy<Value = FieldTable> {
    prop::collection::vec((key(), value()), 0..4).prop_map(|kv| kv.into_iter().collect())
}

fn chan() -> impl Strategy<Value = ChanRef> {
    (1..3u64, 1..3u16).prop_map(|(c, ch)| ChanRef::new(c, ch))
}

fn props() -> impl Strategy<Value = Properties> {
    (
        prop::option::of(prop_oneof![
            "[0-9]{1,3}",
            "-?[0-9a-z.]{0,12}",
            Just("4294967296".to_owned())
        ]),
        prop::option::of(table()),
        prop::option::of(1..3u8),
    )
        .prop_map(|(expiration, headers, delivery_mode)| Properties {
            expiration,
            headers,
            delivery_mode,
            ..Properties::default()
        })
}

#[expect(clippy::too_many_lines, reason = "one arm per command")]
fn command() -> impl Strategy<Value = Command> {
    let kind = prop_oneof![
        Just("direct"),
        Just("fanout"),
        Just("topic"),
        Just("headers"),
        Just("x-delayed-message"),
        Just("bogus")
    ];
    prop_oneof![
        (1..3u64).prop_map(|c| Command::ConnectionOpen {
            conn: wharf_broker::ConnId(c),
            vhost: "/".into()
        }),
        (1..3u64).prop_map(|c| Command::ConnectionClose {
            conn: wharf_broker::ConnId(c)
        }),
        chan().prop_map(|chan| Command::ChannelOpen { chan }),
        chan().prop_map(|chan| Command::ChannelClose { chan }),
        (chan(), any::<bool>()).prop_map(|(chan, active)| Command::ChannelFlow { chan, active }),
        (chan(), 0..4u16, any::<bool>()).prop_map(|(chan, prefetch_count, global)| Command::Qos {
            chan,
            prefetch_count,
            global
        }),
        (
            name(),
            kind,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            table()
        )
            .prop_map(
                |(exchange, kind, durable, auto_delete, passive, arguments)| {
                    Command::ExchangeDeclare(ExchangeDeclare {
                        vhost: "/".into(),
                        exchange,
                        kind: kind.into(),
                        passive,
                        durable,
                        auto_delete,
                        internal: false,
                        arguments,
                    })
                }
            ),
        (name(), any::<bool>()).prop_map(|(exchange, if_unused)| Command::ExchangeDelete {
            vhost: "/".into(),
            exchange,
            if_unused
        }),
        (name(), name(), name(), table(), any::<bool>()).prop_map(
            |(destination, source, routing_key, arguments, bind)| Command::ExchangeBind {
                vhost: "/".into(),
                destination,
                source,
                routing_key,
                arguments,
                bind
            }
        ),
        (
            name(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            table(),
            prop::option::of(1..3u64)
        )
            .prop_map(
                |(queue, passive, durable, exclusive, auto_delete, arguments, owner)| {
                    Command::QueueDeclare(QueueDeclare {
                        vhost: "/".into(),
                        queue,
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        arguments,
                        owner: owner.map(wharf_broker::ConnId),
                    })
                }
            ),
        (name(), name(), name(), table(), any::<bool>()).prop_map(
            |(queue, exchange, routing_key, arguments, bind)| Command::QueueBind {
                vhost: "/".into(),
                queue,
                exchange,
                routing_key,
                arguments,
                bind,
                owner: None
            }
        ),
        name().prop_map(|queue| Command::QueuePurge {
            vhost: "/".into(),
            queue,
            owner: None
        }),
        (name(), any::<bool>(), any::<bool>()).prop_map(|(queue, if_unused, if_empty)| {
            Command::QueueDelete {
                vhost: "/".into(),
                queue,
                if_unused,
                if_empty,
                owner: None,
            }
        }),
        (
            chan(),
            name(),
            name(),
            any::<bool>(),
            any::<bool>(),
            table()
        )
            .prop_map(
                |(chan, queue, consumer_tag, no_ack, exclusive, arguments)| Command::Consume {
                    chan,
                    queue,
                    consumer_tag,
                    no_ack,
                    exclusive,
                    arguments,
                }
            ),
        (chan(), name()).prop_map(|(chan, consumer_tag)| Command::Cancel { chan, consumer_tag }),
        (chan(), name(), any::<bool>()).prop_map(|(chan, queue, no_ack)| Command::Get {
            chan,
            queue,
            no_ack
        }),
        (chan(), prop_oneof![0..6u64, Just(u64::MAX)], any::<bool>()).prop_map(
            |(chan, delivery_tag, multiple)| Command::Ack {
                chan,
                delivery_tag,
                multiple
            }
        ),
        (chan(), 0..6u64, any::<bool>(), any::<bool>()).prop_map(
            |(chan, delivery_tag, multiple, requeue)| Command::Nack {
                chan,
                delivery_tag,
                multiple,
                requeue
            }
        ),
        (chan(), 0..6u64, any::<bool>()).prop_map(|(chan, delivery_tag, requeue)| {
            Command::Reject {
                chan,
                delivery_tag,
                requeue,
            }
        }),
        (chan(), any::<bool>()).prop_map(|(chan, requeue)| Command::Recover { chan, requeue }),
        (name(), name(), any::<bool>(), props()).prop_map(
            |(exchange, routing_key, mandatory, properties)| Command::Publish(Publish {
                vhost: "/".into(),
                exchange,
                routing_key,
                mandatory,
                properties,
                body: Bytes::from_static(b"b")
            })
        ),
        (
            name(),
            "[a-z.^$*(]{0,4}",
            -2..3i32,
            prop_oneof![
                Just(r#"{"message-ttl": 5}"#.to_owned()),
                Just(r#"{"expires": 7}"#.to_owned()),
                Just(r#"{"max-length": 1, "overflow": "reject-publish"}"#.to_owned()),
                Just(r#"{"dead-letter-exchange": "x"}"#.to_owned()),
                Just(r#"{"delivery-limit": 0}"#.to_owned()),
                ".{0,10}",
            ],
            any::<bool>()
        )
            .prop_map(|(name, pattern, priority, definition, operator)| {
                Command::PolicySet {
                    vhost: "/".into(),
                    policy: PolicySpec {
                        name,
                        pattern,
                        apply_to: ApplyTo::All,
                        priority,
                        definition,
                    },
                    operator,
                }
            }),
        (name(), any::<bool>()).prop_map(|(name, operator)| Command::PolicyClear {
            vhost: "/".into(),
            name,
            operator
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 1000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_commands_never_panic_and_still_replay(
        steps in prop::collection::vec((command(), 0..20u64), 1..60),
    ) {
        let mut b = Broker::new();
        let mut events = Vec::new();
        let mut now = 1_000_000u64;
        // Start with both connections and all channels open, so most commands get far.
        for c in 1..3u64 {
            b.handle(Command::ConnectionOpen { conn: wharf_broker::ConnId(c), vhost: "/".into() }, now).unwrap();
            for ch in 1..3u16 {
                b.handle(Command::ChannelOpen { chan: ChanRef::new(c, ch) }, now).unwrap();
            }
        }
        let mut accepted = 0usize;
        for (cmd, dt) in steps {
            now += dt;
            if let Ok(o) = b.handle(cmd, now) {
                accepted += 1;
                events.extend(o.events);
            }
            b.check_invariants();
            events.extend(b.expire_due(now).events);
            b.check_invariants();
        }
        let mut r = Broker::new();
        for e in &events {
            r.apply(e).unwrap();
        }
        r.check_invariants();
        prop_assert_eq!(r.durable_state(), b.durable_state());
        r.recovered(now);
        r.check_invariants();
        let _ = accepted;
    }
}
