//! [`Network`]: how outputs travel from the node to the clients. Today it delivers each
//! released output at once and in order (a loopback socket per client). It is the seam where a
//! simulated network (delays, reordering across connections, partitions, dropped connections)
//! plugs in for the cluster work: the run only ever sends through it and polls it.

use std::collections::VecDeque;

use crate::node::Output;

/// Outputs in flight from the node to the clients.
#[derive(Debug, Default)]
pub struct Network {
    in_flight: VecDeque<Output>,
}

impl Network {
    /// Hands released outputs to the network.
    pub fn send(&mut self, outputs: Vec<Output>) {
        self.in_flight.extend(outputs);
    }

    /// What arrives now (everything, in order, on the loopback network).
    pub fn deliver(&mut self) -> Vec<Output> {
        self.in_flight.drain(..).collect()
    }

    /// The node's connections died (crash, power loss): what was in flight is lost.
    pub fn reset(&mut self) {
        self.in_flight.clear();
    }
}
