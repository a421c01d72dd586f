//! The Jepsen-style test's checker (tests/support/jepsen/checker.rs) on hand-made histories:
//! a clean history passes, and each kind of violation (a lost confirmed message, a duplicate
//! without the redelivered flag, a phantom, an order inversion, a lost dead letter, two
//! outcomes) is reported, while what a broker may legitimately do (lose an unconfirmed
//! publish, redeliver with the flag, redeliver after an ack that never took effect) is not.

use crate::jepsen::checker::{Violation, check};
use crate::jepsen::history::{Event, Msg, Op, Queue, Settle};
use crate::jepsen::replay::parse_event;

/// A history written by hand, one event a step.
#[derive(Default)]
struct H(Vec<Event>);

fn m(publisher: u32, seq: u64) -> Msg {
    Msg { publisher, seq }
}

impl H {
    fn op(mut self, op: Op) -> H {
        let at_us = self.0.len() as u64;
        self.0.push(Event {
            at_us,
            client: "t".into(),
            op,
        });
        self
    }
    /// Published on `conn` and confirmed.
    fn confirmed(self, conn: u64, msg: Msg) -> H {
        self.answered(conn, msg, true)
    }
    /// Published on `conn` and acked (`ack`) or nacked.
    fn answered(self, conn: u64, msg: Msg, ack: bool) -> H {
        self.op(Op::Publish { conn, msg })
            .op(Op::Confirm { conn, msg, ack })
    }
    fn deliver(self, conn: u64, queue: Queue, msg: Msg, redelivered: bool) -> H {
        self.op(Op::Deliver {
            conn,
            queue,
            body: msg.body(),
            redelivered,
        })
    }
    fn settle(self, conn: u64, queue: Queue, msg: Msg, how: Settle) -> H {
        self.op(Op::Settle {
            conn,
            queue,
            msg,
            how,
        })
    }
    fn synced(self, conn: u64) -> H {
        self.op(Op::Synced { conn })
    }
    fn check(&self) -> Vec<Violation> {
        check(&self.0).violations
    }
}

/// Publisher 1 on connection 1 sends and gets confirms for 1..=3; 2 is rejected into the
/// dead-letter queue by consumer 2 and read from there by consumer 3; every settlement is
/// followed by a reply.
fn clean() -> H {
    let h = clean_events();
    assert_eq!(h.0.len(), CLEAN);
    h
}

/// How many events [`clean`] has; its ack of message 3 took effect at `CLEAN - 4`.
const CLEAN: usize = 16;

fn clean_events() -> H {
    H::default()
        .confirmed(1, m(1, 1))
        .confirmed(1, m(1, 2))
        .confirmed(1, m(1, 3))
        .deliver(2, Queue::Source, m(1, 1), false)
        .settle(2, Queue::Source, m(1, 1), Settle::Ack)
        .deliver(2, Queue::Source, m(1, 2), false)
        .settle(2, Queue::Source, m(1, 2), Settle::Reject)
        .deliver(2, Queue::Source, m(1, 3), false)
        .settle(2, Queue::Source, m(1, 3), Settle::Ack)
        .synced(2)
        .deliver(3, Queue::Dead, m(1, 2), false)
        .settle(3, Queue::Dead, m(1, 2), Settle::Ack)
        .synced(3)
}

#[test]
fn a_clean_history_passes() {
    let h = clean();
    assert_eq!(h.check(), vec![]);
    let r = check(&h.0);
    assert_eq!((r.published, r.confirmed, r.maybe), (3, 3, 0));
    assert_eq!((r.delivered, r.dead_lettered), (3, 1));
}

/// S-CLU-30: a confirmed message delivered from neither queue is lost; an unconfirmed one
/// (its connection lost, or nacked) may be absent.
#[test]
fn s_clu_30_a_lost_confirmed_message_is_reported_and_a_maybe_is_not() {
    let h = clean()
        .confirmed(1, m(1, 4))
        .op(Op::Publish {
            conn: 1,
            msg: m(1, 5),
        })
        .op(Op::Publish {
            conn: 1,
            msg: m(1, 6),
        })
        .op(Op::Confirm {
            conn: 1,
            msg: m(1, 6),
            ack: false,
        })
        .op(Op::Closed {
            conn: 1,
            why: "gone".into(),
        });
    assert_eq!(
        h.check(),
        vec![Violation::Lost {
            msg: m(1, 4),
            confirmed: CLEAN + 1
        }]
    );
    let r = check(&h.0);
    assert_eq!((r.confirmed, r.maybe, r.maybe_present), (4, 2, 0));
}

/// S-CLU-30: a reject that took effect and a message never seen in the dead-letter queue.
#[test]
fn s_clu_30_a_lost_dead_letter_is_reported() {
    let h = H::default()
        .confirmed(1, m(1, 1))
        .deliver(2, Queue::Source, m(1, 1), false)
        .settle(2, Queue::Source, m(1, 1), Settle::Reject)
        .synced(2);
    assert_eq!(
        h.check(),
        vec![Violation::LostDeadLetter {
            msg: m(1, 1),
            rejected: 4
        }]
    );
}

