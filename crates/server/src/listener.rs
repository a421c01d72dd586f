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

/// Binds the AMQP listeners (S-NET-1): every address of `bind` (a comma-separated list of
/// `host:port`; each must bind), then each of `bind_if_available` that can be bound (one that
/// cannot is logged and skipped: `::1` on a host without IPv6). An address with port 0 after
/// the first takes the first one's port, so that one port serves every address. Returns the
/// listeners, the first one's address first.
pub(crate) async fn bind_plain(
    bind: &str,
    bind_if_available: &[String],
) -> Result<Vec<(TcpListener, SocketAddr)>, ServerError> {
    let mut bound: Vec<(TcpListener, SocketAddr)> = Vec::new();
    let required = bind.split(',').map(|a| (a.trim(), true));
    let optional = bind_if_available.iter().map(|a| (a.as_str(), false));
    for (addr, required) in required.chain(optional) {
        let port = bound.first().map(|(_, a)| a.port());
        match bind_one(addr, port).await {
            Ok(listener) => bound.push(listener),
            Err(e) if !required => warn!(error = %e, "not listening on an optional address"),
            Err(e) => return Err(e),
        }
    }
    Ok(bound)
}

/// Binds `addr`, with `port` instead of a port 0 when given.
async fn bind_one(addr: &str, port: Option<u16>) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: addr.to_owned(),
        source,
    };
    let mut resolved: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(bind_error)?
        .collect();
    if let Some(port) = port {
        for a in resolved.iter_mut().filter(|a| a.port() == 0) {
            a.set_port(port);
        }
    }
    let listener = TcpListener::bind(resolved.as_slice())
        .await
        .map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// One accept loop per listener, until `stop`.
pub(crate) async fn accept_loops(
    listeners: Vec<TcpListener>,
    ctx: connection::ConnCtx,
    stop: watch::Receiver<bool>,
) {
    let mut loops = tokio::task::JoinSet::new();
    for listener in listeners {
        loops.spawn(accept_loop(listener, ctx.clone(), stop.clone()));
    }
    while loops.join_next().await.is_some() {}
}

async fn accept_loop(
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
