//! The AMQP listeners: binding them, and the accept loops that hand each socket (after its
//! TLS handshake for AMQPS) to a connection task.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use wharf_base::limits;

use crate::connection;
use crate::error::ServerError;
use crate::tls;

pub(crate) async fn bind_tls(
    t: &tls::TlsListener,
) -> Result<(TcpListener, SocketAddr, tokio_rustls::TlsAcceptor), ServerError> {
    let config = tls::server_config(&t.cert_file, &t.key_file)?;
    let bind_error = |source| ServerError::Bind {
        addr: t.bind.clone(),
        source,
    };
    let listener = TcpListener::bind(&t.bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr, tokio_rustls::TlsAcceptor::from(config)))
}

/// The AMQPS listener: each accepted socket does its TLS handshake (bounded by
/// `HANDSHAKE_WAIT`) in its own task, then is served like a plain one.
pub(crate) async fn tls_accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    ctx: connection::ConnCtx,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                    let acceptor = acceptor.clone();
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let handshake = tokio::time::timeout(
                            limits::HANDSHAKE_WAIT,
                            acceptor.accept(stream),
                        );
                        match handshake.await {
                            Ok(Ok(tls)) => connection::serve_stream(tls, peer, id, ctx).await,
                            Ok(Err(e)) => info!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => info!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Binds the AMQP listener on `bind` (`host:port`; port 0 picks a free one).
pub(crate) async fn bind_plain(bind: &str) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: bind.to_owned(),
        source,
    };
    let listener = TcpListener::bind(bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

pub(crate) async fn accept_loop(
    listener: TcpListener,
    ctx: connection::ConnCtx,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(connection::serve(stream, peer, id, ctx.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
