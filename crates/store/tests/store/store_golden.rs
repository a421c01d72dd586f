//! A log written by store format 1 (and WAL format 1) stays readable: the bytes below are a
//! whole segment file written by this build (`WHARF_PRINT_GOLDEN=1` prints a fresh one); the
//! test replays them and checks the state they describe. A format change must keep this test
//! passing (by reading v1) and add a fixture of its own (STYLE 3.8).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use wharf_broker::ConnId;
use wharf_broker::{
    Broker, ChanRef, Command, FieldTable, MessageId, Properties, Publish, QueueDeclare, Value,
};
use wharf_store::{Store, StoreConfig};
use wharf_wal::{SegmentId, SimStorage, WalConfig, segment_file_name};

const T0_MS: u64 = 1_700_000_000_000;

fn config() -> (StoreConfig, WalConfig) {
    let store = StoreConfig {
        dir: PathBuf::from("/golden"),
        salvage: false,
    };
    let wal = WalConfig {
        preallocate: false,
        ..WalConfig::default()
    };
    (store, wal)
}

/// The workload the fixture was written from: a durable queue with a 60 s TTL, three
/// persistent messages (the second with its own 5 s TTL), the first fetched and acked.
fn workload(store: &Store, broker: &mut Broker) {
    let chan = ChanRef::new(1, 1);
    let mut run = |cmd: Command, now: u64| {
        let o = broker.handle(cmd, now).unwrap();
        store.log(&o.events, &mut Vec::new()).unwrap();
        o
    };
    run(
        Command::ConnectionOpen {
            conn: ConnId(1),
            vhost: "/".into(),
        },
        T0_MS,
    );
    run(Command::ChannelOpen { chan }, T0_MS);
    let mut args = FieldTable::new();
    args.insert("x-message-ttl", Value::I32(60_000));
    run(
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: "orders".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: args,
            owner: Some(ConnId(1)),
        }),
        T0_MS,
    );
    for (i, expiration) in [None, Some("5000"), None].into_iter().enumerate() {
        run(
            Command::Publish(Publish {
                vhost: "/".into(),
                exchange: String::new(),
                routing_key: "orders".into(),
                mandatory: false,
                properties: Properties {
                    delivery_mode: Some(2),
                    expiration: expiration.map(str::to_owned),
                    ..Properties::default()
                },
                body: Bytes::from(format!("order {i}")),
            }),
            T0_MS + 10 * i as u64,
        );
    }
    run(
        Command::Get {
            chan,
            queue: "orders".into(),
            no_ack: false,
        },
        T0_MS + 100,
    );
    run(
        Command::Ack {
            chan,
            delivery_tag: 1,
            multiple: false,
        },
        T0_MS + 200,
    );
}

/// `00000000000000000000.wal` as written by `workload` (WAL format 1, store format 1).
const SEGMENT_V1: &str = "
    89 57 48 46 0d 0a 1a 0a 01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 81 d6 8d b8
    02 00 00 00 00 4f 9e 0f 01 00 00 00 00 00 00 00 00 00 00 00 01 01 00 24 00 00 00 f7 9c ad 26 02
    00 00 00 00 00 00 00 01 00 00 00 14 01 00 2f 06 00 6f 72 64 65 72 73 00 01 00 00 00 0d 00 78 2d
    6d 65 73 73 61 67 65 2d 74 74 6c 49 60 ea 00 00 39 00 00 00 98 63 01 c0 03 00 00 00 00 00 00 00
    02 00 00 00 20 01 00 2f 00 01 00 00 00 06 00 6f 72 64 65 72 73 01 00 00 00 00 00 00 00 00 68 e5
    cf 8b 01 00 00 00 00 00 06 00 6f 72 64 65 72 73 08 00 02 07 00 00 00 6f 72 64 65 72 20 30 43 00
    00 00 98 56 65 a6 04 00 00 00 00 00 00 00 03 00 00 00 20 01 00 2f 00 01 00 00 00 06 00 6f 72 64
    65 72 73 02 00 00 00 00 00 00 00 0a 68 e5 cf 8b 01 00 00 01 88 13 00 00 00 00 06 00 6f 72 64 65
    72 73 88 00 02 04 00 35 30 30 30 07 00 00 00 6f 72 64 65 72 20 31 39 00 00 00 53 34 33 9c 05 00
    00 00 00 00 00 00 00 00 00 00 20 01 00 2f 00 01 00 00 00 06 00 6f 72 64 65 72 73 03 00 00 00 00
    00 00 00 14 68 e5 cf 8b 01 00 00 00 00 00 06 00 6f 72 64 65 72 73 08 00 02 07 00 00 00 6f 72 64
    65 72 20 32 17 00 00 00 9c 59 db 1a 06 00 00 00 00 00 00 00 01 00 00 00 24 01 00 2f 06 00 6f 72
    64 65 72 73 01 00 00 00 01 00 00 00 00 00 00 00 18 00 00 00 ff 8f 66 85 07 00 00 00 00 00 00 00
    02 00 00 00 23 01 00 2f 06 00 6f 72 64 65 72 73 00 01 00 00 00 01 00 00 00 00 00 00 00";

fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn store_format_1_log_replays_to_the_state_it_describes() {
    let (store_config, wal_config) = config();
    let path = store_config.dir.join(segment_file_name(SegmentId(0)));
    if std::env::var_os("WHARF_PRINT_GOLDEN").is_some() {
        let sim = SimStorage::new(0);
        let (store, mut broker, _) =
            Store::open_with(&store_config, Arc::new(sim.clone()), &wal_config).unwrap();
        workload(&store, &mut broker);
        store.close().unwrap();
        let bytes = sim.file_bytes(&path).unwrap();
        for line in bytes.chunks(32) {
            let l: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
            println!("    {}", l.join(" "));
        }
    }
    let sim = SimStorage::new(0);
    sim.set_file_bytes(&path, hex(SEGMENT_V1));
    let (_, broker, summary) = Store::open_with(&store_config, Arc::new(sim), &wal_config).unwrap();
    // Format marker + queue declare + 3 publishes + delivered + settled.
    assert_eq!((summary.records, summary.events), (7, 6));
    let state = broker.durable_state();
    let (queue, messages) = &state.queues[0];
    assert_eq!(queue.name, "orders");
    assert_eq!(
        queue.arguments.get("x-message-ttl"),
        Some(&Value::I32(60_000))
    );
    let got: Vec<(MessageId, u64, Option<u64>)> = messages
        .iter()
        .map(|m| (m.id, m.enqueued_at_ms, m.deadline_ms))
        .collect();
    assert_eq!(
        got,
        [
            (MessageId(2), T0_MS + 10, Some(T0_MS + 10 + 5000)),
            (MessageId(3), T0_MS + 20, Some(T0_MS + 20 + 60_000)),
        ]
    );
}
