//! The management API over TLS (RabbitMQ's `management.ssl.*`, port 15671): an
//! [`axum::serve::Listener`] whose accepted streams have already finished their TLS handshake.
//! The certificate and key are loaded by `server::tls::server_config`, the one code path the
//! AMQPS listener uses too. Handshakes run in tasks of their own (bounded by `HANDSHAKE_WAIT`),
//! so one slow or silent client never holds up the others; finished streams are handed to
//! axum through a bounded channel.
//!
//! Depends on tokio, tokio-rustls and axum's listener trait; knows nothing of the broker.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{info, warn};

use wharf_base::limits;

/// Finished handshakes waiting for axum to take them; more wait in their tasks.
const READY_STREAMS_MAX: usize = 64;

/// A listener of TLS streams (see the module doc).
#[derive(Debug)]
pub(crate) struct HttpsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl HttpsListener {
    /// Starts accepting on `listener`, handshaking with `config`, until `stop` turns true.
    pub(crate) fn start(
        listener: TcpListener,
        local: SocketAddr,
        config: Arc<rustls::ServerConfig>,
        stop: watch::Receiver<bool>,
    ) -> HttpsListener {
        let (tx, ready) = mpsc::channel(READY_STREAMS_MAX);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx, stop));
        HttpsListener { ready, local }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    mut stop: watch::Receiver<bool>,
) {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let acceptor = acceptor.clone();
                    let ready = ready.clone();
                    tokio::spawn(async move {
                        let handshake =
                            tokio::time::timeout(limits::HANDSHAKE_WAIT, acceptor.accept(stream));
                        match handshake.await {
                            Ok(Ok(tls)) => {
                                // axum gone (shutting down): the stream is dropped, closing it.
                                let _ = ready.send((tls, peer)).await;
                            }
                            Ok(Err(e)) => {
                                info!(%peer, error = %e, "management API: TLS handshake failed");
                            }
                            Err(_) => info!(%peer, "management API: TLS handshake timed out"),
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    warn!(error = %e, "management API: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop stopped: the server is shutting down and axum's graceful
            // shutdown ends this listener's use; never hand out anything again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
