//! The idle-timeout cost breaker: model calls that keep timing out without progress cost money
//! and time; after [`MAX_CONSECUTIVE_IDLE_TIMEOUTS`] of them the run stops, whatever budgets are
//! left.

use serde::{Deserialize, Serialize};

/// Consecutive idle timeouts without model progress that halt the run.
pub const MAX_CONSECUTIVE_IDLE_TIMEOUTS: u32 = 5;

/// The breaker. Created with the run, carried across attempts, profile rotations, fallbacks and
/// hand-backs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IdleTimeoutBreaker {
    /// Idle timeouts in a row without progress; the breaker trips at [`MAX_CONSECUTIVE_IDLE_TIMEOUTS`].
    pub consecutive: u32,
}

impl IdleTimeoutBreaker {
    /// Steps after an attempt: an idle timeout without progress counts, progress resets, anything
    /// else leaves the count. Output tokens alone are not progress. Returns whether it tripped.
    pub fn step(&mut self, idle_timed_out: bool, progress: bool) -> bool {
        if progress {
            self.consecutive = 0;
        } else if idle_timed_out {
            self.consecutive += 1;
        }
        self.tripped()
    }

    /// Whether the run must stop making model calls.
    pub fn tripped(&self) -> bool {
        self.consecutive >= MAX_CONSECUTIVE_IDLE_TIMEOUTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_resets_the_breaker_and_output_tokens_alone_do_not() {
        let mut b = IdleTimeoutBreaker::default();
        for _ in 0..4 {
            b.step(true, false);
        }
        assert!(!b.step(false, true));
        assert_eq!(b.consecutive, 0);
        for _ in 0..4 {
            assert!(!b.step(true, false));
        }
        assert!(b.step(true, false));
    }
}
