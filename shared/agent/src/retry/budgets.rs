//! The budgets of a run's retry loop — how many of each kind of retry it may spend — and the
//! backoff delays between retries.

use agentlane_core::backoff::jittered;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Same-model retries of a short-window 429 before a profile rotation is spent.
pub const MAX_SAME_MODEL_RATE_LIMIT_RETRIES: u32 = 3;
/// Profile rotations for rate limits (then the next model, when there is one).
pub const MAX_RATE_LIMIT_PROFILE_ROTATIONS: u32 = 1;
/// Profile rotations for overload (then the next model, when there is one).
pub const MAX_OVERLOAD_PROFILE_ROTATIONS: u32 = 1;
/// Retries of a silent server error (no output at all).
pub const MAX_EMPTY_ERROR_RETRIES: u32 = 3;
/// Same-model retries of a transient transport failure (a connection reset, a stream cut before
/// its end marker, a chunk that does not parse), with or without progress; then the chain.
pub const MAX_SAME_MODEL_NETWORK_RETRIES: u32 = 2;
/// Same-model retries of an idle timeout, only when there is no fallback.
pub const MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES: u32 = 1;
/// Directed retries of a turn with reasoning but no visible text.
pub const MAX_REASONING_ONLY_RETRIES: u32 = 2;
/// Retries of an attempt whose response finished with no assistant message at all (no text
/// part, reasoning or tool call), sent again as it was: the model saw no answer of its own to
/// be directed about. An assistant message that shows nothing is an empty response instead.
pub const MAX_MISSING_ASSISTANT_RETRIES: u32 = 1;
/// Directed retries of an empty turn.
pub const MAX_EMPTY_RESPONSE_RETRIES: u32 = 1;
/// Directed retries of an empty turn right after a compaction.
pub const MAX_COMPACTION_CONTINUATIONS: u32 = 1;
/// Compactions for context overflow, per run.
pub const MAX_OVERFLOW_COMPACTIONS: u32 = 3;
/// Compactions for timeouts under prompt pressure, per run.
pub const MAX_TIMEOUT_COMPACTIONS: u32 = 2;
/// Prompt share of the context window above which a timeout triggers a compaction.
pub const TIMEOUT_COMPACTION_RATIO: f64 = 0.65;
/// `before_agent_finalize` revisions per run.
pub const MAX_FINALIZE_REVISIONS: u32 = crate::hooks::MAX_FINALIZE_REVISIONS;

/// The loop's hard cap on attempts for one model: grows with the auth-profile candidates.
pub fn max_iterations(profiles: usize) -> u32 {
    let n = profiles.max(1) as u32;
    (24 + 8 * n).clamp(32, 160)
}

/// Same-model rate-limit backoff: 10 s, 20 s, 30 s (capped at 60 s), and at least the server's
/// `Retry-After` up to 60 s.
pub fn rate_limit_delay(retry: u32, retry_after: Option<Duration>) -> Duration {
    let base = Duration::from_secs(10 * u64::from(retry + 1)).min(Duration::from_secs(60));
    base.max(suggested_delay(retry_after))
}

/// The server's `Retry-After`, honoured up to 60 s.
pub fn suggested_delay(retry_after: Option<Duration>) -> Duration {
    retry_after.unwrap_or_default().min(Duration::from_secs(60))
}

/// Backoff of a silent server or network error: 500 ms, 1 s, 2 s for the 1st, 2nd, 3rd retry.
pub fn empty_error_delay(retry: u32) -> Duration {
    Duration::from_millis(500 << retry.saturating_sub(1).min(16))
}

/// Backoff of a transport failure's same-model retry: 250 ms, then 1 s (jittered when waited).
pub fn network_delay(retry: u32) -> Duration {
    Duration::from_millis(250 << (2 * retry.saturating_sub(1).min(8)))
}

/// A retry's wait as decided: the planned delay, and the least the server asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// The delay the retry policy chose, before jitter.
    pub planned: Duration,
    /// Never wait less than this (the server's `Retry-After`), whatever the jitter.
    pub at_least: Duration,
}

impl Backoff {
    /// Retry at once.
    pub const NONE: Backoff = Backoff {
        planned: Duration::ZERO,
        at_least: Duration::ZERO,
    };

    /// Wait `planned`, with no floor of the server's.
    pub fn planned(planned: Duration) -> Self {
        Self {
            planned,
            at_least: Duration::ZERO,
        }
    }

    /// The wait to sleep. In production (`scale` 1.0) `planned` is spread by ±20 % jitter, so
    /// runners that failed together do not retry together, and never drops below `at_least`.
    /// Any other `scale` is a test's time-lapse (`AGENTLANE_RETRY_DELAY_SCALE`): the scaled
    /// delay is applied exactly, so tests can assert it.
    pub fn wait(self, scale: f64) -> Duration {
        if (scale - 1.0).abs() < f64::EPSILON {
            return jittered(self.planned).max(self.at_least);
        }
        let scale = if scale.is_finite() {
            scale.max(0.0)
        } else {
            1.0
        };
        self.planned
            .mul_f64(scale)
            .max(self.at_least.mul_f64(scale))
    }
}

