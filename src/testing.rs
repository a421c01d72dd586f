//! wharf inside other services' tests: an in-process broker with a controllable clock and
//! crash simulation ([`TestBroker`]), and the pieces of the fixture binary's protocol
//! (`wharf --test-mode`) for tests in other languages ([`ClockCommand`], [`parse_duration`],
//! [`TempDataDir`]).
//!
//! This is the server layer's public face for tests (docs/DESIGN.md, "Injected time and disk
//! are product features"): it starts a [`Server`](wharf_server::Server) on a `ManualClock` and
//! on a `Storage` it can cut off (crash) or power down (`SimStorage::power_loss` in memory; on
//! real files, a journal of what each unsynced write overwrote), then restarts it through the
//! real recovery. It holds no rule: every expiry decision is the broker's, reached through
//! [`ServerHandle::clock_advance`](wharf_server::ServerHandle::clock_advance). The broker
//! layers below must not depend on it.
//!
//! # A message that must be dead-lettered after 30 minutes, checked in milliseconds
//!
//! ```
//! use std::time::Duration;
//! use lapin::{BasicProperties, Connection, ConnectionProperties, options::*, types::*};
//! use wharf::testing::TestBroker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = TestBroker::builder().manual_clock(1_767_225_600_000).start().await?;
//! let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
//! let ch = conn.create_channel().await?;
//! ch.confirm_select(ConfirmSelectOptions::default()).await?;
//! ch.queue_declare("orders.dead".into(), QueueDeclareOptions::default(), FieldTable::default())
//!     .await?;
//! let mut args = FieldTable::default();
//! args.insert("x-message-ttl".into(), AMQPValue::LongInt(30 * 60 * 1000));
//! args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
//! args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders.dead".into()));
//! ch.queue_declare("orders".into(), QueueDeclareOptions::default(), args).await?;
//! // Confirmed: the broker holds the message before the clock moves.
//! ch.basic_publish("".into(), "orders".into(), BasicPublishOptions::default(), b"order-1",
//!     BasicProperties::default()).await?.await?;
//!
//! broker.clock().advance(Duration::from_secs(29 * 60)).await?;
//! let get = ch.basic_get("orders.dead".into(), BasicGetOptions { no_ack: true }).await?;
//! assert!(get.is_none(), "not dead-lettered a minute early");
//!
//! broker.clock().advance(Duration::from_secs(60)).await?;
//! let dead = ch.basic_get("orders.dead".into(), BasicGetOptions { no_ack: true }).await?;
//! assert_eq!(dead.expect("dead-lettered at 30 minutes").delivery.data, b"order-1");
//! # Ok(()) }
//! ```
//!
//! # A power cut in the middle of a publish batch
//!
//! ```
//! use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties, options::*};
//! use lapin::types::FieldTable;
//! use wharf::testing::TestBroker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut broker = TestBroker::start().await?;
//! let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
//! let ch = conn.create_channel().await?;
//! ch.confirm_select(ConfirmSelectOptions::default()).await?;
//! let durable = QueueDeclareOptions { durable: true, ..Default::default() };
//! ch.queue_declare("jobs".into(), durable, FieldTable::default()).await?;
//! let persistent = BasicProperties::default().with_delivery_mode(2);
//! let mut confirmed = Vec::new();
//! for i in 0..10 {
//!     let body = format!("job-{i}");
//!     let confirm = ch.basic_publish("".into(), "jobs".into(), BasicPublishOptions::default(),
//!         body.as_bytes(), persistent.clone()).await?;
//!     if i < 5 {
//!         // The first half is confirmed: on stable storage.
//!         assert!(matches!(confirm.await?, Confirmation::Ack(None)));
//!         confirmed.push(body);
//!     }
//! }
//! broker.power_loss().await?; // the rest of the batch may or may not have made it
//! broker.restart().await?;
//!
//! let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
//! let ch = conn.create_channel().await?;
//! let mut recovered = Vec::new();
//! while let Some(m) = ch.basic_get("jobs".into(), BasicGetOptions { no_ack: true }).await? {
//!     recovered.push(String::from_utf8(m.delivery.data.clone())?);
//! }
//! assert!(recovered.starts_with(&confirmed), "every confirmed message, in order");
//! # Ok(()) }
//! ```

pub use wharf_server::testing::*;
