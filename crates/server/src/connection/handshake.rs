//! The handshake: protocol header, `connection.start` / `start-ok` (SASL PLAIN and AMQPLAIN,
//! checked against the user registry), `tune` / `tune-ok`, and `connection.open` (vhost
//! access, `connection_max`, registration with the broker task).

use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::{AMQPValue, FieldTable as WireTable, LongString};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::admission::Admission;
use super::{ConnLimits, Phase, Reader};
use crate::convert::{Close, broker_error_close, short};
use crate::core::{CoreMsg, OpenConn};
use crate::methods::MethodId;
use wharf_base::limits;
use wharf_protocol::{self as protocol, ChannelId, Frame, reply_code};

impl Reader {
    pub(super) fn send_start(&self) {
        let mut caps = WireTable::default();
        for cap in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "authentication_failure_close",
            "per_consumer_qos",
            // S-DRT: the `amq.rabbitmq.reply-to` pseudo-queue.
            "direct_reply_to",
        ] {
            caps.insert(short(cap), AMQPValue::Boolean(true));
        }
        let mut props = WireTable::default();
        let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
        props.insert(short("product"), text("wharf"));
        props.insert(short("version"), text(env!("CARGO_PKG_VERSION")));
        props.insert(short("platform"), text("Rust"));
        props.insert(short("information"), text("https://github.com/wharf"));
        props.insert(short("capabilities"), AMQPValue::FieldTable(caps));
        let start = AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: LongString::from("PLAIN AMQPLAIN"),
            locales: LongString::from("en_US"),
        }));
        self.outbox
            .send(|b| protocol::encode_method(b, ChannelId(0), &start));
    }

    pub(super) async fn on_handshake(&mut self, frame: Frame) {
        let Frame::Method(ch, method) = frame else {
            if frame == Frame::Heartbeat {
                return;
            }
            let close = Close::new(reply_code::UNEXPECTED_FRAME, "expected a method frame");
            self.close_connection(close, MethodId::NONE);
            return;
        };
        if ch.0 != 0 {
            let close = Close::new(
                reply_code::CHANNEL_ERROR,
                &format!("channel {} used before the connection is open", ch.0),
            );
            self.close_connection(close, MethodId::NONE);
            return;
        }
        match (self.phase, method) {
            (Phase::StartOk, AMQPClass::Connection(connection::AMQPMethod::StartOk(s))) => {
                self.on_start_ok(&s);
            }
            (Phase::TuneOk, AMQPClass::Connection(connection::AMQPMethod::TuneOk(t))) => {
                self.on_tune_ok(&t);
            }
            (Phase::Open, AMQPClass::Connection(connection::AMQPMethod::Open(o))) => {
                self.on_open(o.virtual_host.as_str().to_owned()).await;
            }
            (_, AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                self.send_close_ok();
                self.phase = Phase::Done;
            }
            (phase, _) => {
                let expected = match phase {
                    Phase::StartOk => "connection.start_ok",
                    Phase::TuneOk => "connection.tune_ok",
                    _ => "connection.open",
                };
                let close = Close::new(
                    reply_code::COMMAND_INVALID,
                    &format!("expected '{expected}'"),
                );
                self.close_connection(close, MethodId::NONE);
            }
        }
    }

    pub(super) fn on_start_ok(&mut self, s: &connection::StartOk) {
        let caps = s
            .client_properties
            .inner()
            .get("capabilities")
            .and_then(|v| match v {
                AMQPValue::FieldTable(t) => Some(t),
                _ => None,
            });
        let has = |name: &str| {
            caps.and_then(|t| t.inner().get(name))
                .is_some_and(|v| matches!(v, AMQPValue::Boolean(true)))
        };
        self.client_name = match s.client_properties.inner().get("connection_name") {
            Some(AMQPValue::LongString(name)) => {
                Some(String::from_utf8_lossy(name.as_bytes()).into_owned())
            }
            Some(AMQPValue::ShortString(name)) => Some(name.as_str().to_owned()),
            _ => None,
        };
        self.cancel_notify = has("consumer_cancel_notify");
        self.client_properties = crate::convert::table_from_wire(&s.client_properties);
        self.blocked_notify = has("connection.blocked");
        let mechanism = s.mechanism.as_str();
        let credentials = match mechanism {
            "PLAIN" => parse_plain(s.response.as_bytes()),
            "AMQPLAIN" => parse_amqplain(s.response.as_bytes()),
            _ => None,
        };
        let refusal = match credentials {
            None => Some(format!(
                "Login was refused using authentication mechanism {mechanism}. \
                 For details see the broker logfile."
            )),
            Some((user, password)) => {
                // S-CLU-70: a relayed connection's client logged in at the member that
                // relays it; the vhost's permissions are still checked at `connection.open`.
                let refusal = if self.ctx.trusted {
                    None
                } else {
                    self.ctx.users.check(&user, &password, self.peer).err()
                };
                self.user = user;
                refusal
            }
        };
        if let Some(text) = refusal {
            // S-OPS-5: the user is named (never the password), in RabbitMQ's words.
            let why = if text.contains("only connect via localhost") {
                "can only connect via localhost"
            } else {
                "invalid credentials"
            };
            warn!("{mechanism} login refused: user '{}' - {why}", self.user);
            // With authentication_failure_close (RabbitMQ sends it in any case) the client
            // learns why in a 403 close.
            self.close_connection(
                Close::new(reply_code::ACCESS_REFUSED, &text),
                MethodId::CONNECTION_START_OK,
            );
            return;
        }
        let tune = AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
            channel_max: self.ctx.limits.channel_max,
            frame_max: self.ctx.limits.frame_max,
            heartbeat: self.ctx.heartbeat_secs,
        }));
        self.outbox
            .send(|b| protocol::encode_method(b, ChannelId(0), &tune));
        self.phase = Phase::TuneOk;
    }

    pub(super) fn on_tune_ok(&mut self, t: &connection::TuneOk) {
        if let Some(text) = tune_ok_refusal(t, self.ctx.limits) {
            // S-PROTO-4: the spec says the server closes the socket "without attempting a
            // negotiated close"; RabbitMQ does, and logs this text.
            warn!(%text, "failed to negotiate connection parameters");
            self.phase = Phase::Done;
            return;
        }
        self.channel_max = t.channel_max;
        self.frame_max = t.frame_max;
        self.heartbeat = (t.heartbeat > 0).then(|| Duration::from_secs(u64::from(t.heartbeat)));
        let _ = self.heartbeat_tx.send(self.heartbeat);
        self.phase = Phase::Open;
    }

    pub(super) async fn on_open(&mut self, vhost: String) {
        let snapshot = self.ctx.users.snapshot();
        if !snapshot.may_open(&self.user, &vhost) {
            // RabbitMQ's texts (`rabbit_access_control:check_vhost_access`): an unknown vhost
            // first, then "some permission on the vhost".
            let text = if snapshot.has_vhost(&vhost) {
                format!("access to vhost '{vhost}' refused for user '{}'", self.user)
            } else {
                format!("vhost {vhost} not found")
            };
            warn!("connection {}: {text}", self.describe());
            self.close_connection(
                Close::new(reply_code::NOT_ALLOWED, &text),
                MethodId::CONNECTION_OPEN,
            );
            return;
        }
        let max = self.ctx.limits.connection_max;
        let Some(admission) = Admission::take(&self.ctx.open_connections, max) else {
            // RabbitMQ's answer to one connection over `connection_max`.
            let text = format!("connection refused: node connection limit ({max}) is reached");
            info!(max, "connection limit reached");
            self.close_connection(
                Close::new(reply_code::NOT_ALLOWED, &text),
                MethodId::CONNECTION_OPEN,
            );
            return;
        };
        self.admission = Some(admission);
        let (done, answer) = oneshot::channel();
        let open = OpenConn {
            conn: self.id,
            vhost: vhost.clone(),
            user: self.user.clone(),
            peer: self.peer,
            outbox: self.outbox.clone(),
            frame_max: self.frame_max,
            cancel_notify: self.cancel_notify,
            client_properties: std::mem::take(&mut self.client_properties),
            done,
        };
        if self
            .ctx
            .core
            .send(CoreMsg::Open(Box::new(open)))
            .await
            .is_err()
        {
            self.phase = Phase::Done;
            return;
        }
        match answer.await {
            Ok(Ok(())) => {
                // The broker task wrote open-ok (and connection.blocked if an alarm is on).
                self.registered = true;
                self.vhost = vhost;
                self.phase = Phase::Running;
                info!(
                    "connection {}: user '{}' authenticated and granted access to vhost '{}'",
                    self.describe(),
                    self.user,
                    self.vhost
                );
            }
            Ok(Err(e)) => {
                let mut close = broker_error_close(&e);
                if close.code == reply_code::NOT_ALLOWED {
                    close.text = format!("NOT_ALLOWED - vhost {vhost} not found");
                }
                self.close_connection(close, MethodId::CONNECTION_OPEN);
            }
            Err(_) => self.phase = Phase::Done,
        }
    }
}

