//! The retry loop's brain (SPEC §5, OpenClaw's `run.ts`): every stop/continue decision of a run
//! lives here, as pure functions over [`RetryState`], which is serializable and persisted with
//! the run (a resumed run keeps its budgets). The turn loop in [`crate::runner`] feeds in what
//! happened and carries out what comes back; it decides nothing itself.
//!
//! - [`decide`]: the decisions. After a failed attempt ([`RetryState::on_failure`] — what
//!   happens on a 429, a 529, a 401, an overflow, a timeout, a 5xx), at the attempt cap
//!   ([`RetryState::on_retry_limit`]), after an answer ([`RetryState::on_completion`]), after a
//!   tool round ([`RetryState::on_tool_round`], [`RetryState::on_tool_results`]) and when a model
//!   of the chain cannot be used ([`RetryState::on_unusable_model`]).
//! - [`budgets`]: the budget constants, their counters, and the backoff delays.
//! - [`breaker`]: the idle-timeout cost breaker.
//! - [`guards`]: the post-compaction loop guard.
//! - [`outcome`]: what an attempt ended with, as recorded on the run.

pub mod breaker;
pub mod budgets;
pub mod decide;
pub mod guards;
pub mod outcome;

pub use breaker::{IdleTimeoutBreaker, MAX_CONSECUTIVE_IDLE_TIMEOUTS};
pub use budgets::*;
pub use guards::{POST_COMPACTION_GUARD_WINDOW, PostCompactionGuard};
pub use outcome::AttemptOutcome;

use agentlane_core::{LivenessState, RunError};
use agentlane_providers::FailoverReason;
use serde::{Deserialize, Serialize};

/// An instruction appended to the next attempt (a directed continuation). Not persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Continuation {
    /// The model gave reasoning but no visible answer.
    ReasoningOnly,
    /// The model gave an empty answer.
    EmptyResponse,
    /// The history was just compacted; continue from the summary.
    AfterCompaction,
}

impl Continuation {
    /// The instruction the model is sent.
    pub fn instruction(self) -> &'static str {
        match self {
            Continuation::ReasoningOnly => {
                "Your previous turn recorded reasoning but no visible answer. Continue from where \
                 you are and give the visible answer now; do not restate your reasoning or start over."
            }
            Continuation::EmptyResponse => {
                "Your previous attempt produced no visible answer. Continue from the current state \
                 and reply visibly now; do not restart."
            }
            Continuation::AfterCompaction => {
                "The earlier conversation was compacted into a summary. Continue from the compacted \
                 transcript and produce the final answer now; do not start over or rerun tools that \
                 already completed."
            }
        }
    }

    /// The name in `retry` lifecycle events.
    pub fn as_str(self) -> &'static str {
        match self {
            Continuation::ReasoningOnly => "reasoning_only",
            Continuation::EmptyResponse => "empty_response",
            Continuation::AfterCompaction => "compaction_continuation",
        }
    }
}

/// Why a compaction is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    /// The prompt overflowed the model's context window.
    Overflow,
    /// The model timed out on a long history.
    Timeout,
}

/// Where in the attempt a failure surfaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The request was refused before any output (HTTP error status).
    Prompt,
    /// The response started, then failed (mid-stream error, idle timeout).
    Assistant,
}

/// What the loop knows besides the error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Situation {
    /// Another auth profile of the current provider is available.
    pub next_profile: bool,
    /// Another model remains in the fallback chain.
    pub fallback: bool,
    /// The attempt produced visible text or tool calls before failing.
    pub progress: bool,
    /// Estimated prompt tokens ÷ the model's context window.
    pub prompt_ratio: f64,
    /// History compaction is available to this run.
    pub can_compact: bool,
}

/// What to do next after a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Call the same model and profile again after `delay`, with an optional instruction.
    Retry {
        /// How long to wait before the call.
        delay: Backoff,
        /// An instruction appended to the retried request; `None` sends it unchanged.
        continuation: Option<Continuation>,
    },
    /// Use the next auth profile of the same provider; `cooldown` marks the failed one.
    RotateProfile {
        /// Whether the failed profile is put on cooldown (auth, billing, rate limit, overload).
        cooldown: bool,
    },
    /// Move to the next model of the chain.
    Fallback {
        /// Why the current model is given up (recorded on the attempt).
        reason: FailoverReason,
    },
    /// Compact the history, then retry with the after-compaction instruction.
    Compact {
        /// What caused the compaction.
        trigger: CompactionTrigger,
    },
    /// End the run.
    Fail {
        /// The error the run ends with.
        error: RunError,
        /// The liveness recorded on the run.
        liveness: LivenessState,
    },
}

