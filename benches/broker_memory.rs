//! Memory per queued message in the model, excluding the body: a counting global allocator
//! measures the heap growth while N messages with empty bodies (so no body allocation)
//! are published into one queue. Prints bytes per message for a few shapes; measures only.
//!
//! Estimate: a queue entry is 24 bytes (id, message pointer, delivery count, flags) in a
//! `VecDeque` that may be up to half empty after growth; the shared `Message` (with its 14
//! properties inline) is allocated once per message however many queues it enters; a
//! message with a TTL adds one deadline-index entry (16 bytes in a B-tree).

#![allow(
    clippy::unwrap_used,
    clippy::missing_docs_in_private_items,
    missing_docs,
    reason = "bench code: a failed setup should stop the bench loudly"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use wharf_broker::{
    Broker, Command, ExchangeDeclare, FieldTable, Properties, Publish, QueueDeclare,
};

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to the system allocator unchanged; the counter is only
// arithmetic on the sizes passed in.
#[allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one only counts"
)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size.cast_signed() - layout.size().cast_signed(),
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn declare(b: &mut Broker, name: &str, ttl: Option<i32>) {
    let mut args = FieldTable::new();
    if let Some(t) = ttl {
        args.insert("x-message-ttl", wharf_broker::Value::I32(t));
    }
    b.handle(
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: name.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: args,
            owner: None,
        }),
        0,
    )
    .unwrap();
}

fn measure(label: &str, n: u64, queues: usize, expiration: Option<&str>, queue_ttl: Option<i32>) {
    let mut b = Broker::new();
    b.handle(
        Command::ExchangeDeclare(ExchangeDeclare {
            vhost: "/".into(),
            exchange: "f".into(),
            kind: "fanout".into(),
            passive: false,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        }),
        0,
    )
    .unwrap();
    for i in 0..queues {
        let name = format!("q{i}");
        declare(&mut b, &name, queue_ttl);
        b.handle(
            Command::QueueBind {
                vhost: "/".into(),
                queue: name,
                exchange: "f".into(),
                routing_key: String::new(),
                arguments: FieldTable::new(),
                bind: true,
                owner: None,
            },
            0,
        )
        .unwrap();
    }
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for _ in 0..n {
        b.handle(
            Command::Publish(Publish {
                vhost: "/".into(),
                exchange: "f".into(),
                routing_key: String::new(),
                mandatory: false,
                properties: Properties {
                    expiration: expiration.map(str::to_owned),
                    ..Properties::default()
                },
                body: Bytes::new(),
            }),
            1,
        )
        .unwrap();
    }
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    #[expect(clippy::cast_precision_loss, reason = "a printed ratio")]
    let per = (after - before) as f64 / n as f64;
    println!("{label}: {n} messages x {queues} queue(s): {per:.1} bytes per message (all queues)");
    std::hint::black_box(&b);
}

fn main() {
    let n: u64 = std::env::var("WHARF_MEM_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!(
        "size_of::<Message>() = {}",
        size_of::<wharf_broker::Message>()
    );
    println!("size_of::<Properties>() = {}", size_of::<Properties>());
    measure("no TTL", n, 1, None, None);
    measure("queue TTL", n, 1, None, Some(3_600_000));
    measure("per-message TTL", n, 1, Some("3600000"), None);
    measure("no TTL, fanout", n, 4, None, None);
}
