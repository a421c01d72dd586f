//! wharf: a durable AMQP 0-9-1 message broker.
//!
//! Every confirmed message is fsync'd before its confirm; expiry is exact wherever a message
//! sits in a queue and survives requeues and restarts; dead-lettering is atomic.
//!
//! This package holds the two programs, `wharf` (the broker) and `wharfctl` (`rabbitmqctl`'s
//! commands over the management API), and [`testing`], the one module a service that tests
//! itself against wharf depends on. The broker itself is a workspace of one crate per layer
//! (`docs/DESIGN.md`); arrows point only downward and Cargo enforces them:
//!
//! ```text
//!   wharf (bins)   wharfctl -> wharf-ctl           tools/inspect
//!        |                                              |
//!   wharf-server   connections, broker task, mgmt API, config, testing
//!     |      \                                          |
//! wharf-protocol  wharf-store  <------------------------+
//!                   |      \
//!          wharf-broker   wharf-wal -> wharf-clock
//!                   \      /
//!                  wharf-base   limits, duration parsing
//! ```

pub mod testing;
