//! [`Admission`]: one place among `connection_max`, given back when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// One place among `connection_max`, given back when dropped.
pub(super) struct Admission(Arc<AtomicU32>);

impl Admission {
    /// Takes a place, or `None` when all `max` are taken.
    pub(super) fn take(open: &Arc<AtomicU32>, max: u32) -> Option<Admission> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Admission(open.clone()))
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
