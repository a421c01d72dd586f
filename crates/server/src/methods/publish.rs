//! `basic.publish` with its content: checked (the content's method must be a publish;
//! `immediate` is refused as RabbitMQ does, 540) and turned into the broker's [`Publish`].
//! The connection then checks the write permission on the exchange; the broker task routes
//! it and confirms it once durable (S-DUR-3).

use amq_protocol::protocol::{AMQPClass, basic};

use crate::convert::{Close, properties_from_wire};
use wharf_broker::Publish;
use wharf_protocol::{Content, reply_code};

/// The publish of a complete content in `vhost`, or the connection close that refuses it.
pub(crate) fn from_content(c: Content, vhost: &str) -> Result<Publish, Close> {
    let AMQPClass::Basic(basic::AMQPMethod::Publish(p)) = c.method else {
        return Err(Close::new(
            reply_code::COMMAND_INVALID,
            "unexpected content method",
        ));
    };
    if p.immediate {
        return Err(Close::new(reply_code::NOT_IMPLEMENTED, "immediate=true"));
    }
    Ok(Publish {
        vhost: vhost.to_owned(),
        exchange: p.exchange.as_str().to_owned(),
        routing_key: p.routing_key.as_str().to_owned(),
        mandatory: p.mandatory,
        properties: properties_from_wire(&c.header.properties),
        body: c.body,
    })
}