/// S-CLU-31: a second delivery without the flag is a duplicate; with the flag (its first
/// consumer's connection lost before its ack took effect) it is not.
#[test]
fn s_clu_31_a_duplicate_without_the_redelivered_flag_is_reported() {
    let flagged = clean()
        .deliver(4, Queue::Source, m(1, 9), false)
        .op(Op::Publish {
            conn: 1,
            msg: m(1, 9),
        });
    // A phantom first (delivered before any publish of it); then the real case.
    assert!(matches!(flagged.check()[..], [Violation::Phantom { .. }]));

    let h = clean()
        .confirmed(1, m(1, 4))
        .deliver(4, Queue::Source, m(1, 4), false)
        .settle(4, Queue::Source, m(1, 4), Settle::Ack)
        .op(Op::Closed {
            conn: 4,
            why: "connection reset".into(),
        })
        .deliver(5, Queue::Source, m(1, 4), true);
    assert_eq!(
        h.check(),
        vec![],
        "redelivered with the flag, ack never synced"
    );
    let h = h.deliver(6, Queue::Source, m(1, 4), false);
    assert_eq!(
        h.check(),
        vec![Violation::DuplicateWithoutFlag {
            queue: Queue::Source,
            msg: m(1, 4),
            first: CLEAN + 2,
            again: CLEAN + 6
        }]
    );
}

/// S-CLU-31: a delivery after an ack that took effect is a duplicate even with the flag.
#[test]
fn s_clu_31_a_delivery_after_a_committed_ack_is_reported() {
    let h = clean().deliver(5, Queue::Source, m(1, 3), true);
    assert_eq!(
        h.check(),
        vec![Violation::DeliveredAfterSettle {
            queue: Queue::Source,
            msg: m(1, 3),
            settled: CLEAN - 4,
            again: CLEAN
        }]
    );
}

/// S-CLU-31: acked from the source and dead-lettered too; dead-lettered without a reject.
#[test]
fn s_clu_31_two_outcomes_are_reported() {
    let h = clean().deliver(3, Queue::Dead, m(1, 1), false);
    assert_eq!(
        h.check(),
        vec![
            Violation::AckedAndDeadLettered {
                msg: m(1, 1),
                acked: CLEAN - 4,
                dead: CLEAN
            },
            Violation::DeadLetteredWithoutReject {
                msg: m(1, 1),
                at: CLEAN
            }
        ]
    );
}

/// S-CLU-32: a body no publisher sent, or no body of ours at all.
#[test]
fn s_clu_32_a_phantom_is_reported() {
    let h = clean()
        .deliver(2, Queue::Source, m(7, 1), false)
        .op(Op::Deliver {
            conn: 2,
            queue: Queue::Dead,
            body: "hello".into(),
            redelivered: false,
        });
    assert_eq!(
        h.check(),
        vec![
            Violation::Phantom {
                at: CLEAN,
                body: m(7, 1).body()
            },
            Violation::Phantom {
                at: CLEAN + 1,
                body: "hello".into()
            }
        ]
    );
}

/// S-CLU-33: one consumer channel's first deliveries out of a publisher's order are an
/// inversion; two channels interleaving, another publisher, and redeliveries are not.
#[test]
fn s_clu_33_an_order_inversion_is_reported() {
    let base = H::default()
        .confirmed(1, m(1, 1))
        .confirmed(1, m(1, 2))
        .confirmed(1, m(1, 3))
        .confirmed(9, m(2, 1));
    let fine = H(base.0.clone())
        .deliver(2, Queue::Source, m(1, 2), false)
        .deliver(3, Queue::Source, m(1, 1), false)
        .deliver(2, Queue::Source, m(2, 1), false)
        .deliver(2, Queue::Source, m(1, 1), true)
        .deliver(2, Queue::Source, m(1, 3), false);
    assert_eq!(fine.check(), vec![]);
    let inverted = H(base.0)
        .deliver(2, Queue::Source, m(1, 3), false)
        .deliver(2, Queue::Source, m(1, 1), false)
        .deliver(2, Queue::Source, m(1, 2), false)
        .deliver(3, Queue::Source, m(2, 1), false);
    assert_eq!(
        inverted.check(),
        vec![
            Violation::OrderInversion {
                queue: Queue::Source,
                conn: 2,
                later: m(1, 3),
                earlier: m(1, 1),
                at: 9
            },
            Violation::OrderInversion {
                queue: Queue::Source,
                conn: 2,
                later: m(1, 3),
                earlier: m(1, 2),
                at: 10
            }
        ]
    );
}

