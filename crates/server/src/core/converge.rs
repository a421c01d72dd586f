//! The broker task's convergence on the metadata group's definitions (S-CLU-51) and its
//! handle on the group (`metadata.rs` holds the state and the sequencer task).

use std::sync::Arc;

use tracing::{error, info};

use wharf_broker::{Command, Event};
use wharf_cluster::MetadataGroup;
use wharf_store::Ticket;

use super::Core;
use super::metadata::{Configured, Meta};

impl Core {
    /// Makes the broker task a member of the metadata group (before it runs; starts its
    /// sequencer), `configured` giving the configured vhosts and users (S-CLU-54).
    pub fn set_metadata(&mut self, group: MetadataGroup, configured: Configured) {
        self.meta = Some(Meta::new(group, configured, Arc::clone(&self.clock)));
    }

    /// S-CLU-51: brings the live broker's cluster-wide definitions to the metadata group's
    /// committed ones, when the group applied something since the last time and no proposal
    /// of this node is in flight (its own definition is then in the committed state already).
    pub(super) fn converge(&mut self) {
        let passed = self.gate_passed().unwrap_or(Ticket::MAX);
        let Some(m) = self.meta.as_mut() else {
            return;
        };
        if !*m.ready.borrow() || passed < m.last_gate {
            return;
        }
        let applied = m.group.applied();
        if m.converged_at == Some(applied) {
            return;
        }
        m.converged_at = Some(applied);
        let events = m
            .group
            .machine
            .with(|c| wharf_cluster::reconcile(c.broker(), &self.broker));
        if events.is_empty() {
            return;
        }
        let first = self.events.len();
        info!(
            applied,
            events = events.len(),
            "converging on the metadata group's definitions"
        );
        let now = self.now();
        for event in events {
            if let Event::VhostDeleted { vhost } = &event {
                // Deleted as an operator would: its connections are closed, its queues go.
                let cmd = Command::VhostDelete {
                    vhost: vhost.clone(),
                };
                match self.broker.handle(cmd, now) {
                    Ok(out) => self.apply_outcome(out, None),
                    Err(e) => error!(error = %e, %vhost, "deleting a vhost the cluster deleted"),
                }
                continue;
            }
            match self.broker.apply(&event) {
                Ok(()) => self.events.push(event),
                Err(e) => error!(error = %e, ?event, "applying a definition of the cluster"),
            }
        }
        let last = self.events.len();
        if let Some(m) = self.meta.as_mut() {
            m.skip(first..last);
        }
        self.refresh_access();
    }
}