/// What to do when the current model reached its attempt cap, or cannot be used at all.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelExhausted {
    /// Move to the next model of the chain.
    Fallback {
        /// Why the current model is given up.
        reason: FailoverReason,
    },
    /// End the run.
    Fail(RunError),
}

/// What an attempt that completed without tool calls showed, for [`RetryState::on_completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Visible text.
    Visible,
    /// Reasoning, but no visible text.
    ReasoningOnly,
    /// An assistant message that shows nothing (an empty or blank text part).
    Empty,
    /// No assistant message at all: the response finished with no text part, no reasoning and
    /// no tool call.
    Missing,
}

impl Answered {
    /// What `turn` (an answer without tool calls) showed.
    pub fn of(turn: &agentlane_providers::AssistantTurn) -> Self {
        if !turn.text.trim().is_empty() {
            Answered::Visible
        } else if !turn.reasoning.trim().is_empty() {
            Answered::ReasoningOnly
        } else if turn.has_message() {
            Answered::Empty
        } else {
            Answered::Missing
        }
    }
}

/// The outcome of [`RetryState::on_completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The answer is good: the run may finish.
    Accept,
    /// Retry the same model with this directed instruction.
    Retry(Continuation),
    /// Send the same request again, with no instruction (the model gave no message to be
    /// directed about).
    Resend,
    /// Directed retries are spent: the run ends with the "couldn't generate a response" reply.
    GiveUp,
}

/// The whole retry state of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RetryState {
    /// Attempts made on the current model (the iteration cap applies to it).
    iterations: u32,
    /// Position in the model chain (0 = the requested model).
    model_index: usize,
    /// Position in the current provider's auth profiles.
    profile_index: usize,
    budgets: Budgets,
    breaker: IdleTimeoutBreaker,
    /// The last failover reason seen, for the retry-limit decision.
    #[serde(with = "outcome::reason_serde")]
    last_reason: Option<FailoverReason>,
    /// The instruction for the next attempt.
    continuation: Option<Continuation>,
    /// The previous attempt ran right after a compaction.
    after_compaction: bool,
    guard: PostCompactionGuard,
    /// A `before_agent_finalize` revision instruction for the next attempt.
    revision: Option<String>,
}

impl RetryState {
    /// Position in the current provider's auth profiles (the profile the next attempt asks for).
    pub fn profile_index(&self) -> usize {
        self.profile_index
    }

    /// Whether the chain has a model after the current one.
    pub fn has_model_after(&self, chain_len: usize) -> bool {
        self.model_index + 1 < chain_len
    }

    /// Whether the current provider has a profile after the current one.
    pub fn has_profile_after(&self, profiles: usize) -> bool {
        self.profile_index + 1 < profiles
    }

    /// The next attempt uses the current provider's next auth profile.
    pub fn rotate_profile(&mut self) {
        self.profile_index += 1;
    }

    /// The instruction the next attempt carries (`None`: a plain resend).
    pub fn continue_with(&mut self, continuation: Option<Continuation>) {
        self.continuation = continuation;
    }

    /// Takes the instruction for the attempt being built (it is sent once).
    pub fn take_continuation(&mut self) -> Option<Continuation> {
        self.continuation.take()
    }

    /// Takes the `before_agent_finalize` revision instruction for the attempt being built.
    pub fn take_revision(&mut self) -> Option<String> {
        self.revision.take()
    }

    /// Revisions of the final answer asked for so far.
    pub fn finalize_revisions(&self) -> u32 {
        self.budgets.finalize_revisions
    }
}

/// A failure decision that ends the run, blocked (not retryable as it stands).
pub(crate) fn fail(code: &str, message: impl Into<String>) -> Action {
    Action::Fail {
        error: RunError::new(code, message),
        liveness: LivenessState::Blocked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_format_is_stable() {
        let state = RetryState {
            iterations: 2,
            last_reason: Some(FailoverReason::RateLimit),
            continuation: Some(Continuation::EmptyResponse),
            ..Default::default()
        };
        let json = serde_json::to_value(&state).unwrap_or_default();
        assert_eq!(json["lastReason"], "rate_limit");
        assert_eq!(json["continuation"], "empty_response");
        assert_eq!(json["budgets"]["sameModelRateLimitRetries"], 0);
        let back: RetryState = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(back, state);
        // Checkpoints written before a field existed still load.
        let old: RetryState =
            serde_json::from_value(serde_json::json!({"iterations": 1, "lastReason": "timeout"}))
                .unwrap_or_default();
        assert_eq!(old.last_reason, Some(FailoverReason::Timeout));
        assert_eq!(old.iterations, 1);
    }
}
