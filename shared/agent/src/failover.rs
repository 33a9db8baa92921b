//! The retry state machine of a run (SPEC §5, OpenClaw's `run.ts`): budgets that never drain
//! one another, the idle-timeout cost breaker, and the one place that decides, after each
//! attempt, between retrying the same model, rotating the auth profile, falling back to the next
//! model, compacting, or ending the run. Everything here is pure: the turn loop feeds it what
//! happened and carries out the [`Action`].

use agentlane_core::{LivenessState, RunError};
use agentlane_providers::{FailoverReason, ProviderError, RateLimitWindow};
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
/// Same-model retries of an idle timeout, only when there is no fallback.
pub const MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES: u32 = 1;
/// Directed retries of a turn with reasoning but no visible text.
pub const MAX_REASONING_ONLY_RETRIES: u32 = 2;
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
/// Consecutive idle timeouts without model progress that halt the run.
pub const MAX_CONSECUTIVE_IDLE_TIMEOUTS: u32 = 5;

/// The loop's hard cap on attempts for one model: grows with the auth-profile candidates.
pub fn max_iterations(profiles: usize) -> u32 {
    let n = profiles.max(1) as u32;
    (24 + 8 * n).clamp(32, 160)
}

/// Same-model rate-limit backoff: 10 s, 20 s, 30 s (capped at 60 s), and at least the server's
/// `Retry-After` up to 60 s.
pub fn rate_limit_delay(retry: u32, retry_after: Option<Duration>) -> Duration {
    let base = Duration::from_secs(10 * u64::from(retry + 1)).min(Duration::from_secs(60));
    let suggested = retry_after.unwrap_or_default().min(Duration::from_secs(60));
    base.max(suggested)
}

/// Counters of every budget. Persisted with the run so a resumed run keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Budgets {
    pub same_model_rate_limit_retries: u32,
    pub rate_limit_rotations: u32,
    pub overload_rotations: u32,
    pub empty_error_retries: u32,
    pub same_model_idle_retries: u32,
    pub reasoning_only_retries: u32,
    pub empty_response_retries: u32,
    pub compaction_continuations: u32,
    pub overflow_compactions: u32,
    pub timeout_compactions: u32,
    pub finalize_revisions: u32,
}

impl Budgets {
    /// A new model starts its same-model and rotation budgets afresh; compaction counts and the
    /// directed-retry counts are per run.
    fn reset_for_next_model(&mut self) {
        self.same_model_rate_limit_retries = 0;
        self.rate_limit_rotations = 0;
        self.overload_rotations = 0;
        self.empty_error_retries = 0;
        self.same_model_idle_retries = 0;
    }
}

/// The idle-timeout cost breaker. Created with the run, carried across attempts, profile
/// rotations, fallbacks and hand-backs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IdleTimeoutBreaker {
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

    pub fn tripped(&self) -> bool {
        self.consecutive >= MAX_CONSECUTIVE_IDLE_TIMEOUTS
    }
}

/// Tool observations watched after a compaction.
pub const POST_COMPACTION_GUARD_WINDOW: u32 = 3;

/// Post-compaction loop guard: right after a compaction, the same tool call with the same
/// arguments and the same result three times within three observations aborts the run instead
/// of letting it loop until the timeout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PostCompactionGuard {
    pub remaining: u32,
    pub seen: Vec<u64>,
}

impl PostCompactionGuard {
    pub fn arm(&mut self) {
        self.remaining = POST_COMPACTION_GUARD_WINDOW;
        self.seen.clear();
    }

    /// Records one tool outcome; true when the guard trips.
    pub fn observe(&mut self, name: &str, arguments: &str, result: &str) -> bool {
        use std::hash::{Hash, Hasher};
        if self.remaining == 0 {
            return false;
        }
        self.remaining -= 1;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (name, arguments, result).hash(&mut h);
        let key = h.finish();
        self.seen.push(key);
        let tripped =
            self.seen.iter().filter(|k| **k == key).count() as u32 >= POST_COMPACTION_GUARD_WINDOW;
        if self.remaining == 0 {
            self.seen.clear();
        }
        tripped
    }
}

/// An instruction appended to the next attempt (a directed continuation). Not persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Continuation {
    ReasoningOnly,
    EmptyResponse,
    AfterCompaction,
}

impl Continuation {
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
}

