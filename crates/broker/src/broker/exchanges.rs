//! Exchanges and their bindings: declare (with RabbitMQ's equivalence checks), delete (with
//! the bindings from and to it, cascading to auto-delete sources), bind and unbind, and the
//! routing indexes a binding keeps.

use std::collections::HashMap;

use super::Broker;
use super::refusals::{default_exchange_refused, no_exchange};
use super::state::{Binding, Dest, Exchange, ExchangeId};
use crate::args::{self, assert_args_equivalence, assert_field_equivalence, rs_exchange};
use crate::error::{BrokerError, ErrorKind};
use crate::routing::{TopicIndex, validate_binding_args};
use crate::types::{
    Command, DelayedType, DestName, Effect, Event, ExchangeDeclare, ExchangeKind, Outcome,
};
use crate::value::{FieldTable, Value};

fn parse_kind(name: &str, args: &FieldTable, what: &str) -> Result<ExchangeKind, BrokerError> {
    let plain = |n: &str| match n {
        "direct" => Some(DelayedType::Direct),
        "fanout" => Some(DelayedType::Fanout),
        "topic" => Some(DelayedType::Topic),
        "headers" => Some(DelayedType::Headers),
        _ => None,
    };
    match name {
        "x-delayed-message" => {
            let t = args
                .get("x-delayed-type")
                .and_then(Value::as_str)
                .and_then(plain)
                .ok_or_else(|| {
                    BrokerError::precondition(format!(
                        "invalid arg 'x-delayed-type' for {what}: Invalid argument, 'x-delayed-type' must be an existing exchange type"
                    ))
                })?;
            Ok(ExchangeKind::Delayed(t))
        }
        other => match plain(other) {
            Some(DelayedType::Direct) => Ok(ExchangeKind::Direct),
            Some(DelayedType::Fanout) => Ok(ExchangeKind::Fanout),
            Some(DelayedType::Topic) => Ok(ExchangeKind::Topic),
            Some(DelayedType::Headers) => Ok(ExchangeKind::Headers),
            None => Err(BrokerError::new(
                ErrorKind::CommandInvalid,
                format!("unknown exchange type '{other}'"),
            )),
        },
    }
}

impl Exchange {
    /// The routing type (an `x-delayed-message` exchange routes as its delayed type).
    pub(super) fn routing_kind(&self) -> DelayedType {
        match self.kind {
            ExchangeKind::Direct => DelayedType::Direct,
            ExchangeKind::Fanout => DelayedType::Fanout,
            ExchangeKind::Topic => DelayedType::Topic,
            ExchangeKind::Headers => DelayedType::Headers,
            ExchangeKind::Delayed(t) => t,
        }
    }

    fn add_binding(&mut self, b: Binding) -> bool {
        if self.bindings.contains(&b) {
            return false;
        }
        match self.routing_kind() {
            DelayedType::Direct => self.direct.entry(b.key.clone()).or_default().push(b.dest),
            DelayedType::Topic => {
                self.topic.bind(&b.key, b.dest);
            }
            DelayedType::Fanout | DelayedType::Headers => {}
        }
        self.bindings.push(b);
        true
    }

    fn remove_binding(&mut self, b: &Binding) -> bool {
        let Some(i) = self.bindings.iter().position(|x| x == b) else {
            return false;
        };
        self.bindings.remove(i);
        // Another binding may share key and destination with other arguments.
        let still = self
            .bindings
            .iter()
            .any(|x| x.key == b.key && x.dest == b.dest);
        if !still {
            match self.routing_kind() {
                DelayedType::Direct => {
                    if let Some(v) = self.direct.get_mut(&b.key) {
                        v.retain(|d| *d != b.dest);
                        if v.is_empty() {
                            self.direct.remove(&b.key);
                        }
                    }
                }
                DelayedType::Topic => {
                    self.topic.unbind(&b.key, b.dest);
                }
                DelayedType::Fanout | DelayedType::Headers => {}
            }
        }
        true
    }
}