/// Why `tune-ok` is refused, in RabbitMQ's words (`rabbit_reader`'s
/// `validate_negotiated_integer_value`), or `None`: `frame_max` below the spec's 4096 or
/// above (or 0, "no limit", against) what we offered, then the same for `channel_max`
/// (at least 1). Offered values are never 0, so a client's 0 is always more than offered.
fn tune_ok_refusal(t: &connection::TuneOk, offered: ConnLimits) -> Option<String> {
    let check = |field: &str, value: u32, min: u32, max: u32| {
        let detail = if field == "channel_max" && value == 0 {
            " (no limit)"
        } else {
            ""
        };
        if value != 0 && value < min {
            Some(format!(
                "negotiated {field} = {value}{detail} is lower than the minimum allowed value ({min})"
            ))
        } else if value == 0 || value > max {
            Some(format!(
                "negotiated {field} = {value}{detail} is higher than the maximum allowed value ({max})"
            ))
        } else {
            None
        }
    };
    check(
        "frame_max",
        t.frame_max,
        limits::FRAME_BYTES_MIN,
        offered.frame_max,
    )
    .or_else(|| {
        check(
            "channel_max",
            u32::from(t.channel_max),
            1,
            u32::from(offered.channel_max),
        )
    })
}

/// SASL PLAIN: `authzid NUL authcid NUL password`.
fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|&b| b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let password = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    if parts.next().is_some() {
        return None;
    }
    Some((user, password))
}

