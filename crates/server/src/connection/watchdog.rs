//! The read side's one timer (issue 18: no timer armed per socket read). Before, every socket
//! read was wrapped in its own `timeout`: a timer-wheel insertion and removal per read, on
//! every connection, which made broker CPU per message grow with the number of publishers.
//! Now a connection has one timer, armed once for the handshake and then once per heartbeat
//! interval, and a read only sets a flag.
//!
//! - Handshake: the client has `HANDSHAKE_WAIT` from the moment it was accepted to open the
//!   connection (RabbitMQ's `handshake_timeout`, counted from the accept).
//! - Running with heartbeats: the timer fires once per interval; an interval in which nothing
//!   was read is a missed heartbeat, and two missed in a row close the connection (RabbitMQ's
//!   heartbeat monitor: closed between two and three intervals after the last byte, S-PROTO-6).
//! - Running without heartbeats, and closing (the close has its own wait, S-PROTO-5): no timer.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::Sleep;

use wharf_base::limits;

/// Intervals in a row without a byte read after which a peer is taken for gone.
const MISSED_BEATS_MAX: u8 = 2;

/// What the timer watches for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// The handshake's deadline, counted from the accept.
    Handshake,
    /// One tick per heartbeat interval.
    Heartbeat(Duration),
    /// Nothing (no heartbeats negotiated, or the connection is closing).
    Off,
}

/// Why the timer ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Silence {
    /// The client did not open the connection within `HANDSHAKE_WAIT`.
    Handshake,
    /// Two heartbeat intervals in a row passed without a byte from the client.
    Heartbeats,
}

/// The decision logic, apart from the timer so that it is tested without time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Beats {
    watch: Watch,
    /// Bytes were read since the timer last fired.
    heard: bool,
    /// Intervals in a row in which nothing was read.
    missed: u8,
}

impl Beats {
    /// The timer fired: `Ok(Some(interval))` to fire again after `interval`, `Ok(None)` to
    /// stop, `Err` to close the connection.
    fn fired(&mut self) -> Result<Option<Duration>, Silence> {
        match self.watch {
            Watch::Handshake => Err(Silence::Handshake),
            Watch::Off => Ok(None),
            Watch::Heartbeat(interval) => {
                if std::mem::take(&mut self.heard) {
                    self.missed = 0;
                } else {
                    self.missed += 1;
                    if self.missed >= MISSED_BEATS_MAX {
                        return Err(Silence::Heartbeats);
                    }
                }
                Ok(Some(interval))
            }
        }
    }

    /// The connection moved on: returns the interval to arm the timer with when it starts
    /// watching heartbeats now.
    fn follow(&mut self, running: bool, closing: bool, heartbeat: Option<Duration>) -> Follow {
        let next = match (running, closing, heartbeat) {
            (_, true, _) | (true, false, None) => Watch::Off,
            (true, false, Some(hb)) => Watch::Heartbeat(hb),
            (false, false, _) => Watch::Handshake,
        };
        if next == self.watch {
            return Follow::Same;
        }
        // Only forward: handshake, then heartbeats, then off.
        let forward = matches!(
            (self.watch, next),
            (Watch::Handshake, _) | (Watch::Heartbeat(_), Watch::Off)
        );
        if !forward {
            return Follow::Same;
        }
        self.watch = next;
        self.heard = false;
        self.missed = 0;
        match next {
            Watch::Heartbeat(hb) => Follow::Arm(hb),
            Watch::Handshake | Watch::Off => Follow::Same,
        }
    }
}

/// What [`Beats::follow`] asks of the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follow {
    Same,
    Arm(Duration),
}

/// One connection's read timer.
pub(super) struct Watchdog {
    sleep: Pin<Box<Sleep>>,
    beats: Beats,
}

impl Watchdog {
    /// Armed for the handshake, from now (the accept).
    pub(super) fn new() -> Self {
        Watchdog {
            sleep: Box::pin(tokio::time::sleep(limits::HANDSHAKE_WAIT)),
            beats: Beats {
                watch: Watch::Handshake,
                heard: false,
                missed: 0,
            },
        }
    }

    /// Follows the connection's phase: from the handshake's deadline to heartbeat ticks once
    /// it runs (or to nothing), and to nothing once it closes.
    pub(super) fn follow(&mut self, running: bool, closing: bool, heartbeat: Option<Duration>) {
        if let Follow::Arm(interval) = self.beats.follow(running, closing, heartbeat) {
            self.sleep.set(tokio::time::sleep(interval));
        }
    }

    /// Bytes were read from the client.
    pub(super) fn heard(&mut self) {
        self.beats.heard = true;
    }

    /// Whether the timer is armed (a `select!` precondition for [`Watchdog::sleep`]).
    pub(super) fn armed(&self) -> bool {
        self.beats.watch != Watch::Off
    }

    /// The timer, to await in the read loop's `select!`; then call [`Watchdog::fired`].
    pub(super) fn sleep(&mut self) -> &mut Pin<Box<Sleep>> {
        &mut self.sleep
    }

    /// The timer fired: re-armed for the next interval, or the reason to close.
    pub(super) fn fired(&mut self) -> Result<(), Silence> {
        if let Some(interval) = self.beats.fired()? {
            // From now, not from the last deadline: a reader that paused (flow control, an
            // alarm) does not owe the ticks it slept through.
            self.sleep.set(tokio::time::sleep(interval));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HB: Duration = Duration::from_secs(10);

    fn running() -> Beats {
        let mut b = Beats {
            watch: Watch::Handshake,
            heard: false,
            missed: 0,
        };
        assert_eq!(b.follow(true, false, Some(HB)), Follow::Arm(HB));
        b
    }

    #[test]
    fn s_proto_6_a_handshake_not_finished_by_its_deadline_is_closed() {
        let mut b = Beats {
            watch: Watch::Handshake,
            heard: true,
            missed: 0,
        };
        assert_eq!(b.follow(false, false, None), Follow::Same);
        // Bytes read during the handshake do not move its deadline.
        assert_eq!(b.fired(), Err(Silence::Handshake));
    }

    #[test]
    fn s_proto_6_two_silent_intervals_in_a_row_close_the_connection() {
        let mut b = running();
        b.heard = true;
        assert_eq!(b.fired(), Ok(Some(HB)));
        // One silent interval is tolerated...
        assert_eq!(b.fired(), Ok(Some(HB)));
        // ...a byte in the next one starts the count again...
        b.heard = true;
        assert_eq!(b.fired(), Ok(Some(HB)));
        assert_eq!(b.fired(), Ok(Some(HB)));
        // ...and a second silent one in a row closes.
        assert_eq!(b.fired(), Err(Silence::Heartbeats));
    }

    #[test]
    fn s_proto_6_without_heartbeats_or_once_closing_nothing_is_watched() {
        let mut b = Beats {
            watch: Watch::Handshake,
            heard: false,
            missed: 0,
        };
        assert_eq!(b.follow(true, false, None), Follow::Same);
        assert_eq!(b.watch, Watch::Off);
        assert_eq!(b.fired(), Ok(None));
        let mut b = running();
        assert_eq!(b.follow(true, true, Some(HB)), Follow::Same);
        assert_eq!(b.fired(), Ok(None));
        // Closing is final: it never goes back to heartbeats.
        assert_eq!(b.follow(true, false, Some(HB)), Follow::Same);
        assert_eq!(b.watch, Watch::Off);
    }
}
