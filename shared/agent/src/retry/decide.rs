//! Every decision of the retry loop, in one file: what happens after a failed attempt (a 429, a
//! 529, a 401, an overflow, a timeout, a 5xx, ...), at an attempt cap, after an answer, after a
//! tool round, and when compaction fails. Pure functions over [`RetryState`]: the runner feeds
//! them what happened and carries out the answer.

use super::{
    Action, Backoff, CompactionTrigger, Completion, Continuation, ModelExhausted,
    POST_COMPACTION_GUARD_WINDOW, RetryState, Situation, Stage, fail,
};
use super::{
    Answered, MAX_COMPACTION_CONTINUATIONS, MAX_EMPTY_ERROR_RETRIES, MAX_EMPTY_RESPONSE_RETRIES,
    MAX_FINALIZE_REVISIONS, MAX_MISSING_ASSISTANT_RETRIES, MAX_OVERFLOW_COMPACTIONS,
    MAX_OVERLOAD_PROFILE_ROTATIONS, MAX_RATE_LIMIT_PROFILE_ROTATIONS, MAX_REASONING_ONLY_RETRIES,
    MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES, MAX_SAME_MODEL_NETWORK_RETRIES,
    MAX_SAME_MODEL_RATE_LIMIT_RETRIES, MAX_TIMEOUT_COMPACTIONS, TIMEOUT_COMPACTION_RATIO,
    empty_error_delay, max_iterations, network_delay, rate_limit_delay, suggested_delay,
};
use agentlane_core::RunError;
use agentlane_providers::{FailoverReason, ProviderError, RateLimitWindow};

/// The run's error when the prompt cannot be made to fit the model.
pub fn overflow_error(why: &str) -> RunError {
    RunError::new(
        "context_overflow",
        format!(
            "Context overflow: the prompt is too large for the model ({why}). Reset the session \
             or use a model with a larger context window."
        ),
    )
}

