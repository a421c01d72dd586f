//! The server layer: tokio glue from sockets to the broker (listeners, connections, channels,
//! group commit, timers). It may use every other layer but holds no business rules. For now it
//! holds only [`convert`], the mapping between wire values and broker values.

pub mod convert;