/// Why a compaction is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    Overflow,
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

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Call the same model and profile again after `delay`, with an optional instruction.
    Retry {
        delay: Duration,
        continuation: Option<Continuation>,
    },
    /// Use the next auth profile of the same provider; `cooldown` marks the failed one.
    RotateProfile { cooldown: bool },
    /// Move to the next model of the chain.
    Fallback { reason: FailoverReason },
    /// Compact the history, then retry with the after-compaction instruction.
    Compact { trigger: CompactionTrigger },
    /// End the run.
    Fail {
        error: RunError,
        liveness: LivenessState,
    },
}

/// The whole retry state of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RetryState {
    /// Attempts made on the current model (the iteration cap applies to it).
    pub iterations: u32,
    /// Position in the model chain (0 = the requested model).
    pub model_index: usize,
    /// Position in the current provider's auth profiles.
    pub profile_index: usize,
    pub budgets: Budgets,
    pub breaker: IdleTimeoutBreaker,
    /// The last failover reason seen, for the retry-limit decision.
    pub last_reason: Option<String>,
    /// The instruction for the next attempt.
    pub continuation: Option<Continuation>,
    /// The previous attempt ran right after a compaction.
    pub after_compaction: bool,
    pub guard: PostCompactionGuard,
    /// A `before_agent_finalize` revision instruction for the next attempt.
    pub revision: Option<String>,
}

fn fail(code: &str, message: impl Into<String>) -> Action {
    Action::Fail {
        error: RunError::new(code, message),
        liveness: LivenessState::Blocked,
    }
}

impl RetryState {
    /// Records that the chain moved to the next model.
    pub fn advance_model(&mut self) {
        self.model_index += 1;
        self.profile_index = 0;
        self.iterations = 0;
        self.budgets.reset_for_next_model();
    }

    /// The decision when the attempt cap of the current model is reached (stage
    /// `retry_limit`): the next model unless the last reason was a timeout or a format error.
    pub fn on_retry_limit(&self, fallback: bool, cap: u32) -> Action {
        let last = self.last_reason.as_deref();
        if fallback && !matches!(last, Some("timeout" | "format")) {
            return Action::Fallback {
                reason: reason_from_str(last).unwrap_or(FailoverReason::Server),
            };
        }
        fail(
            "retry_limit",
            format!(
                "Request failed after repeated internal retries ({} attempts, max={cap}). Please try \
                 again, or reset the session.",
                self.iterations
            ),
        )
    }

