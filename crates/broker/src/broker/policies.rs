//! Policies and operator policies (S-POL): set and clear them, and recompute the effective
//! settings of the queues they match (S-POL-2, S-POL-3), re-deriving deadlines (S-TTL-11) and
//! enforcing a lowered length limit.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use super::Broker;
use super::state::QueueId;
use crate::args::{Policy, QueueSettings, parse_policy, select_policy};
use crate::error::{BrokerError, ErrorKind};
use crate::types::{Command, Effect, Event, Outcome, PolicySpec};

impl Broker {
    /// `PolicySet` / `PolicyClear`.
    pub(super) fn policy_command(
        &mut self,
        cmd: Command,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::PolicySet {
                vhost,
                policy,
                operator,
            } => self.set_policy(&vhost, policy, operator, now, out),
            Command::PolicyClear {
                vhost,
                name,
                operator,
            } => self.clear_policy(&vhost, &name, operator, now, out),
            other => unreachable!("not a policy command: {other:?}"),
        }
    }

    fn set_policy(
        &mut self,
        vhost: &str,
        spec: PolicySpec,
        operator: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        self.vhost(vhost)?;
        let policy = parse_policy(&spec, operator)?;
        for argument in &policy.ignored {
            out.effects.push(Effect::ArgumentIgnored {
                vhost: vhost.to_owned(),
                what: format!("policy '{}'", spec.name),
                argument: (*argument).to_owned(),
            });
        }
        self.install_policy(vhost, policy, operator);
        out.events.push(Event::PolicySet {
            vhost: vhost.to_owned(),
            policy: spec,
            operator,
        });
        self.reapply_policies(vhost, true, now, out);
        Ok(())
    }

    pub(super) fn install_policy(&mut self, vhost: &str, policy: Policy, operator: bool) {
        if let Some(v) = self.vhosts.get_mut(vhost) {
            let map = if operator {
                &mut v.operator_policies
            } else {
                &mut v.policies
            };
            map.insert(policy.spec.name.clone(), policy);
        }
    }

    fn clear_policy(
        &mut self,
        vhost: &str,
        name: &str,
        operator: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let v = self.vhosts.get_mut(vhost).ok_or_else(|| {
            BrokerError::new(ErrorKind::NotAllowed, format!("vhost '{vhost}' not found"))
        })?;
        let map = if operator {
            &mut v.operator_policies
        } else {
            &mut v.policies
        };
        if map.remove(name).is_none() {
            return Err(BrokerError::not_found(format!(
                "no policy '{name}' in vhost '{vhost}'"
            )));
        }
        out.events.push(Event::PolicyCleared {
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            operator,
        });
        self.reapply_policies(vhost, true, now, out);
        Ok(())
    }

    /// S-POL-3: recomputes every queue of the vhost at once.
    pub(super) fn reapply_policies(
        &mut self,
        vhost: &str,
        enforce: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let ids: Vec<QueueId> = self
            .vhosts
            .get(vhost)
            .map(|v| v.queues.values().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.apply_policies(id, enforce, now, out);
        }
    }

    /// Recomputes a queue's effective settings (S-POL-2). A TTL change re-derives every ready
    /// message's deadline from its enqueue time (S-TTL-11); with `enforce` a lowered length
    /// limit drops from the head at once (replay leaves that to the logged events).
    pub(super) fn apply_policies(
        &mut self,
        qid: QueueId,
        enforce: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get(&qid) else {
            return;
        };
        let Some(v) = self.vhosts.get(&*q.vhost) else {
            return;
        };
        let p = select_policy(v.policies.values(), &q.name);
        let o = select_policy(v.operator_policies.values(), &q.name);
        let eff = QueueSettings::effective(&q.args, p.map(|p| &p.settings), o.map(|p| &p.settings));
        let (pn, on) = (
            p.map(|p| p.spec.name.clone()),
            o.map(|p| p.spec.name.clone()),
        );
        let q = self.queues.get_mut(&qid).expect("looked up above");
        q.policy = pn;
        q.operator_policy = on;
        if q.eff != eff {
            q.ready.set_ttl(eff.message_ttl_ms);
            q.eff = eff;
            self.mark_dirty(qid);
            if enforce {
                self.enforce_length(qid, now, out);
            }
        }
    }
}