impl RetryState {
    /// The model of the chain to use now, or the error when every model was tried.
    pub fn current_model<'c>(&self, chain: &'c [String]) -> Result<&'c str, RunError> {
        chain
            .get(self.model_index)
            .map(String::as_str)
            .ok_or_else(|| {
                RunError::new(
                    "fallbacks_exhausted",
                    format!("every model of the chain failed: {}", chain.join(", ")),
                )
            })
    }

    /// The current model cannot be used (unknown provider, bad name): move to the next model
    /// (`None`), or end the run when there is none.
    pub fn on_unusable_model(&mut self, fallback: bool, message: String) -> Option<RunError> {
        if fallback {
            self.advance_model();
            None
        } else {
            Some(RunError::new("model_not_found", message))
        }
    }

    /// Records that the chain moved to the next model.
    pub fn advance_model(&mut self) {
        self.model_index += 1;
        self.profile_index = 0;
        self.iterations = 0;
        self.budgets.reset_for_next_model();
    }

    /// Before an attempt on a model with `profiles` auth profiles: `Some` when the model's
    /// attempt cap is reached (see [`RetryState::on_retry_limit`]).
    pub fn check_attempt_cap(&self, profiles: usize, fallback: bool) -> Option<ModelExhausted> {
        let cap = max_iterations(profiles);
        (self.iterations >= cap).then(|| self.on_retry_limit(fallback, cap))
    }

    /// Records that an attempt starts with auth profile `profile_index`.
    pub fn start_attempt(&mut self, profile_index: usize) {
        self.profile_index = profile_index;
        self.iterations += 1;
    }

    /// The decision when the attempt cap of the current model is reached (stage
    /// `retry_limit`): the next model unless the last reason was a timeout or a format error.
    pub fn on_retry_limit(&self, fallback: bool, cap: u32) -> ModelExhausted {
        let last = self.last_reason;
        if fallback && !matches!(last, Some(FailoverReason::Timeout | FailoverReason::Format)) {
            return ModelExhausted::Fallback {
                reason: last.unwrap_or(FailoverReason::Server),
            };
        }
        ModelExhausted::Fail(RunError::new(
            "retry_limit",
            format!(
                "Request failed after repeated internal retries ({} attempts, max={cap}). Please try \
                 again, or reset the session.",
                self.iterations
            ),
        ))
    }

    /// The decision after a failed attempt, by failover reason. The breaker comes first: five
    /// idle timeouts in a row without progress end the run whatever budgets are left.
    pub fn on_failure(&mut self, error: &ProviderError, stage: Stage, s: Situation) -> Action {
        self.last_reason = Some(error.reason);
        if self
            .breaker
            .step(error.reason == FailoverReason::Timeout, s.progress)
        {
            agentlane_core::metrics::incr(agentlane_core::metrics::BREAKER_TRIPS, &[]);
            return fail(
                "idle_timeout_breaker",
                format!(
                    "Idle-timeout cost-runaway breaker tripped: {} consecutive model calls timed out \
                     without progress; no further model calls are made for this run.",
                    self.breaker.consecutive
                ),
            );
        }
        match error.reason {
            FailoverReason::ContextOverflow => self.on_overflow(s),
            FailoverReason::Timeout => self.on_timeout(error, stage, s),
            FailoverReason::RateLimit => self.on_rate_limit(error, s),
            FailoverReason::Overloaded => {
                self.budgets.overload_rotations += 1;
                escalate(
                    self.budgets.overload_rotations > MAX_OVERLOAD_PROFILE_ROTATIONS,
                    FailoverReason::Overloaded,
                    s,
                    "overloaded",
                    "The model is temporarily overloaded.",
                )
            }
            FailoverReason::Auth | FailoverReason::Billing => {
                if s.next_profile {
                    Action::RotateProfile { cooldown: true }
                } else if s.fallback {
                    Action::Fallback {
                        reason: error.reason,
                    }
                } else {
                    fail(
                        error.reason.as_str(),
                        format!("The provider refused the credentials: {}", error.message),
                    )
                }
            }
            FailoverReason::Server => self.on_server_error(error, s),
            FailoverReason::Network => self.on_network_error(error, s),
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

    /// The prompt is larger than the window: compact (three times per run at most), else fail
    /// with an error that says what was tried.
    fn on_overflow(&mut self, s: Situation) -> Action {
        let b = &mut self.budgets;
        if s.can_compact && b.overflow_compactions < MAX_OVERFLOW_COMPACTIONS {
            b.overflow_compactions += 1;
            return Action::Compact {
                trigger: CompactionTrigger::Overflow,
            };
        }
        let cuts = match b.earlier_round_cuts {
            0 => String::new(),
            1 => "; the results of this run's earlier tool rounds were cut once".to_owned(),
            n => format!("; the results of this run's earlier tool rounds were cut {n} times"),
        };
        let tried = match (s.can_compact, b.overflow_compactions) {
            (false, 0) => format!(
                "no compaction was tried: the session has no earlier history and this run no \
                 earlier tool round to compact, and this run's own prompt does not fit{cuts}"
            ),
            (false, n) | (true, n) => format!(
                "it still does not fit after {n} compaction{} of the earlier history and of this \
                 run's earlier tool rounds{cuts}",
                if n == 1 { "" } else { "s" }
            ),
        };
        Action::Fail {
            error: overflow_error(&tried),
            liveness: agentlane_core::LivenessState::Blocked,
        }
    }

    /// A timeout: under prompt pressure, compact; an idle stream rotates the profile; then the
    /// next model; a lone model gets one more try when it made no progress.
    fn on_timeout(&mut self, error: &ProviderError, stage: Stage, s: Situation) -> Action {
        let b = &mut self.budgets;
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
        if stage == Stage::Assistant && s.next_profile {
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
                delay: Backoff::NONE,
                continuation: None,
            };
        }
        fail(
            "timeout",
            format!("The model did not respond in time: {}", error.message),
        )
    }

    /// A 429. A short window (per minute) waits and retries the same model, three times at
    /// most, at least as long as `Retry-After` says; a long window (a daily quota), or a spent
    /// same-model budget, rotates the auth profile once, then falls back to the next model;
    /// with neither, the run fails with `rate_limit`.
    fn on_rate_limit(&mut self, error: &ProviderError, s: Situation) -> Action {
        let b = &mut self.budgets;
        if error.rate_limit_window() == RateLimitWindow::Short
            && b.same_model_rate_limit_retries < MAX_SAME_MODEL_RATE_LIMIT_RETRIES
        {
            let delay = Backoff {
                planned: rate_limit_delay(b.same_model_rate_limit_retries, error.retry_after),
                at_least: suggested_delay(error.retry_after),
            };
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

    /// A 5xx: a silent one (no progress) is retried three times with backoff; then the next
    /// model, or the run fails.
    fn on_server_error(&mut self, error: &ProviderError, s: Situation) -> Action {
        let b = &mut self.budgets;
        if !s.progress && b.empty_error_retries < MAX_EMPTY_ERROR_RETRIES {
            b.empty_error_retries += 1;
            return Action::Retry {
                delay: Backoff::planned(empty_error_delay(b.empty_error_retries)),
                continuation: None,
            };
        }
        give_up_on_model(error, s)
    }

    /// A transient transport failure (a reset connection, a stream cut before its end marker, a
    /// chunk that does not parse): the same model is retried twice with jittered backoff,
    /// whether or not text had arrived (the failed attempt's text is discarded); then the next
    /// model, or the run fails.
    fn on_network_error(&mut self, error: &ProviderError, s: Situation) -> Action {
        let b = &mut self.budgets;
        if b.same_model_network_retries < MAX_SAME_MODEL_NETWORK_RETRIES {
            b.same_model_network_retries += 1;
            return Action::Retry {
                delay: Backoff::planned(network_delay(b.same_model_network_retries)),
                continuation: None,
            };
        }
        give_up_on_model(error, s)
    }

    /// Spends an overflow compaction for the pre-call token check, if one is left.
    pub fn take_overflow_compaction(&mut self) -> bool {
        let left = self.budgets.overflow_compactions < MAX_OVERFLOW_COMPACTIONS;
        if left {
            self.budgets.overflow_compactions += 1;
        }
        left
    }

    /// Whether an overflow compaction is left (without spending it).
    pub fn overflow_compaction_left(&self) -> bool {
        self.budgets.overflow_compactions < MAX_OVERFLOW_COMPACTIONS
    }

    /// The results of the run's earlier tool rounds were cut to fit the window (free: no model
    /// call; counted so an overflow error can say it was tried).
    pub fn on_earlier_rounds_cut(&mut self) {
        self.budgets.earlier_round_cuts += 1;
    }

    /// A compaction succeeded: the next attempt runs right after it (so an empty answer gets the
    /// after-compaction continuation), and the loop guard watches the next tool results.
    /// `instruct`: the next attempt is told the history was compacted.
    pub fn on_compacted(&mut self, instruct: bool) {
        self.after_compaction = true;
        self.guard.arm();
        if instruct {
            self.continuation = Some(Continuation::AfterCompaction);
        }
    }

    /// A compaction decided by [`RetryState::on_failure`] did not happen: for an overflow the
    /// run ends (the prompt still does not fit); after a timeout the loop just goes on.
    pub fn on_compaction_failed(&self, trigger: CompactionTrigger, why: &str) -> Option<RunError> {
        match trigger {
            CompactionTrigger::Overflow => Some(overflow_error(why)),
            CompactionTrigger::Timeout => None,
        }
    }

    /// The decision after an attempt that completed without tool calls: accept it, or retry
    /// when it shows nothing. A missing assistant message is sent again as it was (its own
    /// budget); reasoning alone, an empty message, or an empty message right after a compaction
    /// get a directed continuation (each its own budget). None of them spends another's.
    pub fn on_completion(&mut self, answered: Answered) -> Completion {
        self.breaker.step(false, answered == Answered::Visible);
        let after_compaction = std::mem::take(&mut self.after_compaction);
        let b = &mut self.budgets;
        match answered {
            Answered::Visible => Completion::Accept,
            Answered::ReasoningOnly => {
                if b.reasoning_only_retries < MAX_REASONING_ONLY_RETRIES {
                    b.reasoning_only_retries += 1;
                    return Completion::Retry(Continuation::ReasoningOnly);
                }
                Completion::GiveUp
            }
            Answered::Missing => {
                if b.missing_assistant_retries < MAX_MISSING_ASSISTANT_RETRIES {
                    b.missing_assistant_retries += 1;
                    // A compaction's continuation still applies to the resent request.
                    self.after_compaction = after_compaction;
                    return Completion::Resend;
                }
                Completion::GiveUp
            }
            Answered::Empty => {
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
    }

    /// Whether a `before_agent_finalize` hook may still ask for a revision of the answer.
    pub fn may_revise(&self) -> bool {
        self.budgets.finalize_revisions < MAX_FINALIZE_REVISIONS
    }

    /// A hook asked for a revision: the next attempt carries `instruction`.
    pub fn on_revision(&mut self, instruction: String) {
        self.budgets.finalize_revisions += 1;
        self.revision = Some(instruction);
    }

    /// After an attempt that asked for tools, `rounds` being the tool rounds of the run so far
    /// (this one included): a productive round is progress, not a retry — it resets the breaker
    /// and does not spend the iteration budget — but more than `max_rounds` rounds end the run,
    /// as a runaway tool loop costs money.
    pub fn on_tool_round(&mut self, rounds: u32, max_rounds: u32) -> Result<(), RunError> {
        self.breaker.step(false, true);
        self.iterations = self.iterations.saturating_sub(1);
        if rounds > max_rounds {
            return Err(RunError::new(
                "tool_round_limit",
                format!(
                    "the turn made {} tool rounds without a final answer",
                    rounds - 1
                ),
            ));
        }
        Ok(())
    }

    /// After a tool round's results `(tool, arguments, result)`, in call order: the run ends
    /// when the post-compaction guard sees the same call with the same result too often.
    pub fn on_tool_results<'a>(
        &mut self,
        results: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Option<RunError> {
        let mut tripped = None;
        for (tool, arguments, result) in results {
            if self.guard.observe(tool, arguments, result) {
                tripped = Some(tool);
            }
        }
        tripped.map(|tool| {
            RunError::new(
                "tool_loop",
                format!(
                    "CRITICAL: tool {tool} repeated {POST_COMPACTION_GUARD_WINDOW} times with \
                     identical arguments and identical results right after compaction; the run \
                     was stopped instead of looping"
                ),
            )
        })
    }
}

/// A 5xx or a transport failure past its same-model budget: the next model, or the run fails.
fn give_up_on_model(error: &ProviderError, s: Situation) -> Action {
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::LivenessState;
    use std::time::Duration;

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

    type Case = (&'static str, ProviderError, Stage, Situation, Action);

    fn retry(ms: u64, at_least_ms: u64) -> Action {
        Action::Retry {
            delay: Backoff {
                planned: Duration::from_millis(ms),
                at_least: Duration::from_millis(at_least_ms),
            },
            continuation: None,
        }
    }

    /// Each case from a fresh state; a failure is compared by its code.
    fn check(cases: Vec<Case>) {
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
    fn failure_decisions_for_rate_limits_overload_and_credentials() {
        use FailoverReason as R;
        let rotate = |cooldown| Action::RotateProfile { cooldown };
        let fallback = |reason| Action::Fallback { reason };
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
        check(vec![
            (
                "short 429 retries the same model",
                short_429.clone(),
                Stage::Prompt,
                BOTH,
                retry(10_000, 1_000),
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
        ]);
    }

    #[test]
    fn failure_decisions_for_overflow_timeouts_and_errors() {
        use FailoverReason as R;
        let rotate = |cooldown| Action::RotateProfile { cooldown };
        let fallback = |reason| Action::Fallback { reason };
        let compact = |trigger| Action::Compact { trigger };
        check(vec![
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
                retry(0, 0),
            ),
            (
                "server error retries",
                err(R::Server),
                Stage::Assistant,
                BOTH,
                retry(500, 0),
            ),
            (
                "a cut stream retries the same model",
                err(R::Network),
                Stage::Assistant,
                BOTH,
                retry(250, 0),
            ),
            (
                "a cut stream retries even after text arrived",
                err(R::Network),
                Stage::Assistant,
                Situation {
                    progress: true,
                    ..ALONE
                },
                retry(250, 0),
            ),
            (
                "a reset connection before the answer retries",
                err(R::Network),
                Stage::Prompt,
                FALLBACK,
                retry(250, 0),
            ),
            (
                "a 5xx after text arrived falls back",
                err(R::Server),
                Stage::Assistant,
                Situation {
                    progress: true,
                    ..FALLBACK
                },
                fallback(R::Server),
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
        ]);
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
    fn the_network_budget_is_two_same_model_retries_then_the_chain() {
        let e = err(FailoverReason::Network);
        let progress = Situation {
            progress: true,
            ..FALLBACK
        };
        // With a fallback: two retries (250 ms, 1 s), then the next model.
        let mut s = RetryState::default();
        let actions: Vec<Action> = (0..3)
            .map(|_| s.on_failure(&e, Stage::Assistant, progress))
            .collect();
        assert_eq!(
            actions,
            [
                retry(250, 0),
                retry(1000, 0),
                Action::Fallback {
                    reason: FailoverReason::Network
                }
            ]
        );
        // The next model has its own budget.
        s.advance_model();
        assert_eq!(s.on_failure(&e, Stage::Prompt, ALONE), retry(250, 0));
        // Alone: two retries, then the run fails with `network`.
        let mut s = RetryState::default();
        let last = (0..3)
            .map(|_| s.on_failure(&e, Stage::Assistant, ALONE))
            .last();
        match last {
            Some(Action::Fail { error, .. }) => {
                assert_eq!(error.code, "network");
                assert!(
                    error.message.starts_with("LLM request failed: "),
                    "{error:?}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        // A network failure does not spend the 5xx budget, nor the other way round.
        let mut s = RetryState::default();
        for _ in 0..3 {
            let a = s.on_failure(&err(FailoverReason::Server), Stage::Prompt, ALONE);
            assert!(matches!(a, Action::Retry { .. }), "{a:?}");
        }
        assert!(matches!(
            s.on_failure(&e, Stage::Prompt, ALONE),
            Action::Retry { .. }
        ));
    }

    #[test]
    fn a_short_429_waits_at_least_what_retry_after_asks() {
        let e = http(429, "Rate limit reached for requests per min", Some(15));
        match RetryState::default().on_failure(&e, Stage::Prompt, ALONE) {
            Action::Retry { delay, .. } => {
                assert_eq!(delay.planned, Duration::from_secs(15));
                assert_eq!(delay.at_least, Duration::from_secs(15));
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn an_overflow_error_names_what_was_tried() {
        let message = |action: Action| match action {
            Action::Fail { error, .. } => (error.code, error.message),
            other => panic!("expected a failure, got {other:?}"),
        };
        let e = err(FailoverReason::ContextOverflow);
        let alone = Situation {
            can_compact: false,
            ..BOTH
        };
        // (case, compactions already spent, situation, what the message must say)
        let rows = [
            (
                "a first turn: nothing to compact",
                0,
                alone,
                "no compaction was tried",
            ),
            (
                "the budget spent",
                MAX_OVERFLOW_COMPACTIONS,
                BOTH,
                "after 3 compactions of the earlier history",
            ),
            (
                "compacted once, nothing left to compact",
                1,
                alone,
                "after 1 compaction of the earlier history and of this run's earlier tool rounds",
            ),
        ];
        for (case, spent, situation, says) in rows {
            let mut s = RetryState::default();
            s.budgets.overflow_compactions = spent;
            let (_, text) = message(s.clone().on_failure(&e, Stage::Prompt, situation));
            assert!(!text.contains("were cut"), "{case}: {text}");
            s.budgets.earlier_round_cuts = 2;
            let (_, text) = message(s.clone().on_failure(&e, Stage::Prompt, situation));
            assert!(
                text.contains("earlier tool rounds were cut 2 times"),
                "{case}: {text}"
            );
            let (code, text) = message(s.on_failure(&e, Stage::Prompt, situation));
            assert_eq!(code, "context_overflow", "{case}");
            assert!(text.contains(says), "{case}: {text}");
            assert!(!text.contains("even after compaction"), "{case}: {text}");
        }
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
        assert!(
            !s.take_overflow_compaction(),
            "the precheck shares the budget"
        );
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
    fn retry_limit_falls_back_unless_the_last_reason_was_a_timeout() {
        let mut s = RetryState {
            last_reason: Some(FailoverReason::RateLimit),
            ..Default::default()
        };
        assert_eq!(
            s.on_retry_limit(true, 32),
            ModelExhausted::Fallback {
                reason: FailoverReason::RateLimit
            }
        );
        s.last_reason = Some(FailoverReason::Timeout);
        assert!(
            matches!(s.on_retry_limit(true, 32), ModelExhausted::Fail(e) if e.code == "retry_limit")
        );
        assert!(matches!(
            s.on_retry_limit(false, 32),
            ModelExhausted::Fail(_)
        ));
    }

    #[test]
    fn the_attempt_cap_applies_per_model() {
        let mut s = RetryState::default();
        for _ in 0..32 {
            assert_eq!(s.check_attempt_cap(1, true), None);
            s.start_attempt(0);
        }
        assert_eq!(
            s.check_attempt_cap(1, true),
            Some(ModelExhausted::Fallback {
                reason: FailoverReason::Server
            })
        );
        assert_eq!(
            s.check_attempt_cap(2, true),
            None,
            "more profiles, more attempts"
        );
        s.advance_model();
        assert_eq!(s.check_attempt_cap(1, false), None);
    }

    #[test]
    fn the_chain_ends_with_a_clear_error() {
        let chain = vec!["a/1".to_owned(), "b/2".to_owned()];
        let mut s = RetryState::default();
        assert_eq!(s.current_model(&chain), Ok("a/1"));
        assert_eq!(s.on_unusable_model(true, "gone".into()), None);
        assert_eq!(s.current_model(&chain), Ok("b/2"));
        let last = s.on_unusable_model(false, "gone".into());
        assert_eq!(last.map(|e| e.code), Some("model_not_found".to_owned()));
        s.advance_model();
        let exhausted = s.current_model(&chain).map_err(|e| e.code);
        assert_eq!(exhausted, Err("fallbacks_exhausted".to_owned()));
    }

    #[test]
    fn tool_rounds_are_progress_until_the_round_cap() {
        let mut s = RetryState {
            iterations: 3,
            ..Default::default()
        };
        s.breaker.consecutive = 4;
        assert_eq!(s.on_tool_round(2, 2), Ok(()));
        assert_eq!((s.iterations, s.breaker.consecutive), (2, 0));
        let over = s.on_tool_round(3, 2).map_err(|e| (e.code, e.message));
        assert_eq!(
            over,
            Err((
                "tool_round_limit".to_owned(),
                "the turn made 2 tool rounds without a final answer".to_owned()
            ))
        );
    }

    #[test]
    fn the_loop_guard_ends_the_run_only_after_a_compaction() {
        let same = [("t", "{}", "r"); 3];
        let mut s = RetryState::default();
        assert_eq!(s.on_tool_results(same), None, "not armed");
        s.on_compacted(false);
        let error = s.on_tool_results(same).map(|e| e.code);
        assert_eq!(error.as_deref(), Some("tool_loop"));
    }

    #[test]
    fn a_failed_compaction_ends_an_overflow_but_not_a_timeout() {
        let s = RetryState::default();
        let overflow = s.on_compaction_failed(CompactionTrigger::Overflow, "nothing to compact");
        assert_eq!(
            overflow.map(|e| e.code).as_deref(),
            Some("context_overflow")
        );
        assert_eq!(
            s.on_compaction_failed(CompactionTrigger::Timeout, "x"),
            None
        );
    }

    #[test]
    fn completion_decisions() {
        use Answered::{Empty, Missing, ReasoningOnly, Visible};
        use Completion::{Accept, GiveUp, Resend, Retry};
        use Continuation::{AfterCompaction, EmptyResponse, ReasoningOnly as Reasoned};
        // (case, right after a compaction, the answers in order, the decisions in order)
        type Row = (&'static str, bool, Vec<Answered>, Vec<Completion>);
        let rows: Vec<Row> = vec![
            (
                "a visible answer is accepted",
                false,
                vec![Visible],
                vec![Accept],
            ),
            (
                "reasoning only: two directed retries",
                false,
                vec![ReasoningOnly; 3],
                vec![Retry(Reasoned), Retry(Reasoned), GiveUp],
            ),
            (
                "an empty message: one directed retry",
                false,
                vec![Empty; 2],
                vec![Retry(EmptyResponse), GiveUp],
            ),
            (
                "no assistant message: one plain resend",
                false,
                vec![Missing; 2],
                vec![Resend, GiveUp],
            ),
            (
                "a missing message does not spend the empty-response budget",
                false,
                vec![Missing, Empty, Empty],
                vec![Resend, Retry(EmptyResponse), GiveUp],
            ),
            (
                "an empty message does not spend the missing-assistant budget",
                false,
                vec![Empty, Missing, Missing],
                vec![Retry(EmptyResponse), Resend, GiveUp],
            ),
            (
                "reasoning does not spend the missing-assistant budget",
                false,
                vec![ReasoningOnly, Missing, Visible],
                vec![Retry(Reasoned), Resend, Accept],
            ),
            (
                "empty right after a compaction: the compaction continuation first",
                true,
                vec![Empty, Empty, Empty],
                vec![Retry(AfterCompaction), Retry(EmptyResponse), GiveUp],
            ),
            (
                "missing right after a compaction: the resend keeps the compaction continuation",
                true,
                vec![Missing, Empty],
                vec![Resend, Retry(AfterCompaction)],
            ),
        ];
        for (case, after_compaction, answers, want) in rows {
            let mut s = RetryState {
                after_compaction,
                ..Default::default()
            };
            let got: Vec<Completion> = answers.into_iter().map(|a| s.on_completion(a)).collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn an_answer_is_read_as_visible_reasoning_empty_or_missing() {
        use agentlane_providers::AssistantTurn;
        let turn = |text: &str, reasoning: &str, empty_text: bool| AssistantTurn {
            text: text.into(),
            reasoning: reasoning.into(),
            empty_text,
            ..Default::default()
        };
        let rows = [
            ("text", turn("hi", "", false), Answered::Visible),
            (
                "text and reasoning",
                turn("hi", "r", true),
                Answered::Visible,
            ),
            (
                "reasoning only",
                turn(" ", "r", false),
                Answered::ReasoningOnly,
            ),
            ("an empty text part", turn("", "", true), Answered::Empty),
            ("blank text", turn(" \n", "", false), Answered::Empty),
            ("nothing at all", turn("", "", false), Answered::Missing),
        ];
        for (case, t, want) in rows {
            assert_eq!(Answered::of(&t), want, "{case}");
        }
    }

    #[test]
    fn finalize_revisions_are_budgeted() {
        let mut s = RetryState::default();
        for _ in 0..MAX_FINALIZE_REVISIONS {
            assert!(s.may_revise());
            s.on_revision("again".into());
        }
        assert!(!s.may_revise());
        assert_eq!(s.revision.as_deref(), Some("again"));
    }
}