    /// The decision after a failed attempt.
    pub fn on_failure(&mut self, error: &ProviderError, stage: Stage, s: Situation) -> Action {
        self.last_reason = Some(error.reason.as_str().to_owned());
        let idle = error.reason == FailoverReason::Timeout && stage == Stage::Assistant;
        if self
            .breaker
            .step(error.reason == FailoverReason::Timeout, s.progress)
        {
            return fail(
                "idle_timeout_breaker",
                format!(
                    "Idle-timeout cost-runaway breaker tripped: {} consecutive model calls timed out \
                     without progress; no further model calls are made for this run.",
                    self.breaker.consecutive
                ),
            );
        }
        let b = &mut self.budgets;
        match error.reason {
            FailoverReason::ContextOverflow => {
                if s.can_compact && b.overflow_compactions < MAX_OVERFLOW_COMPACTIONS {
                    b.overflow_compactions += 1;
                    Action::Compact {
                        trigger: CompactionTrigger::Overflow,
                    }
                } else {
                    fail(
                        "context_overflow",
                        "Context overflow: the prompt is too large for the model even after \
                         compaction. Reset the session or use a model with a larger context window.",
                    )
                }
            }
            FailoverReason::Timeout => {
                if s.can_compact
                    && s.prompt_ratio > TIMEOUT_COMPACTION_RATIO
                    && b.timeout_compactions < MAX_TIMEOUT_COMPACTIONS
                {
                    b.timeout_compactions += 1;
                    return Action::Compact {
                        trigger: CompactionTrigger::Timeout,
                    };
                }
                // A timeout before any response does not rotate (prompt stage).
                if idle && s.next_profile {
                    return Action::RotateProfile { cooldown: false };
                }
                if s.fallback {
                    return Action::Fallback {
                        reason: FailoverReason::Timeout,
                    };
                }
                if !s.progress && b.same_model_idle_retries < MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES {
                    b.same_model_idle_retries += 1;
                    return Action::Retry {
                        delay: Duration::ZERO,
                        continuation: None,
                    };
                }
                fail(
                    "timeout",
                    format!("The model did not respond in time: {}", error.message),
                )
            }
            FailoverReason::RateLimit => {
                if error.rate_limit_window() == RateLimitWindow::Short
                    && b.same_model_rate_limit_retries < MAX_SAME_MODEL_RATE_LIMIT_RETRIES
                {
                    let delay =
                        rate_limit_delay(b.same_model_rate_limit_retries, error.retry_after);
                    b.same_model_rate_limit_retries += 1;
                    return Action::Retry {
                        delay,
                        continuation: None,
                    };
                }
                b.rate_limit_rotations += 1;
                escalate(
                    b.rate_limit_rotations > MAX_RATE_LIMIT_PROFILE_ROTATIONS,
                    FailoverReason::RateLimit,
                    s,
                    "rate_limit",
                    "The model is rate-limited on every available credential.",
                )
            }
            FailoverReason::Overloaded => {
                b.overload_rotations += 1;
                escalate(
                    b.overload_rotations > MAX_OVERLOAD_PROFILE_ROTATIONS,
                    FailoverReason::Overloaded,
                    s,
                    "overloaded",
                    "The model is temporarily overloaded.",
                )
            }
            FailoverReason::Auth | FailoverReason::Billing => {
                let code = error.reason.as_str();
                if s.next_profile {
                    Action::RotateProfile { cooldown: true }
                } else if s.fallback {
                    Action::Fallback {
                        reason: error.reason,
                    }
                } else {
                    fail(
                        code,
                        format!("The provider refused the credentials: {}", error.message),
                    )
                }
            }
            FailoverReason::Server | FailoverReason::Network => {
                if !s.progress && b.empty_error_retries < MAX_EMPTY_ERROR_RETRIES {
                    b.empty_error_retries += 1;
                    return Action::Retry {
                        delay: Duration::from_millis(500 << (b.empty_error_retries - 1)),
                        continuation: None,
                    };
                }
                if s.fallback {
                    return Action::Fallback {
                        reason: error.reason,
                    };
                }
                fail(
                    error.reason.as_str(),
                    format!("LLM request failed: {}", error.message),
                )
            }
            FailoverReason::ModelNotFound => {
                if s.fallback {
                    Action::Fallback {
                        reason: error.reason,
                    }
                } else {
                    fail("model_not_found", error.message.clone())
                }
            }
            // A request the provider cannot understand will not improve on a retry.
            FailoverReason::Format => {
                fail("format", format!("LLM request rejected: {}", error.message))
            }
        }
    }

    /// The decision after an attempt that completed without tool calls: accept it, or retry
    /// with a directed continuation when it shows nothing.
    pub fn on_completion(&mut self, visible_text: bool, reasoning: bool) -> Completion {
        self.breaker.step(false, visible_text);
        let after_compaction = std::mem::take(&mut self.after_compaction);
        if visible_text {
            return Completion::Accept;
        }
        let b = &mut self.budgets;
        if reasoning {
            if b.reasoning_only_retries < MAX_REASONING_ONLY_RETRIES {
                b.reasoning_only_retries += 1;
                return Completion::Retry(Continuation::ReasoningOnly);
            }
            return Completion::GiveUp;
        }
        if after_compaction && b.compaction_continuations < MAX_COMPACTION_CONTINUATIONS {
            b.compaction_continuations += 1;
            return Completion::Retry(Continuation::AfterCompaction);
        }
        if b.empty_response_retries < MAX_EMPTY_RESPONSE_RETRIES {
            b.empty_response_retries += 1;
            return Completion::Retry(Continuation::EmptyResponse);
        }
        Completion::GiveUp
    }
}

/// The outcome of [`RetryState::on_completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Accept,
    Retry(Continuation),
    /// Directed retries are spent: the run ends with the "couldn't generate a response" reply.
    GiveUp,
}

/// Rotation first; past the rotation budget, the next model; with neither, the error.
fn escalate(
    rotations_spent: bool,
    reason: FailoverReason,
    s: Situation,
    code: &str,
    message: &str,
) -> Action {
    if rotations_spent && s.fallback {
        return Action::Fallback { reason };
    }
    if s.next_profile {
        return Action::RotateProfile { cooldown: true };
    }
    if s.fallback {
        return Action::Fallback { reason };
    }
    fail(code, message)
}

