//! The bound on a leader's take-overs after voided entries (S-CLU-62). A leader whose entry
//! was voided takes over again in the same term, from the committed state (S-CLU-60); when its
//! take-over entry is voided every time (a bug that makes the committed state refuse what the
//! take-over decides), it would close every connection and take over again forever. This
//! counts voided entries in a row, in one term: a void in a later term, or one after some entry
//! decided since the last take-over committed, starts again from one. Pure bookkeeping: the
//! broker task (`replica.rs`) acts on the answer.

use wharf_base::limits::VOIDED_TAKE_OVERS_MAX;
use wharf_store::Ticket;

/// Voided entries in a row of this member, in one term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct VoidStreak {
    term: u64,
    count: u32,
    /// The last gate ticket issued before this member's latest take-over: a gate after it
    /// passed means something decided since the take-over committed.
    took_over_after: Ticket,
}

impl VoidStreak {
    /// This member takes over with `last_gate` the last gate ticket issued so far.
    pub(super) fn took_over(&mut self, last_gate: Ticket) {
        self.took_over_after = last_gate;
    }

    /// An entry of this member was voided in term `term`, the gates passed up to `passed`
    /// before it: whether the member must stop taking over for the rest of the term.
    pub(super) fn voided(&mut self, term: u64, passed: Ticket) -> bool {
        let in_a_row = term == self.term && passed <= self.took_over_after;
        self.count = if in_a_row { self.count + 1 } else { 1 };
        self.term = term;
        self.count >= VOIDED_TAKE_OVERS_MAX
    }

    /// Voided entries in a row so far.
    pub(super) fn count(&self) -> u32 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S-CLU-62: a take-over entry voided every time stops the member after
    /// `VOIDED_TAKE_OVERS_MAX` voids in a row, in that term only.
    #[test]
    fn s_clu_62_voids_in_a_row_stop_taking_over_for_the_term() {
        let mut s = VoidStreak::default();
        // Leading in term 4, gates up to 10 passed, then gate 11 voided.
        s.took_over(0);
        assert!(!s.voided(4, 10));
        let mut gate = 11;
        for n in 2..=VOIDED_TAKE_OVERS_MAX {
            // It takes over again after gate `gate`; its take-over entry (a later gate) is
            // voided with nothing passed since.
            s.took_over(gate);
            gate += 2;
            assert_eq!(
                s.voided(4, gate - 2),
                n == VOIDED_TAKE_OVERS_MAX,
                "void {n}"
            );
            assert_eq!(s.count(), n);
        }
        // In a later term it may lead again, and a void counts from one.
        s.took_over(gate);
        assert!(!s.voided(5, gate));
        assert_eq!(s.count(), 1);
    }

    /// S-CLU-62: an entry that committed since the take-over breaks the row.
    #[test]
    fn s_clu_62_a_commit_since_the_take_over_starts_the_count_again() {
        let mut s = VoidStreak::default();
        s.took_over(0);
        assert!(!s.voided(2, 0));
        // Its take-over entry (gate 4) voided: two in a row.
        s.took_over(3);
        s.voided(2, 3);
        assert_eq!(s.count(), 2);
        // Its next take-over entry (gate 6) committed; gate 7 was voided.
        s.took_over(5);
        assert!(!s.voided(2, 6));
        assert_eq!(s.count(), 1);
        s.took_over(7);
        s.voided(2, 7);
        assert_eq!(s.count(), 2);
    }
}
