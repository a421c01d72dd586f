//! [`ServerHandle`]: a running server, as its owner holds it: its addresses, requests to the
//! broker task (admin commands, the timer step), the resource alarms, and the graceful
//! shutdown. `Server::start` (in `start`) builds it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use wharf_base::limits;
use wharf_broker::{BrokerError, Command};
use wharf_clock::ManualClock;
use wharf_store::StoreError;

use crate::admin;
use crate::alarm;
use crate::auth;
use crate::connection;
use crate::core::CoreMsg;
use crate::error::ServerError;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    pub(crate) local_addr: SocketAddr,
    /// The manual clock that clock control moves, when enabled.
    pub(crate) clock_control: Option<ManualClock>,
    pub(crate) core: mpsc::Sender<CoreMsg>,
    pub(crate) stop_accepting: watch::Sender<bool>,
    pub(crate) accept_task: JoinHandle<()>,
    pub(crate) tls_local_addr: Option<SocketAddr>,
    pub(crate) tls_accept_task: Option<JoinHandle<()>>,
    pub(crate) registry: Arc<auth::UserRegistry>,
    pub(crate) core_task: JoinHandle<Result<(), StoreError>>,
    pub(crate) core_done: watch::Receiver<bool>,
    /// Yields `None` once every connection task (and the accept loop) has ended.
    pub(crate) connections_gone: mpsc::Receiver<()>,
    /// The resource alarms (disk, memory, raised by hand).
    pub(crate) alarms: Arc<alarm::Alarms>,
    /// Asks the resource monitor for a check now.
    pub(crate) monitor: mpsc::Sender<oneshot::Sender<()>>,
    pub(crate) monitor_task: JoinHandle<()>,
    /// The management API's address and task, when served.
    pub(crate) mgmt: Option<(SocketAddr, JoinHandle<()>)>,
    /// The management API's HTTPS address, when served.
    pub(crate) mgmt_tls_addr: Option<SocketAddr>,
    /// The Prometheus listener's address and task, when served.
    pub(crate) prometheus: Option<(SocketAddr, JoinHandle<()>)>,
    /// Connections without a socket ([`ServerHandle::connect_in_memory`]).
    pub(crate) door: connection::Door,
    /// Connections other members relay here for their clients (S-CLU-70), when a member.
    pub(crate) relay_door: Option<Arc<connection::Door>>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the management HTTP API, when served ([`ServerConfig::mgmt_bind`]).
    pub fn mgmt_addr(&self) -> Option<SocketAddr> {
        self.mgmt.as_ref().map(|(addr, _)| *addr)
    }

    /// The address of the Prometheus metrics listener, when served
    /// ([`ServerConfig::prometheus_bind`]).
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus.as_ref().map(|(addr, _)| *addr)
    }

    /// The address of the management API's HTTPS listener, when served
    /// ([`ServerConfig::mgmt_tls`]).
    pub fn mgmt_tls_addr(&self) -> Option<SocketAddr> {
        self.mgmt_tls_addr
    }

    /// Sends a management request to the broker task (the embedded Rust API's way to the
    /// same commands the HTTP API uses). Dropped if the broker task has stopped: the
    /// request's answer channel then closes.
    pub async fn admin_request(&self, req: admin::AdminRequest) {
        let _ = self.core.send(CoreMsg::Admin(req)).await;
    }

    /// The AMQPS listener's address, if TLS is configured.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls_local_addr
    }

    /// The user registry connections log in through (for the management API: one
    /// [`auth::UserRegistry::check`] per request, no broker round trip).
    pub fn user_registry(&self) -> Arc<auth::UserRegistry> {
        self.registry.clone()
    }

    /// Applies a definition command as an operator (users, permissions, vhosts, policies):
    /// its events are logged like a client's, and connections see changed users and
    /// permissions from their next operation on.
    ///
    /// # Errors
    /// The broker's refusal, or an internal error if the broker task is gone.
    pub async fn admin(&self, cmd: Command) -> Result<(), BrokerError> {
        let gone = || {
            BrokerError::new(
                wharf_broker::ErrorKind::InternalError,
                "the broker task is not running",
            )
        };
        let (done, answer) = oneshot::channel();
        self.core
            .send(CoreMsg::Admin(admin::AdminRequest::Command {
                cmd: Box::new(cmd),
                done,
            }))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?.map(|_reply| ())
    }

    /// Opens an AMQP connection without a socket (S-NET-2): the server serves one end of an
    /// in-memory byte stream exactly as it serves an accepted TCP socket from `127.0.0.1` (so
    /// `loopback_users` may log in), and the caller speaks AMQP on the returned end, from the
    /// protocol header on. Shutting the returned end's writing side is the client hanging up.
    /// No port and no kernel are involved: for a program that embeds wharf, the simulation's
    /// clients and the AMQP fuzz target. Must be called within the server's tokio runtime.
    /// `None` once the server is shutting down.
    pub fn connect_in_memory(&self) -> Option<tokio::io::DuplexStream> {
        self.door.open()
    }

    /// An `amqp://` URL for the default user and vhost.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.local_addr)
    }

    /// Runs the timer step now: expires what is due at the clock's current time (for tests
    /// on a manual clock). Resolves once the resulting frames are handed to the writers.
    pub async fn tick(&self) {
        let (done, wait) = oneshot::channel();
        if self.core.send(CoreMsg::Tick(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Resolves if the broker task stops on its own (the log failed, or a bug): the server
    /// then serves nothing and its process should exit; [`ServerHandle::shutdown`] says why.
    pub async fn stopped(&self) {
        let mut done = self.core_done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Raises (`Some(reason)`) or clears (`None`) a resource alarm by hand, besides the disk
    /// and memory alarms: while any is on, a connection that publishes stops being read (its
    /// publishes wait in TCP; nothing is refused or lost) and, if it advertised the
    /// capability, gets `connection.blocked`, then `connection.unblocked` when all clear.
    /// Connections that only consume are not blocked (RabbitMQ's rule).
    #[expect(
        clippy::unused_async,
        reason = "kept async: callers await it, as they did when it went through the broker task"
    )]
    pub async fn set_blocked(&self, reason: Option<String>) {
        self.alarms.set_manual(reason);
    }

    /// The reason publishers are blocked now (`"low on disk"`, `"low on memory"`, ...), or
    /// `None` when no alarm is on.
    pub fn blocked_reason(&self) -> Option<String> {
        self.alarms.reason()
    }

    /// Samples free disk and memory now (as the monitor does every second) and raises or
    /// clears the alarms; resolves once done. For tests with an injected `resource_probe`.
    pub async fn check_resources(&self) {
        let (done, wait) = oneshot::channel();
        if self.monitor.send(done).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Graceful shutdown: stop accepting, close every connection (320 `CONNECTION_FORCED`),
    /// make everything logged durable and close the store.
    ///
    /// # Errors
    /// The final sync failed, or a server task panicked.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        // Connections held by an alarm wake on the 320 close below, not on the alarm.
        self.monitor_task.abort();
        let _ = self.stop_accepting.send(true);
        self.door.close();
        if let Some(door) = &self.relay_door {
            door.close();
        }
        let _ = self.accept_task.await;
        for (_, task) in [self.mgmt.take(), self.prometheus.take()]
            .into_iter()
            .flatten()
        {
            // Bounded: a client holding a request open must not hold up the shutdown.
            let _ = tokio::time::timeout(limits::CLOSE_OK_WAIT, task).await;
        }
        if let Some(task) = self.tls_accept_task.take() {
            let _ = task.await;
        }
        let _ = self.core.send(CoreMsg::Shutdown).await;
        drop(self.core);
        let stored = self.core_task.await.map_err(ServerError::Task);
        // Give connections the time to flush their 320 close and see close-ok (bounded).
        let _ = tokio::time::timeout(limits::CLOSE_OK_WAIT, self.connections_gone.recv()).await;
        stored??;
        Ok(())
    }
}