fn reason_from_str(s: Option<&str>) -> Option<FailoverReason> {
    use FailoverReason as R;
    [
        R::RateLimit,
        R::Overloaded,
        R::Auth,
        R::Billing,
        R::ContextOverflow,
        R::Timeout,
        R::Server,
        R::Format,
        R::ModelNotFound,
        R::Network,
    ]
    .into_iter()
    .find(|r| Some(r.as_str()) == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(reason: FailoverReason) -> ProviderError {
        ProviderError::new(reason, "x")
    }
    fn http(status: u16, body: &str, retry_after: Option<u64>) -> ProviderError {
        ProviderError::from_http(status, body, retry_after.map(Duration::from_secs))
    }
    const ALONE: Situation = Situation {
        next_profile: false,
        fallback: false,
        progress: false,
        prompt_ratio: 0.1,
        can_compact: true,
    };
    const PROFILES: Situation = Situation {
        next_profile: true,
        ..ALONE
    };
    const FALLBACK: Situation = Situation {
        fallback: true,
        ..ALONE
    };
    const BOTH: Situation = Situation {
        next_profile: true,
        fallback: true,
        ..ALONE
    };

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
    fn failure_decisions() {
        use FailoverReason as R;
        let retry = |ms| Action::Retry {
            delay: Duration::from_millis(ms),
            continuation: None,
        };
        let rotate = |cooldown| Action::RotateProfile { cooldown };
        let fallback = |reason| Action::Fallback { reason };
        let compact = |trigger| Action::Compact { trigger };
        let short_429 = http(
            429,
            r#"{"error":{"message":"Rate limit reached: requests per min"}}"#,
            Some(1),
        );
        let long_429 = http(
            429,
            r#"{"error":{"message":"You exceeded your daily quota"}}"#,
            None,
        );
        let cases: Vec<(&str, ProviderError, Stage, Situation, Action)> = vec![
            (
                "short 429 retries the same model",
                short_429.clone(),
                Stage::Prompt,
                BOTH,
                retry(10_000),
            ),
            (
                "long 429 rotates",
                long_429.clone(),
                Stage::Prompt,
                BOTH,
                rotate(true),
            ),
            (
                "long 429 alone falls back",
                long_429.clone(),
                Stage::Prompt,
                FALLBACK,
                fallback(R::RateLimit),
            ),
            (
                "long 429 with nothing fails",
                long_429,
                Stage::Prompt,
                ALONE,
                fail(
                    "rate_limit",
                    "The model is rate-limited on every available credential.",
                ),
            ),
            (
                "overload rotates first",
                http(529, "Overloaded", None),
                Stage::Prompt,
                BOTH,
                rotate(true),
            ),
            (
                "overload without profiles falls back",
                http(529, "Overloaded", None),
                Stage::Prompt,
                FALLBACK,
                fallback(R::Overloaded),
            ),
            (
                "401 rotates",
                http(401, "bad key", None),
                Stage::Prompt,
                PROFILES,
                rotate(true),
            ),
            (
                "401 alone falls back",
                http(401, "bad key", None),
                Stage::Prompt,
                FALLBACK,
                fallback(R::Auth),
            ),
            (
                "overflow compacts",
                err(R::ContextOverflow),
                Stage::Prompt,
                BOTH,
                compact(CompactionTrigger::Overflow),
            ),
            (
                "overflow without compaction fails",
                err(R::ContextOverflow),
                Stage::Prompt,
                Situation {
                    can_compact: false,
                    ..BOTH
                },
                fail("context_overflow", ""),
            ),
            (
                "timeout under pressure without compaction rotates",
                err(R::Timeout),
                Stage::Assistant,
                Situation {
                    prompt_ratio: 0.9,
                    can_compact: false,
                    ..BOTH
                },
                rotate(false),
            ),
            (
                "idle timeout rotates",
                err(R::Timeout),
                Stage::Assistant,
                BOTH,
                rotate(false),
            ),
            (
                "prompt timeout does not rotate",
                err(R::Timeout),
                Stage::Prompt,
                BOTH,
                fallback(R::Timeout),
            ),
            (
                "timeout under pressure compacts",
                err(R::Timeout),
                Stage::Assistant,
                Situation {
                    prompt_ratio: 0.7,
                    ..BOTH
                },
                compact(CompactionTrigger::Timeout),
            ),
            (
                "idle timeout alone retries once",
                err(R::Timeout),
                Stage::Assistant,
                ALONE,
                retry(0),
            ),
            (
                "server error retries",
                err(R::Server),
                Stage::Assistant,
                BOTH,
                retry(500),
            ),
            (
                "format error fails",
                err(R::Format),
                Stage::Prompt,
                BOTH,
                fail("format", "LLM request rejected: x"),
            ),
            (
                "unknown model falls back",
                err(R::ModelNotFound),
                Stage::Prompt,
                FALLBACK,
                fallback(R::ModelNotFound),
            ),
        ];
        for (name, error, stage, situation, want) in cases {
            let got = RetryState::default().on_failure(&error, stage, situation);
            match (&got, &want) {
                (Action::Fail { error: g, .. }, Action::Fail { error: w, .. }) => {
                    assert_eq!(g.code, w.code, "{name}")
                }
                _ => assert_eq!(got, want, "{name}"),
            }
        }
    }

    #[test]
    fn same_model_rate_limit_budget_then_rotation_then_fallback() {
        let mut s = RetryState::default();
        let e = http(429, "Rate limit: tokens per minute", Some(2));
        let actions: Vec<Action> = (0..5)
            .map(|_| s.on_failure(&e, Stage::Prompt, BOTH))
            .collect();
        assert!(matches!(actions[0], Action::Retry { .. }));
        assert!(matches!(actions[2], Action::Retry { .. }));
        assert_eq!(actions[3], Action::RotateProfile { cooldown: true });
        assert_eq!(
            actions[4],
            Action::Fallback {
                reason: FailoverReason::RateLimit
            }
        );
    }

    #[test]
    fn overflow_compactions_are_capped_at_three_per_run() {
        let mut s = RetryState::default();
        let e = err(FailoverReason::ContextOverflow);
        for _ in 0..3 {
            assert!(matches!(
                s.on_failure(&e, Stage::Prompt, BOTH),
                Action::Compact { .. }
            ));
            s.advance_model(); // survives fallbacks
        }
        assert!(matches!(
            s.on_failure(&e, Stage::Prompt, BOTH),
            Action::Fail { .. }
        ));
    }

    #[test]
    fn the_breaker_trips_at_five_idle_timeouts_and_survives_rotation() {
        let mut s = RetryState::default();
        let e = err(FailoverReason::Timeout);
        for i in 0..4 {
            let a = s.on_failure(&e, Stage::Assistant, BOTH);
            assert!(!matches!(a, Action::Fail { .. }), "attempt {i}: {a:?}");
            s.advance_model();
        }
        match s.on_failure(&e, Stage::Assistant, BOTH) {
            Action::Fail { error, liveness } => {
                assert_eq!(error.code, "idle_timeout_breaker");
                assert_eq!(liveness, LivenessState::Blocked);
            }
            other => panic!("expected the breaker, got {other:?}"),
        }
    }

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

    #[test]
    fn retry_limit_falls_back_unless_the_last_reason_was_a_timeout() {
        let mut s = RetryState {
            last_reason: Some("rate_limit".into()),
            ..Default::default()
        };
        assert_eq!(
            s.on_retry_limit(true, 32),
            Action::Fallback {
                reason: FailoverReason::RateLimit
            }
        );
        s.last_reason = Some("timeout".into());
        assert!(matches!(s.on_retry_limit(true, 32), Action::Fail { .. }));
        assert!(matches!(s.on_retry_limit(false, 32), Action::Fail { .. }));
    }

    #[test]
    fn the_post_compaction_guard_trips_on_three_identical_observations_only_when_armed() {
        let mut g = PostCompactionGuard::default();
        assert!(!g.observe("t", "{}", "r"), "disarmed");
        g.arm();
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "r"));
        assert!(g.observe("t", "{}", "r"));
        g.arm();
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "other result"));
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "r"), "the window is over");
    }

    #[test]
    fn completion_decisions() {
        let mut s = RetryState::default();
        assert_eq!(s.on_completion(true, false), Completion::Accept);
        assert_eq!(
            s.on_completion(false, true),
            Completion::Retry(Continuation::ReasoningOnly)
        );
        assert_eq!(
            s.on_completion(false, true),
            Completion::Retry(Continuation::ReasoningOnly)
        );
        assert_eq!(s.on_completion(false, true), Completion::GiveUp);
        let mut s = RetryState::default();
        assert_eq!(
            s.on_completion(false, false),
            Completion::Retry(Continuation::EmptyResponse)
        );
        assert_eq!(s.on_completion(false, false), Completion::GiveUp);
        let mut s = RetryState {
            after_compaction: true,
            ..Default::default()
        };
        assert_eq!(
            s.on_completion(false, false),
            Completion::Retry(Continuation::AfterCompaction)
        );
        assert_eq!(
            s.on_completion(false, false),
            Completion::Retry(Continuation::EmptyResponse)
        );
    }
}
