//! Errors of starting or stopping the server ([`ServerError`]).

use crate::tls;
use wharf_broker::BrokerError;
use wharf_store::StoreError;

/// Errors of starting or stopping the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened or closed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A configured vhost could not be created.
    #[error("cannot create vhost '{name}': {refusal}")]
    Vhost {
        /// The vhost.
        name: String,
        /// The broker's refusal (in the message, so not also a `source`: a report of the
        /// chain would print it twice).
        refusal: BrokerError,
    },
    /// A configured user could not be put into the broker.
    #[error("cannot create user '{name}': {reason}")]
    User {
        /// The user.
        name: String,
        /// Why.
        reason: String,
    },
    /// The TLS certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A task of the server failed.
    #[error("server task failed: {0}")]
    Task(tokio::task::JoinError),
}
