//! TLS for the AMQPS listener (and, through [`server_config`], for the management API): a
//! `rustls::ServerConfig` built from PEM certificate-chain and private-key files named in the
//! configuration. rustls with the `ring` provider; TLS 1.2 and 1.3, no client certificates.
//! Must not depend on the broker: it only turns files into a TLS configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where a TLS listener (AMQPS, or the management API's HTTPS) listens and what it presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    /// `host:port` (port 0 picks a free one).
    pub bind: String,
    /// PEM file with the certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the certificate and key (e.g. they do not match).
    #[error("certificate {cert} with key {key}: {reason}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        reason: String,
    },
}

fn pem_error(path: &Path, reason: &dyn std::fmt::Display) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// A rustls server configuration presenting the chain in `cert_file` with the key in
/// `key_file`. The management API reuses it (with its own ALPN, if any).
///
/// # Errors
/// A file is unreadable, holds no certificate or key, or the key does not fit.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| pem_error(cert_file, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(cert_file, &e))?;
    if certs.is_empty() {
        return Err(pem_error(cert_file, &"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| pem_error(key_file, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config_error = |reason: String| TlsError::Config {
        cert: cert_file.to_owned(),
        key: key_file.to_owned(),
        reason,
    };
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| config_error(e.to_string()))?;
    Ok(Arc::new(config))
}
