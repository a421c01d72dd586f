//! The messages of one queue: ready entries in queue order and an index by deadline.
//! Must not depend on anything outside `broker`.
