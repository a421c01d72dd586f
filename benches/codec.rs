//! Frame encode and decode on the message hot paths: decoding a `basic.publish` with its
//! content header and body (16 B, 1 KiB, 64 KiB) through `protocol::decode` and the
//! `ContentAssembler`, encoding a `basic.deliver` with header and body, and encoding a
//! `basic.ack` (publisher confirms). Each is measured for our path and for amq-protocol's
//! generic parser and generators, which is how the hand-written encoders and the publish
//! decoder earned their place.
//!
//! Back of the envelope (STYLE 3.9): the server must reach ~150k messages/s on 2 cores, i.e.
//! ~13 µs of CPU per message in total, most of it owed to syscalls, routing and the WAL. The
//! codec should take well under 5% of that. Decoding a small publish (three frames, two short
//! strings, a properties word, one header) touches a few hundred octets and allocates a handful
//! of strings: ~300-600 ns. A small deliver encode writes ~150 octets: ~50-150 ns. An ack is
//! 21 fixed octets: ~5-15 ns. For 64 KiB bodies the cost is copying: at ~10 GB/s, 64 KiB is
//! ~6 µs per copy. Decode keeps a one-frame body without copying (only the benchmark's own
//! buffer clone copies it, outside the measurement), so it should stay near the small case;
//! encode copies the body once into the write buffer, so ~6 µs. A result far from these is a
//! finding.

#![allow(
    clippy::unwrap_used,
    reason = "benchmark inputs are valid; a failed unwrap is a broken bench"
)]

use std::hint::black_box;

use amq_protocol::frame::{AMQPFrame, parse_frame};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use amq_protocol::types::{AMQPValue, FieldTable, ShortString};
use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use wharf_protocol::{self as protocol, ChannelId, ContentAssembler, DeliverRef, Frame};

const CH: ChannelId = ChannelId(1);
const FRAME_MAX: u32 = 128 * 1024;
const SIZES: [(&str, usize); 3] = [("16B", 16), ("1KiB", 1024), ("64KiB", 64 * 1024)];

/// Properties a typical client sends: a content type, persistent delivery, one header.
fn properties() -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert("trace-id".into(), AMQPValue::LongString("abc123".into()));
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(headers)
}

/// A publish as a client writes it: method, header and body frames.
fn publish_stream(body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    let publish = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
        exchange: "orders".into(),
        routing_key: "orders.created.eu".into(),
        mandatory: false,
        immediate: false,
    }));
    protocol::encode_method(&mut buf, CH, &publish);
    protocol::encode_content(&mut buf, CH, &properties(), body, FRAME_MAX);
    buf
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_publish");
    for (name, size) in SIZES {
        let stream = publish_stream(&vec![0x5A; size]);
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("wharf/{name}"), |b| {
            b.iter_batched(
                || (stream.clone(), ContentAssembler::new(CH, u32::MAX)),
                |(mut buf, mut assembler)| {
                    let mut out = None;
                    while let Some(frame) = protocol::decode(&mut buf, FRAME_MAX).unwrap() {
                        out = assembler.push(frame).unwrap();
                    }
                    black_box(out)
                },
                BatchSize::SmallInput,
            );
        });
        group.bench_function(format!("amq_protocol/{name}"), |b| {
            b.iter_batched(
                || stream.clone(),
                |buf| {
                    let mut rest = &buf[..];
                    let mut frames: Vec<AMQPFrame> = Vec::with_capacity(3);
                    while !rest.is_empty() {
                        let (r, f) = parse_frame(rest).unwrap();
                        frames.push(f);
                        rest = r;
                    }
                    black_box(frames)
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn encode_deliver(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_deliver");
    let (tag, exchange, key) = (
        ShortString::from("amq.ctag-4tKv1kZ6dWm8"),
        ShortString::from("orders"),
        ShortString::from("orders.created.eu"),
    );
    let props = properties();
    for (name, size) in SIZES {
        let body = vec![0x5A; size];
        let mut buf = BytesMut::with_capacity(256 * 1024);
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("wharf/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                let d = DeliverRef {
                    consumer_tag: &tag,
                    delivery_tag: black_box(42),
                    redelivered: false,
                    exchange: &exchange,
                    routing_key: &key,
                };
                protocol::encode_deliver(&mut buf, CH, d, &props, &body, FRAME_MAX);
                black_box(buf.len())
            });
        });
        group.bench_function(format!("amq_protocol/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                let method = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                    consumer_tag: tag.clone(),
                    delivery_tag: black_box(42),
                    redelivered: false,
                    exchange: exchange.clone(),
                    routing_key: key.clone(),
                }));
                protocol::encode_method_generic(&mut buf, CH, &method);
                protocol::encode_content_header_generic(
                    &mut buf,
                    CH,
                    60,
                    body.len() as u64,
                    &props,
                );
                for chunk in body.chunks(FRAME_MAX as usize - 8) {
                    protocol::encode_body_frame(&mut buf, CH, chunk);
                }
                black_box(buf.len())
            });
        });
    }
    group.finish();
}

fn encode_ack(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_ack");
    let mut buf = BytesMut::with_capacity(4096);
    group.throughput(Throughput::Elements(1));
    group.bench_function("wharf", |b| {
        b.iter(|| {
            buf.clear();
            protocol::encode_ack(&mut buf, CH, black_box(42), false);
            black_box(buf.len())
        });
    });
    group.bench_function("amq_protocol", |b| {
        b.iter(|| {
            buf.clear();
            let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: black_box(42),
                multiple: false,
            }));
            protocol::encode_method_generic(&mut buf, CH, &ack);
            black_box(buf.len())
        });
    });
    group.finish();
    // Keep `Frame` in the public surface this bench exercises.
    black_box(Frame::Heartbeat);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1))
        .sample_size(30);
    targets = decode, encode_deliver, encode_ack
}
criterion_main!(benches);
