//! The store's record-size rule, installed in the broker (`wharf_store::MessageRecordSize`,
//! what `Store::open` hands it): a persistent message whose one log record could not hold it
//! is refused by the broker before anything changes (S-DUR-3).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use wharf_broker::{
    BrokerError, ChanRef, ChannelId, Command, ConnId, ExchangeDeclare, FieldTable, Outcome,
    Properties, Publish, QueueDeclare,
};
use wharf_store::MessageRecordSize;

const CH: ChanRef = ChanRef {
    conn: ConnId(1),
    channel: ChannelId(1),
};
const NOW: u64 = 1_000_000;

/// A broker with the store's rule and one open channel.
struct H {
    b: wharf_broker::Broker,
}

impl H {
    fn new() -> Self {
        let mut b = wharf_broker::Broker::new();
        b.set_record_size(Arc::new(MessageRecordSize));
        let mut h = H { b };
        h.ok(Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        });
        h.ok(Command::ChannelOpen { chan: CH });
        h
    }

    fn try_cmd(&mut self, cmd: Command) -> Result<Outcome, BrokerError> {
        let r = self.b.handle(cmd, NOW);
        self.b.check_invariants();
        r
    }

    fn ok(&mut self, cmd: Command) -> Outcome {
        self.try_cmd(cmd).expect("command refused")
    }

    fn err(&mut self, cmd: Command) -> BrokerError {
        self.try_cmd(cmd).expect_err("command accepted")
    }

    fn exchange(&mut self, name: &str, kind: &str) {
        self.ok(Command::ExchangeDeclare(ExchangeDeclare {
            vhost: "/".into(),
            exchange: name.into(),
            kind: kind.into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        }));
    }

    fn durable_queue(&mut self, name: &str) {
        self.ok(Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: name.into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
            owner: Some(CH.conn),
        }));
    }

    fn bind(&mut self, queue: &str, exchange: &str) {
        self.ok(Command::QueueBind {
            vhost: "/".into(),
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: String::new(),
            arguments: FieldTable::new(),
            bind: true,
            owner: Some(CH.conn),
        });
    }

    fn ready(&self, queue: &str) -> u64 {
        let queues = self.b.queues("/");
        queues
            .iter()
            .find(|q| q.name == queue)
            .map_or(0, |q| q.ready)
    }
}

fn persistent() -> Properties {
    Properties {
        delivery_mode: Some(2),
        ..Properties::default()
    }
}

/// A persistent message whose one log record could not hold it (a maximal body fanned out to
/// many long-named durable queues) is refused with 406 before it changes anything, instead of
/// failing the log after the broker applied it (S-DUR-3: what is accepted is made durable).
#[test]
fn s_dur_3_a_message_too_large_to_log_is_refused_before_anything_changes() {
    let mut h = H::new();
    h.exchange("fan", "fanout");
    let names: Vec<String> = (0..1100).map(|i| format!("{i:0>250}")).collect();
    for name in &names {
        h.durable_queue(name);
        h.bind(name, "fan");
    }
    let body = bytes::Bytes::from(vec![
        7u8;
        wharf_base::limits::MESSAGE_BODY_BYTES_MAX as usize
    ]);
    let publish = |p: Properties| {
        Command::Publish(Publish {
            vhost: "/".into(),
            exchange: "fan".into(),
            routing_key: String::new(),
            mandatory: false,
            properties: p,
            body: body.clone(),
        })
    };
    let err = h.err(publish(persistent()));
    assert_eq!(
        err.kind,
        wharf_broker::ErrorKind::PreconditionFailed,
        "{err:?}"
    );
    assert!(err.text.contains("too large to store"), "{}", err.text);
    assert_eq!(h.ready(&names[0]), 0, "nothing entered");
    // The same message, transient, is never logged: it is accepted.
    h.ok(publish(Properties::default()));
    assert_eq!(h.ready(&names[1099]), 1);
}