impl Broker {
    /// `ExchangeDeclare` / `ExchangeDelete` / `ExchangeBind` / `QueueBind` (bindings are the
    /// exchanges' own).
    pub(super) fn exchange_command(
        &mut self,
        cmd: Command,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::ExchangeDeclare(d) => self.declare_exchange(d, out),
            Command::ExchangeDelete {
                vhost,
                exchange,
                if_unused,
            } => self.delete_exchange_cmd(&vhost, &exchange, if_unused, out),
            Command::ExchangeBind {
                vhost,
                destination,
                source,
                routing_key,
                arguments,
                bind,
            } => {
                let ends = self.check_bindable(&vhost, &source).and_then(|src| {
                    let dest = Dest::Exchange(self.check_bindable(&vhost, &destination)?);
                    Ok((src, dest))
                });
                let Some((src, dest)) = unbind_of_missing_is_ok(ends, bind)? else {
                    return Ok(());
                };
                self.bind(&vhost, src, dest, routing_key, arguments, bind, out)
            }
            Command::QueueBind {
                vhost,
                queue,
                exchange,
                routing_key,
                arguments,
                bind,
                owner,
            } => {
                let ends = self.find_queue(&vhost, &queue, owner).and_then(|qid| {
                    let src = self.check_bindable(&vhost, &exchange)?;
                    Ok((src, Dest::Queue(qid)))
                });
                let Some((src, dest)) = unbind_of_missing_is_ok(ends, bind)? else {
                    return Ok(());
                };
                self.bind(&vhost, src, dest, routing_key, arguments, bind, out)
            }
            other => unreachable!("not an exchange command: {other:?}"),
        }
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of an exchange")]
    pub(super) fn create_exchange(
        &mut self,
        vhost: &str,
        name: &str,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> ExchangeId {
        let id = ExchangeId(self.next_exchange);
        self.next_exchange += 1;
        let alternate = arguments
            .get("alternate-exchange")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.exchanges.insert(
            id,
            Exchange {
                id,
                vhost: vhost.into(),
                name: name.into(),
                kind,
                durable,
                auto_delete,
                internal,
                arguments,
                alternate,
                bindings: Vec::new(),
                direct: HashMap::new(),
                topic: TopicIndex::new(),
                stats: crate::ExchangeStats::default(),
            },
        );
        if let Some(v) = self.vhosts.get_mut(vhost) {
            v.exchanges.insert(name.to_owned(), id);
        }
        id
    }

    fn declare_exchange(
        &mut self,
        d: ExchangeDeclare,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.vhost(&d.vhost)?;
        if d.exchange.is_empty() {
            return Err(default_exchange_refused());
        }
        let what = rs_exchange(&d.vhost, &d.exchange);
        if let Some(&id) = vhost.exchanges.get(&d.exchange) {
            if d.passive {
                return Ok(());
            }
            let x = &self.exchanges[&id];
            let kind = parse_kind(&d.kind, &d.arguments, &what)?;
            assert_field_equivalence(&what, "type", x.kind.name(), kind.name())?;
            if let (ExchangeKind::Delayed(a), ExchangeKind::Delayed(b)) = (x.kind, kind)
                && a != b
            {
                return Err(BrokerError::precondition(format!(
                    "inequivalent arg 'x-delayed-type' for {what}"
                )));
            }
            let b = |v: bool| if v { "true" } else { "false" };
            assert_field_equivalence(&what, "durable", b(x.durable), b(d.durable))?;
            assert_field_equivalence(&what, "auto_delete", b(x.auto_delete), b(d.auto_delete))?;
            assert_field_equivalence(&what, "internal", b(x.internal), b(d.internal))?;
            assert_args_equivalence(&what, &x.arguments, &d.arguments, &["alternate-exchange"])?;
            return Ok(());
        }
        if d.passive {
            return Err(no_exchange(&d.vhost, &d.exchange));
        }
        if d.exchange.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!(
                    "exchange name '{}' contains reserved prefix 'amq.*'",
                    d.exchange
                ),
            ));
        }
        let kind = parse_kind(&d.kind, &d.arguments, &what)?;
        if let Some(ae) = d.arguments.get("alternate-exchange")
            && ae.as_str().is_none()
        {
            return Err(BrokerError::precondition(format!(
                "invalid arg 'alternate-exchange' for {what}: {{unacceptable_type,{}}}",
                args::type_name(ae)
            )));
        }
        self.create_exchange(
            &d.vhost,
            &d.exchange,
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments.clone(),
        );
        if d.durable {
            out.events.push(Event::ExchangeDeclared {
                vhost: d.vhost,
                exchange: d.exchange,
                kind,
                auto_delete: d.auto_delete,
                internal: d.internal,
                arguments: d.arguments,
            });
        }
        Ok(())
    }

    fn delete_exchange_cmd(
        &mut self,
        vhost: &str,
        name: &str,
        if_unused: bool,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let v = self.vhost(vhost)?;
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        let Some(&id) = v.exchanges.get(name) else {
            return Ok(());
        };
        if name.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!(
                    "deletion of system {} not allowed",
                    rs_exchange(vhost, name)
                ),
            ));
        }
        if if_unused && !self.exchanges[&id].bindings.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} in use",
                rs_exchange(vhost, name)
            )));
        }
        self.delete_exchange(id, true, out);
        Ok(())
    }

    /// Deletes an exchange with the bindings from and to it; cascades to auto-delete
    /// exchanges that lose their last binding.
    pub(super) fn delete_exchange(&mut self, id: ExchangeId, log: bool, out: &mut Outcome) {
        let Some(x) = self.exchanges.remove(&id) else {
            return;
        };
        if let Some(v) = self.vhosts.get_mut(&*x.vhost) {
            v.exchanges.remove(&*x.name);
        }
        if log && x.durable {
            out.events.push(Event::ExchangeDeleted {
                vhost: x.vhost.to_string(),
                exchange: x.name.to_string(),
            });
        }
        out.effects.push(Effect::ExchangeDeleted {
            vhost: x.vhost.to_string(),
            exchange: x.name.to_string(),
        });
        self.remove_bindings_to(&x.vhost, Dest::Exchange(id), log, out);
    }

    /// Removes every binding whose destination is `dest`; auto-delete sources left without
    /// bindings are deleted.
    pub(super) fn remove_bindings_to(
        &mut self,
        vhost: &str,
        dest: Dest,
        log: bool,
        out: &mut Outcome,
    ) {
        let Some(v) = self.vhosts.get(vhost) else {
            return;
        };
        let sources: Vec<ExchangeId> = v.exchanges.values().copied().collect();
        let mut emptied = Vec::new();
        for sid in sources {
            let Some(x) = self.exchanges.get_mut(&sid) else {
                continue;
            };
            let doomed: Vec<Binding> = x
                .bindings
                .iter()
                .filter(|b| b.dest == dest)
                .cloned()
                .collect();
            if doomed.is_empty() {
                continue;
            }
            for b in &doomed {
                x.remove_binding(b);
            }
            if x.auto_delete && x.bindings.is_empty() {
                emptied.push(sid);
            }
        }
        for sid in emptied {
            self.delete_exchange(sid, log, out);
        }
    }

    pub(super) fn dest_name(&self, dest: Dest) -> Option<(DestName, bool)> {
        match dest {
            Dest::Queue(q) => self
                .queues
                .get(&q)
                .map(|q| (DestName::Queue(q.name.to_string()), q.logged())),
            Dest::Exchange(x) => self
                .exchanges
                .get(&x)
                .map(|x| (DestName::Exchange(x.name.to_string()), x.durable)),
        }
    }

    /// Adds or removes a binding; logs it when both ends are durable.
    #[expect(clippy::too_many_arguments, reason = "the fields of a binding")]
    pub(super) fn set_binding(
        &mut self,
        vhost: &str,
        source: ExchangeId,
        dest: Dest,
        key: String,
        arguments: FieldTable,
        bind: bool,
        log: bool,
        out: &mut Outcome,
    ) {
        let Some((dest_name, dest_durable)) = self.dest_name(dest) else {
            return;
        };
        let Some(x) = self.exchanges.get_mut(&source) else {
            return;
        };
        let b = Binding {
            key,
            dest,
            args: arguments,
        };
        let changed = if bind {
            x.add_binding(b.clone())
        } else {
            x.remove_binding(&b)
        };
        let source_name = x.name.to_string();
        let durable = x.durable && dest_durable;
        let emptied = !bind && x.auto_delete && x.bindings.is_empty();
        if changed && log && durable {
            let (routing_key, arguments) = (b.key, b.args);
            out.events.push(if bind {
                Event::Bound {
                    vhost: vhost.to_owned(),
                    source: source_name,
                    destination: dest_name,
                    routing_key,
                    arguments,
                }
            } else {
                Event::Unbound {
                    vhost: vhost.to_owned(),
                    source: source_name,
                    destination: dest_name,
                    routing_key,
                    arguments,
                }
            });
        }
        if changed && emptied {
            self.delete_exchange(source, log, out);
        }
    }

    fn check_bindable(&self, vhost: &str, exchange: &str) -> Result<ExchangeId, BrokerError> {
        if exchange.is_empty() {
            return Err(default_exchange_refused());
        }
        self.find_exchange(vhost, exchange)
    }

    /// `exchange.bind` / `queue.bind` and their unbinds, once both ends are found: a headers
    /// binding's arguments are checked first.
    #[expect(clippy::too_many_arguments, reason = "the fields of a binding command")]
    pub(super) fn bind(
        &mut self,
        vhost: &str,
        src: ExchangeId,
        dest: Dest,
        key: String,
        arguments: FieldTable,
        bind: bool,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        if bind && self.exchanges[&src].routing_kind() == DelayedType::Headers {
            validate_binding_args(&arguments)?;
        }
        self.set_binding(vhost, src, dest, key, arguments, bind, true, out);
        Ok(())
    }
}

/// S-PROTO-2: as RabbitMQ, an unbind whose queue or exchange does not exist answers
/// `unbind-ok` (there is nothing to remove); a bind still fails with 404. `Ok(None)` means
/// "done, nothing to change".
fn unbind_of_missing_is_ok<T>(
    ends: Result<T, BrokerError>,
    bind: bool,
) -> Result<Option<T>, BrokerError> {
    match ends {
        Ok(ends) => Ok(Some(ends)),
        Err(e) if !bind && e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
