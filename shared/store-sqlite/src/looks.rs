//! The lane queue's memory of its last empty look, so that a receive which could only find
//! nothing again does not take the writer thread.
//!
//! A look is a write (it marks what it delivers in flight), and all writes share one thread, so
//! an empty look still costs a turn of the writer. Lane workers looked often for nothing: a
//! worker that finished a turn looked again at once, mostly before its client had sent the
//! next turn (`bench --http`: 1.9 looks per turn, about half of them empty).
//!
//! After a look found nothing, a message becomes deliverable only through:
//! - a write of this process that wakes a receiver: an enqueue, an accept that queues its run,
//!   a hand-back or visibility change (`notify_one`: a waiting receiver wakes, or the next one
//!   to wait finds the wake-up already there). A receive that was woken always looks;
//! - a write of this process that wakes nobody but may free a message: an ack (its lane's
//!   next message, its tenant's in-flight slot), a dead-lettering, a session's or tenant's
//!   deletion. Each counts one change ([`Looks::changed`]) once it has committed. So does a
//!   look that delivered its `max` and left a due head behind (the wake-up it answered may
//!   have been that head's);
//! - time: the look found when the next in-flight head or delayed message becomes due;
//! - a write by another process on the same database file: nothing here hears of it, so a
//!   remembered look is trusted for at most [`RECHECK`], the longest a waiting receive ever
//!   went without looking before.
//!
//! So a receive that was not woken skips its look while no change was counted, nothing is due
//! and the last empty look is younger than [`RECHECK`] ([`Looks::known_empty`]).

use crate::queue::RECHECK;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Changes counted and the last empty look (one per backend, shared by its receivers).
#[derive(Debug, Default)]
pub(crate) struct Looks {
    changes: AtomicU64,
    last_empty: Mutex<Option<EmptyLook>>,
}

/// A look that delivered nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EmptyLook {
    /// The change count read before the look was sent to the writer.
    changes: u64,
    /// When the next in-flight head or delayed message becomes due (ms), if any.
    next_due_at: Option<u64>,
    /// When the look answered.
    at: Instant,
}

impl Looks {
    /// Counts a committed write that may have made a message deliverable without waking a
    /// receiver.
    pub(crate) fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// The change count to give [`looked_empty`](Self::looked_empty): read before the look is
    /// sent, so a change committed while it runs makes the next receive look again.
    pub(crate) fn before_look(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Remembers a look that delivered nothing (`changes` from [`before_look`](Self::before_look)).
    pub(crate) fn looked_empty(&self, changes: u64, next_due_at: Option<u64>) {
        let look = EmptyLook {
            changes,
            next_due_at,
            at: Instant::now(),
        };
        let mut last = self
            .last_empty
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Of two looks answering out of order, the one that saw more changes stands.
        if last.is_none_or(|kept| kept.changes <= changes) {
            *last = Some(look);
        }
    }

    /// `Some(next_due_at)` of the last empty look when a look now (at `now_ms`) would find
    /// nothing either; `None`: look.
    pub(crate) fn known_empty(&self, now_ms: u64) -> Option<Option<u64>> {
        let last = *self
            .last_empty
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let last = last?;
        still_empty(
            &last,
            self.changes.load(Ordering::SeqCst),
            now_ms,
            last.at.elapsed(),
        )
        .then_some(last.next_due_at)
    }
}

/// Whether `look` still stands: no change counted since it was sent, nothing due yet, and
/// younger than [`RECHECK`].
fn still_empty(look: &EmptyLook, changes: u64, now_ms: u64, age: Duration) -> bool {
    look.changes == changes && age < RECHECK && look.next_due_at.is_none_or(|due| now_ms < due)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_look_stands_until_a_change_its_due_time_or_the_recheck() {
        let look = |next_due_at| EmptyLook {
            changes: 7,
            next_due_at,
            at: Instant::now(),
        };
        let young = Duration::from_millis(10);
        let cases = [
            (
                "nothing changed, nothing due",
                look(None),
                7,
                1_000,
                young,
                true,
            ),
            ("a change was counted", look(None), 8, 1_000, young, false),
            ("due later", look(Some(1_001)), 7, 1_000, young, true),
            ("due now", look(Some(1_000)), 7, 1_000, young, false),
            ("overdue", look(Some(900)), 7, 1_000, young, false),
            (
                "as old as the recheck",
                look(None),
                7,
                1_000,
                RECHECK,
                false,
            ),
            (
                "just under the recheck",
                look(None),
                7,
                1_000,
                RECHECK - Duration::from_millis(1),
                true,
            ),
        ];
        for (name, look, changes, now, age, stands) in cases {
            assert_eq!(still_empty(&look, changes, now, age), stands, "{name}");
        }
    }

    #[tokio::test]
    async fn a_change_during_a_look_makes_the_next_receive_look() {
        let looks = Looks::default();
        assert_eq!(looks.known_empty(0), None, "never looked: look");
        let before = looks.before_look();
        looks.changed(); // an enqueue committed while the look ran
        looks.looked_empty(before, None);
        assert_eq!(looks.known_empty(0), None);

        let before = looks.before_look();
        looks.looked_empty(before, Some(50));
        assert_eq!(looks.known_empty(49), Some(Some(50)));
        assert_eq!(looks.known_empty(50), None, "due: look");
        // An older look answering late does not replace a newer one.
        looks.looked_empty(before - 1, None);
        assert_eq!(looks.known_empty(49), Some(Some(50)));
        looks.changed();
        assert_eq!(looks.known_empty(49), None);
    }
}
