//! A small blocking HTTP client of the management API (ureq): basic auth, JSON bodies, and
//! every status returned as data (a 404 is an answer, not an error). Used by `wharfctl` and by
//! the tests. Depends on nothing of the broker.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value as JsonValue;

/// One answer of the API.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as text.
    pub body: String,
    /// The `WWW-Authenticate` header, if any.
    pub www_authenticate: Option<String>,
}

impl Answer {
    /// The body as JSON (`Null` when empty or not JSON).
    pub fn json(&self) -> JsonValue {
        serde_json::from_str(&self.body).unwrap_or(JsonValue::Null)
    }

    /// RabbitMQ's `reason` of an error answer, or the body.
    pub fn reason(&self) -> String {
        match self.json().get("reason").and_then(JsonValue::as_str) {
            Some(r) => r.to_owned(),
            None => self.body.clone(),
        }
    }
}

/// The transport failed: nothing answered (refused, unreachable, timed out).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// The HTTP agent: statuses as data, a global timeout, and rustls with the ring provider for
/// `https://` URLs, trusting `roots` (none given: no certificate is trusted, so an `https://`
/// URL needs [`Client::trusting`]).
fn agent(roots: Option<ureq::tls::RootCerts>) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(roots.unwrap_or_else(|| ureq::tls::RootCerts::new_with_certs(&[])))
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .build();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .tls_config(tls)
        .build()
        .into()
}

/// A client bound to one API root and one set of credentials.
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    auth: Option<String>,
}

impl Client {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:15672`), logging in as
    /// `user`/`password`.
    pub fn new(base: &str, user: &str, password: &str) -> Client {
        let mut client = Client::anonymous(base);
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        client.auth = Some(format!("Basic {token}"));
        client
    }

    /// A client that sends no credentials.
    pub fn anonymous(base: &str) -> Client {
        Client {
            agent: agent(None),
            base: base.trim_end_matches('/').to_owned(),
            auth: None,
        }
    }

    /// The same client, trusting (for `https://` URLs) only the certificates in the PEM
    /// text `ca_pem` (a self-signed certificate, or the CA that signed the server's).
    ///
    /// # Errors
    /// The text holds no PEM certificate.
    pub fn trusting(mut self, ca_pem: &[u8]) -> Result<Client, String> {
        let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(ca_pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                Ok(_) => None,
                Err(e) => Some(Err(e.to_string())),
            })
            .collect::<Result<_, _>>()?;
        if roots.is_empty() {
            return Err("no PEM certificate found".to_owned());
        }
        self.agent = agent(Some(ureq::tls::RootCerts::new_with_certs(&roots)));
        Ok(self)
    }

    /// Sends `method` to `path` (starting with `/`), with `body` as JSON when given.
    ///
    /// # Errors
    /// Nothing answered.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&JsonValue>,
    ) -> Result<Answer, Unreachable> {
        self.request_with(method, path, body, &[])
    }

    /// [`Client::request`] with extra `headers` (name, value).
    ///
    /// # Errors
    /// Nothing answered.
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&JsonValue>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, Unreachable> {
        let url = format!("{}{}", self.base, path);
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let builder = match &self.auth {
            Some(a) => builder.header("authorization", a),
            None => builder,
        };
        let bad = |e: ureq::http::Error| Unreachable(format!("bad request to {url}: {e}"));
        let result = if let Some(b) = body {
            let req = builder
                .header("content-type", "application/json")
                .body(b.to_string())
                .map_err(bad)?;
            self.agent.run(req)
        } else {
            self.agent.run(builder.body(()).map_err(bad)?)
        };
        let mut resp = result.map_err(|e| Unreachable(format!("{url}: {e}")))?;
        let status = resp.status().as_u16();
        let www_authenticate = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| Unreachable(format!("{url}: reading the answer: {e}")))?;
        Ok(Answer {
            status,
            body,
            www_authenticate,
        })
    }

    /// The API root this client talks to.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`.
    ///
    /// # Errors
    /// Nothing answered.
    pub fn get(&self, path: &str) -> Result<Answer, Unreachable> {
        self.request("GET", path, None)
    }
}

/// Percent-encodes one path segment (a vhost or object name), as the API expects (`/` is
/// `%2F`).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes a percent-encoded path segment ([`segment`]'s inverse); a malformed escape is
/// kept as written.
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let (b'%', Some(v)) = (b, hex) {
            out.push(v);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_undoes_segment() {
        for s in ["/", "a b", "q%1", "é-x_y.z~"] {
            assert_eq!(decode(&segment(s)), s);
        }
        assert_eq!(decode("%zz"), "%zz");
    }
}