/// S-CLU-33 (issue #17, CI seed 13420187199710183380, every-node routing): a publisher's
/// message nacked when its channel's relay to the leader ended (S-CLU-74) may still be
/// enqueued by the leader, after what the publisher then sent on a new connection: no promise
/// orders two channels' messages unless a confirm did. A message acked before the other was
/// published, or one earlier on the same channel (nacked or not), must still come first.
#[test]
fn s_clu_33_order_across_a_publishers_channels_follows_its_confirms() {
    // Publisher 1: 1 acked on connection 1; 2 published on connection 1, acked or nacked (as
    // its relay ended); 3 acked on connection `third`. Consumer 2 gets 1, 3, then 2.
    let run = |two_acked: bool, third: u64| {
        H::default()
            .confirmed(1, m(1, 1))
            .answered(1, m(1, 2), two_acked)
            .confirmed(third, m(1, 3))
            .deliver(2, Queue::Source, m(1, 1), false)
            .deliver(2, Queue::Source, m(1, 3), false)
            .deliver(2, Queue::Source, m(1, 2), false)
            .check()
    };
    let inversion = vec![Violation::OrderInversion {
        queue: Queue::Source,
        conn: 2,
        later: m(1, 3),
        earlier: m(1, 2),
        at: 8,
    }];
    // 2 nacked, 3 on another connection (another node): the leader took 2 in after 3, as it
    // had been sent on before the relay ended.
    assert_eq!(run(false, 4), vec![]);
    // 2 acked before 3 was published: 2 was in the queue before 3.
    assert_eq!(run(true, 4), inversion);
    // 2 nacked and 3 published on the same channel: one channel's order holds whatever its
    // confirms say.
    assert_eq!(run(false, 1), inversion);
}

/// S-CLU-33: the dead-letter queue follows the order of the rejects of each rejecting
/// channel.
#[test]
fn s_clu_33_dead_letters_follow_the_order_of_their_rejects() {
    let base = H::default()
        .confirmed(1, m(1, 1))
        .confirmed(1, m(1, 2))
        .deliver(2, Queue::Source, m(1, 1), false)
        .deliver(2, Queue::Source, m(1, 2), false)
        // Rejected in the other order than published.
        .settle(2, Queue::Source, m(1, 2), Settle::Reject)
        .settle(2, Queue::Source, m(1, 1), Settle::Reject)
        .synced(2);
    let fine = H(base.0.clone())
        .deliver(3, Queue::Dead, m(1, 2), false)
        .deliver(3, Queue::Dead, m(1, 1), false);
    assert_eq!(fine.check(), vec![]);
    let inverted =
        H(base.0)
            .deliver(3, Queue::Dead, m(1, 1), false)
            .deliver(3, Queue::Dead, m(1, 2), false);
    assert_eq!(
        inverted.check(),
        vec![Violation::OrderInversion {
            queue: Queue::Dead,
            conn: 3,
            later: m(1, 1),
            earlier: m(1, 2),
            at: 10
        }]
    );
}

#[test]
fn bodies_round_trip_and_others_are_not_ours() {
    let msg = m(3, 42);
    assert_eq!(Msg::parse(&msg.body()), Some(msg));
    for other in ["", "jepsen p=1", "jepsen p=x s=1", "hello p=1 s=2"] {
        assert_eq!(Msg::parse(other), None, "{other}");
    }
}

/// A history written to its file reads back as the same events, every kind of operation.
#[test]
fn a_written_history_reads_back() {
    let h = clean_events()
        .op(Op::Open { conn: 7, node: 3 })
        .op(Op::Confirm {
            conn: 7,
            msg: m(2, 9),
            ack: false,
        })
        .op(Op::Closed {
            conn: 7,
            why: "CONNECTION_FORCED - \"gone\", reconnect".into(),
        })
        .op(Op::Nemesis {
            what: "Partition([[3]]) for 1225 ms, then 951 ms healed".into(),
        })
        .op(Op::Deliver {
            conn: 5,
            queue: Queue::Dead,
            body: m(2, 9).body(),
            redelivered: true,
        });
    let back: Vec<Event> =
        h.0.iter()
            .map(|e| parse_event(&e.to_string()).unwrap())
            .collect();
    assert_eq!(back, h.0);
    assert!(parse_event("     1.000000 pub1   Jump { conn: 1 }").is_err());
}

/// Checks a kept history again with the current checker: `WHARF_JEPSEN_HISTORY=<history.txt>
/// cargo test --test process jepsen_history_again -- --ignored`.
#[test]
#[ignore = "reads the history file WHARF_JEPSEN_HISTORY names"]
fn jepsen_history_again() {
    let path = std::env::var("WHARF_JEPSEN_HISTORY").expect("WHARF_JEPSEN_HISTORY names a file");
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<Event> = text
        .lines()
        .map(|l| parse_event(l).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect();
    let report = check(&events);
    for v in report.violations.iter().take(50) {
        eprintln!("{v}");
    }
    eprintln!("{report}");
    assert!(report.violations.is_empty(), "{report}");
}