/// AMQPLAIN: a field table without its length prefix, holding `LOGIN` and `PASSWORD`.
fn parse_amqplain(response: &[u8]) -> Option<(String, String)> {
    let len = u32::try_from(response.len()).ok()?;
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(response);
    let table = protocol::decode_field_table(&framed).ok()?;
    let text = |key: &str| match table.inner().get(key)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    };
    Some((text("LOGIN")?, text("PASSWORD")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn plain_responses_parse_and_malformed_ones_do_not() {
        assert_eq!(
            parse_plain(b"\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(parse_plain(b"guest"), None);
        assert_eq!(parse_plain(b"\0a\0b\0c"), None);
        assert_eq!(parse_plain(b"\0\xff\0x"), None);
    }

    #[test]
    fn amqplain_responses_parse() {
        let mut t = WireTable::default();
        t.insert(
            short("LOGIN"),
            AMQPValue::LongString(LongString::from("guest")),
        );
        t.insert(
            short("PASSWORD"),
            AMQPValue::LongString(LongString::from("pw")),
        );
        let mut buf = BytesMut::new();
        protocol::encode::put_table(&mut buf, &t);
        let body = &buf[4..];
        assert_eq!(parse_amqplain(body), Some(("guest".into(), "pw".into())));
        assert_eq!(parse_amqplain(b"\x01"), None);
    }
}
