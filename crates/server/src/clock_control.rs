//! Clock control (`--test-clock`, `crate::testing`): moving a server's manual clock from
//! outside and waking the broker at once, so every TTL, queue lease and scheduled message
//! reacts exactly as if that time had passed (docs/DESIGN.md, "Injected time and disk are product
//! features"). The management API and `wharfctl clock` expose these operations; the fixture
//! binary reads them from stdin. Holds no rule of its own: what is due is the broker's
//! decision (`Broker::expire_due`), reached through the broker task's timer step.

use std::time::Duration;

use wharf_clock::{Clock, ManualClock};

use crate::handle::ServerHandle;

/// Why a clock-control operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockControlError {
    /// The server runs on its real clock (it was not started with clock control).
    #[error("clock control is not enabled (start wharf with --test-clock)")]
    NotEnabled,
    /// The requested time is before the clock's current time. Time only moves forward: what
    /// already expired (and was logged) cannot un-expire.
    #[error("the clock stands at {now_ms} ms; it cannot be set back to {requested_ms} ms")]
    Backwards {
        /// The clock's time, ms since the Unix epoch.
        now_ms: u64,
        /// The refused time.
        requested_ms: u64,
    },
    /// The resulting time does not fit in milliseconds since the epoch (`u64`).
    #[error("advancing the clock by {by:?} overflows")]
    Overflow {
        /// The refused step.
        by: Duration,
    },
}

impl ServerHandle {
    /// Whether this server runs with clock control (`ServerConfig::clock_control`).
    pub fn clock_control_enabled(&self) -> bool {
        self.clock_control.is_some()
    }

    /// The manual clock's time, ms since the Unix epoch.
    ///
    /// # Errors
    /// [`ClockControlError::NotEnabled`] without clock control.
    pub fn clock_now(&self) -> Result<u64, ClockControlError> {
        self.clock_control
            .as_ref()
            .map(Clock::now_ms)
            .ok_or(ClockControlError::NotEnabled)
    }

    /// Moves the manual clock forward by `by` and runs the broker's timer step at once.
    /// Resolves, with the new time, once everything that became due is done and the resulting
    /// frames (deliveries, dead-lettered messages reaching consumers, ...) are handed to the
    /// connections' writers.
    ///
    /// # Errors
    /// [`ClockControlError::NotEnabled`] without clock control; [`ClockControlError::Overflow`]
    /// past `u64::MAX` ms.
    pub async fn clock_advance(&self, by: Duration) -> Result<u64, ClockControlError> {
        let now = advance(self.clock_control.as_ref(), by)?;
        self.tick().await;
        Ok(now)
    }

    /// Sets the manual clock to `now_ms` (ms since the Unix epoch; not earlier than its current
    /// time) and runs the timer step, as [`ServerHandle::clock_advance`] does.
    ///
    /// # Errors
    /// [`ClockControlError::NotEnabled`] without clock control; [`ClockControlError::Backwards`]
    /// for a time before the clock's current one.
    pub async fn clock_set(&self, now_ms: u64) -> Result<u64, ClockControlError> {
        let now = set(self.clock_control.as_ref(), now_ms)?;
        self.tick().await;
        Ok(now)
    }
}

/// Moves `clock` (the server's clock control, if enabled) forward by `by` and returns the new
/// time. The caller then runs the broker's timer step (the handle's `tick`, or the management
/// API's).
///
/// # Errors
/// [`ClockControlError::NotEnabled`] for `None`; [`ClockControlError::Overflow`] past
/// `u64::MAX` ms.
pub(crate) fn advance(clock: Option<&ManualClock>, by: Duration) -> Result<u64, ClockControlError> {
    let clock = clock.ok_or(ClockControlError::NotEnabled)?;
    let by_ms = u64::try_from(by.as_millis()).map_err(|_| ClockControlError::Overflow { by })?;
    clock
        .now_ms()
        .checked_add(by_ms)
        .ok_or(ClockControlError::Overflow { by })?;
    clock.advance(by);
    Ok(clock.now_ms())
}

/// Sets `clock` to `now_ms` (never backwards) and returns the new time; as [`advance`].
///
/// # Errors
/// [`ClockControlError::NotEnabled`] for `None`; [`ClockControlError::Backwards`] for a time
/// before the clock's current one.
pub(crate) fn set(clock: Option<&ManualClock>, now_ms: u64) -> Result<u64, ClockControlError> {
    let clock = clock.ok_or(ClockControlError::NotEnabled)?;
    let current = clock.now_ms();
    if now_ms < current {
        return Err(ClockControlError::Backwards {
            now_ms: current,
            requested_ms: now_ms,
        });
    }
    clock.set(now_ms);
    Ok(clock.now_ms())
}
