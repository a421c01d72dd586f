//! Scripted workloads through the library (Broker + Store in-process), the way the server
//! drives them: every outcome's events go to the store. Used by the golden tests, the
//! property tests and the hidden `gen-bench-log` command. Must not depend on the rest of the
//! inspector.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use wharf_broker::{
    Broker, BrokerError, ChanRef, Command, ExchangeDeclare, FieldTable, Outcome, Properties,
    Publish, QueueDeclare, Reply,
};
use wharf_broker::{ChannelId, ConnId};
use wharf_store::{Store, StoreConfig, Ticket};
use wharf_wal::{FileStorage, WalConfig};

/// The one channel every workload uses.
pub const CH: ChanRef = ChanRef {
    conn: ConnId(1),
    channel: ChannelId(1),
};

/// A broker whose events are logged to a store in a real directory.
#[derive(Debug)]
pub struct Driver {
    /// The store the events go to.
    pub store: Store,
    /// The live broker.
    pub broker: Broker,
    /// The time every command runs at (ms since the epoch); tests move it explicitly.
    pub now_ms: u64,
    last: Option<Ticket>,
}

impl Driver {
    /// Opens (or creates) the store in `dir` with small, non-preallocated segments when
    /// `segment_bytes_max` is small (golden data stays small), and opens connection 1 and
    /// channel 1 at `now_ms`.
    ///
    /// # Errors
    /// The store cannot be opened.
    pub fn create(
        dir: &Path,
        segment_bytes_max: u64,
        preallocate: bool,
        now_ms: u64,
    ) -> anyhow::Result<Self> {
        let wal = WalConfig {
            segment_bytes_max,
            preallocate,
            ..WalConfig::default()
        };
        let config = StoreConfig {
            dir: dir.to_owned(),
            salvage: false,
        };
        let (store, broker, _) = Store::open_with(&config, Arc::new(FileStorage), &wal)
            .with_context(|| format!("opening a store in {}", dir.display()))?;
        let mut driver = Driver {
            store,
            broker,
            now_ms,
            last: None,
        };
        driver.run(Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".to_owned(),
        })?;
        driver.run(Command::ChannelOpen { chan: CH })?;
        Ok(driver)
    }

    /// Runs one command at `now_ms` and logs its events.
    ///
    /// # Errors
    /// The broker refuses the command, or the store fails.
    pub fn run(&mut self, cmd: Command) -> anyhow::Result<Outcome> {
        let out = self
            .broker
            .handle(cmd, self.now_ms)
            .map_err(|e: BrokerError| anyhow::anyhow!("broker refused: {e}"))?;
        self.log(&out)?;
        Ok(out)
    }

    fn log(&mut self, out: &Outcome) -> anyhow::Result<()> {
        let mut logged = Vec::new();
        if let Some(t) = self.store.log(&out.events, &mut logged)? {
            self.last = Some(t);
        }
        self.broker.messages_logged(&logged);
        Ok(())
    }

    /// Declares a durable exchange of `kind`.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn exchange(&mut self, name: &str, kind: &str) -> anyhow::Result<()> {
        self.run(Command::ExchangeDeclare(ExchangeDeclare {
            vhost: "/".to_owned(),
            exchange: name.to_owned(),
            kind: kind.to_owned(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        }))?;
        Ok(())
    }

    /// Declares a durable queue with `arguments`.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn queue(&mut self, name: &str, arguments: FieldTable) -> anyhow::Result<()> {
        self.run(Command::QueueDeclare(QueueDeclare {
            vhost: "/".to_owned(),
            queue: name.to_owned(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments,
            owner: None,
        }))?;
        Ok(())
    }

    /// Binds `queue` to `exchange` with `key`.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn bind(&mut self, queue: &str, exchange: &str, key: &str) -> anyhow::Result<()> {
        self.run(Command::QueueBind {
            vhost: "/".to_owned(),
            queue: queue.to_owned(),
            exchange: exchange.to_owned(),
            routing_key: key.to_owned(),
            arguments: FieldTable::new(),
            bind: true,
            owner: None,
        })?;
        Ok(())
    }

    /// Publishes a message; persistent unless `properties.delivery_mode` says otherwise.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn publish(
        &mut self,
        exchange: &str,
        key: &str,
        mut properties: Properties,
        body: &[u8],
    ) -> anyhow::Result<()> {
        properties.delivery_mode.get_or_insert(2);
        self.run(Command::Publish(Publish {
            vhost: "/".to_owned(),
            exchange: exchange.to_owned(),
            routing_key: key.to_owned(),
            mandatory: false,
            properties,
            body: bytes_of(body),
        }))?;
        Ok(())
    }

    /// `basic.get` with manual ack: the delivery tag, or `None` when the queue is empty.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn get(&mut self, queue: &str) -> anyhow::Result<Option<u64>> {
        let out = self.run(Command::Get {
            chan: CH,
            queue: queue.to_owned(),
            no_ack: false,
        })?;
        Ok(match out.reply {
            Reply::GetOk(ok) => Some(ok.delivery_tag.0),
            _ => None,
        })
    }

    /// Acks one delivery.
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn ack(&mut self, tag: u64) -> anyhow::Result<()> {
        self.run(Command::Ack {
            chan: CH,
            delivery_tag: tag,
            multiple: false,
        })?;
        Ok(())
    }

    /// Rejects one delivery (dead-lettered when the queue has a dead-letter exchange).
    ///
    /// # Errors
    /// As [`Driver::run`].
    pub fn reject(&mut self, tag: u64, requeue: bool) -> anyhow::Result<()> {
        self.run(Command::Reject {
            chan: CH,
            delivery_tag: tag,
            requeue,
        })?;
        Ok(())
    }

    /// Moves the clock to `now_ms` and runs the broker's expiry.
    ///
    /// # Errors
    /// The store fails.
    pub fn expire_at(&mut self, now_ms: u64) -> anyhow::Result<()> {
        self.now_ms = now_ms;
        let out = self.broker.expire_due(now_ms);
        self.log(&out)
    }

    /// Makes everything logged durable and closes the store.
    ///
    /// # Errors
    /// The store's latched failure.
    pub fn close(self) -> anyhow::Result<()> {
        if let Some(t) = self.last {
            self.store.wait_durable(t)?;
        }
        self.store.close()?;
        Ok(())
    }
}

fn bytes_of(body: &[u8]) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(body)
}