/// Counters of every budget. Persisted with the run so a resumed run keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Budgets {
    /// Same-model retries after a rate limit (cap [`MAX_SAME_MODEL_RATE_LIMIT_RETRIES`]); reset per model.
    pub same_model_rate_limit_retries: u32,
    /// Profile rotations after a rate limit (cap [`MAX_RATE_LIMIT_PROFILE_ROTATIONS`]); reset per model.
    pub rate_limit_rotations: u32,
    /// Profile rotations after an overload (cap [`MAX_OVERLOAD_PROFILE_ROTATIONS`]); reset per model.
    pub overload_rotations: u32,
    /// Retries after an error with no message (cap [`MAX_EMPTY_ERROR_RETRIES`]); reset per model.
    pub empty_error_retries: u32,
    /// Same-model retries after a transport failure (cap [`MAX_SAME_MODEL_NETWORK_RETRIES`]); reset per model.
    pub same_model_network_retries: u32,
    /// Same-model retries after an idle timeout (cap [`MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES`]); reset per model.
    pub same_model_idle_retries: u32,
    /// Directed retries after a reasoning-only answer (cap [`MAX_REASONING_ONLY_RETRIES`]); per run.
    pub reasoning_only_retries: u32,
    /// Resends after a response with no assistant message (cap [`MAX_MISSING_ASSISTANT_RETRIES`]); per run.
    pub missing_assistant_retries: u32,
    /// Directed retries after an empty answer (cap [`MAX_EMPTY_RESPONSE_RETRIES`]); per run.
    pub empty_response_retries: u32,
    /// Directed continuations after a compaction (cap [`MAX_COMPACTION_CONTINUATIONS`]); per run.
    pub compaction_continuations: u32,
    /// Compactions after a context overflow (cap [`MAX_OVERFLOW_COMPACTIONS`]); per run.
    pub overflow_compactions: u32,
    /// Compactions after a model timeout (cap [`MAX_TIMEOUT_COMPACTIONS`]); per run.
    pub timeout_compactions: u32,
    /// Cuts of the results of the run's earlier tool rounds (free; no budget, counted for the
    /// overflow error's account of what was tried).
    pub earlier_round_cuts: u32,
    /// Revisions requested by `before_agent_finalize` hooks (cap [`MAX_FINALIZE_REVISIONS`]); per run.
    pub finalize_revisions: u32,
}

impl Budgets {
    /// A new model starts its same-model and rotation budgets afresh; compaction counts and the
    /// directed-retry counts are per run.
    pub(crate) fn reset_for_next_model(&mut self) {
        self.same_model_rate_limit_retries = 0;
        self.rate_limit_rotations = 0;
        self.overload_rotations = 0;
        self.empty_error_retries = 0;
        self.same_model_network_retries = 0;
        self.same_model_idle_retries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_cap_grows_with_profiles() {
        assert_eq!(
            [0, 1, 2, 3, 17, 100].map(max_iterations),
            [32, 32, 40, 48, 160, 160]
        );
    }

    #[test]
    fn rate_limit_delays() {
        let d = |k, ra: Option<u64>| rate_limit_delay(k, ra.map(Duration::from_secs)).as_secs();
        assert_eq!([d(0, None), d(1, None), d(2, None)], [10, 20, 30]);
        assert_eq!(d(0, Some(45)), 45);
        assert_eq!(d(0, Some(600)), 60);
        assert_eq!(d(9, None), 60);
    }

    #[test]
    fn empty_error_delays_double() {
        assert_eq!(
            [1, 2, 3].map(|k| empty_error_delay(k).as_millis()),
            [500, 1000, 2000]
        );
    }

    #[test]
    fn network_delays_grow() {
        assert_eq!(
            [1, 2, 3].map(|k| network_delay(k).as_millis()),
            [250, 1000, 4000]
        );
    }

    #[test]
    fn a_backoff_is_jittered_in_production_never_below_the_servers_floor_and_exact_when_scaled() {
        let b = Backoff {
            planned: Duration::from_secs(15),
            at_least: Duration::from_secs(15),
        };
        let waits: Vec<Duration> = (0..100).map(|_| b.wait(1.0)).collect();
        assert!(
            waits
                .iter()
                .all(|w| (15_000..=18_000).contains(&w.as_millis()))
        );
        let free = Backoff::planned(Duration::from_secs(10));
        let waits: Vec<u128> = (0..100).map(|_| free.wait(1.0).as_millis()).collect();
        assert!(waits.iter().all(|w| (8_000..=12_000).contains(w)));
        assert!(waits.iter().any(|w| *w != 10_000), "jitter varies the wait");
        assert_eq!(
            free.wait(0.01),
            Duration::from_millis(100),
            "a test's scale is exact"
        );
        assert_eq!(b.wait(0.01), Duration::from_millis(150));
        assert_eq!(Backoff::NONE.wait(1.0), Duration::ZERO);
    }
}
