//! wharf's leaf crate: what every layer may use and nothing depends below.
//!
//! - [`limits`]: every hard limit, with compile-time checks between them.
//! - [`duration`]: [`parse_duration`], the one way a duration is written (`30m`, `1h30m`).
//! - [`histogram`]: [`Histogram`], lock-free bucket counts for the metrics endpoint.
//!
//! No clock lives here: the broker depends on this crate and must not be able to read the time
//! (the clock is `wharf-clock`).

pub mod duration;
pub mod histogram;
pub mod limits;

pub use duration::{DurationError, parse_duration};
pub use histogram::{Histogram, HistogramSnapshot};
