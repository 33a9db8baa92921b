//! One model attempt: the request streamed to the selected model and profile, and its outcome
//! recorded in the run's attempt ledger.

use super::stop::StopReason;
use super::stream::{ModelFailure, StreamError, stream_model};
use super::turn_loop::{Selected, Turn};
use crate::context::tokens::estimate_tokens;
use crate::retry::{AttemptOutcome, Stage};
use agentlane_core::{AttemptRecord, StoreError};
use agentlane_providers::{AssistantTurn, FailoverReason, ModelRequest, ProviderError};
use std::time::{Duration, Instant};

/// How an attempt went.
pub(super) enum Attempted {
    /// The model answered; the record's outcome is filled in once the answer is read.
    Answered {
        turn: Box<AssistantTurn>,
        record: AttemptRecord,
    },
    /// The call failed (already recorded).
    Failed(FailedAttempt),
    /// The run was stopped meanwhile (already recorded).
    Stopped(StopReason),
}

/// A failed attempt, as the retry decision needs it.
pub(super) struct FailedAttempt {
    pub error: ProviderError,
    pub stage: Stage,
    pub progress: bool,
    /// Estimated prompt tokens ÷ the model's context window.
    pub prompt_ratio: f64,
    /// The idle timeout the call ran with.
    pub idle: Duration,
}

impl ModelFailure {
    /// The failure as the retry loop classifies it: the error, where it surfaced, and whether
    /// the model had made progress.
    fn classify(self, idle: Duration) -> (ProviderError, Stage, bool) {
        match self {
            ModelFailure::Refused(error) => (error, Stage::Prompt, false),
            ModelFailure::OpenTimedOut => (idle_error(idle), Stage::Prompt, false),
            ModelFailure::Broken { error, progress } => (error, Stage::Assistant, progress),
            ModelFailure::Idle { progress } => (idle_error(idle), Stage::Assistant, progress),
            ModelFailure::EndedEarly { progress } => (
                ProviderError::new(
                    FailoverReason::Network,
                    "the model stream ended before the response was complete",
                ),
                Stage::Assistant,
                progress,
            ),
        }
    }
}

fn idle_error(idle: Duration) -> ProviderError {
    ProviderError::new(
        FailoverReason::Timeout,
        format!("model idle timeout: no data for {} ms", idle.as_millis()),
    )
}

impl Turn<'_> {
    /// Prices an attempt's usage (`costUsd`; `None` when its model has no price).
    pub(super) fn charge(&self, record: &mut AttemptRecord) {
        record.cost_usd = self
            .price_of(&record.model)
            .map(|p| agentlane_core::spend::usd(p.cost_micros(&record.usage)));
    }

    /// The price of `model` for this run: the deployment's, raised where its agent's own price
    /// is higher (an agent never lowers a price, nor prices a model the deployment does not).
    pub(super) fn price_of(&self, model: &str) -> Option<agentlane_core::spend::Price> {
        agentlane_core::spend::agent_price(
            self.runner.config.prices.price(model),
            self.agent.prices.get(model),
        )
    }

    /// The run's budget (the turn's, filled by its agent's), and whether the next call, to
    /// `selected` with `request`, fits it: its worst case (the prompt's estimate plus the most
    /// it may write) on top of what the run spent. `Some`: the run ends `budget_exceeded`.
    pub(super) fn over_budget(
        &self,
        selected: &Selected,
        request: &ModelRequest,
    ) -> Option<agentlane_core::RunError> {
        use agentlane_core::spend::{CallAsk, OverBudget, Spent, check_call, spent_micros};
        let run = self.writer.run();
        let budget = run.request.budget.unwrap_or_default().or(self.agent.budget);
        if budget.is_unlimited() {
            return None;
        }
        let ask = CallAsk {
            model: selected.model.full_name.clone(),
            prompt_tokens: estimate_tokens(request),
            max_output_tokens: self.output_reserve(selected, request),
            price: self.price_of(&selected.model.full_name),
        };
        let spent = Spent {
            tokens: run.usage.input_tokens + run.usage.output_tokens,
            micros: spent_micros(run.cost_usd.unwrap_or(0.0)),
        };
        let over = check_call(&budget, spent, &ask).err()?;
        tracing::info!(run = %run.run_id, reason = %over.message(), "the run's budget stops it");
        Some(agentlane_core::RunError::new(
            OverBudget::CODE,
            over.message(),
        ))
    }

    /// The most the call of `request` to `selected` may write, as its provider sends the cap
    /// (Anthropic's `max_tokens` includes the thinking budget): what a reservation holds.
    pub(super) fn output_reserve(&self, selected: &Selected, request: &ModelRequest) -> u64 {
        selected
            .profile
            .provider
            .output_cap(request)
            .map_or(self.runner.config.budget_output_reserve, u64::from)
    }

    /// Streams `request` to the selected model. Failures and stops are recorded in the ledger
    /// here; an answer is recorded by the caller once normalised.
    pub(super) async fn attempt(
        &mut self,
        selected: &Selected,
        request: ModelRequest,
    ) -> Result<Attempted, StoreError> {
        let config = &self.runner.config;
        let prompt_ratio =
            estimate_tokens(&request) as f64 / selected.model.context_window.max(1) as f64;
        let idle = if selected.profile.provider.self_hosted() {
            config.model_idle_timeout_self_hosted
        } else {
            // A scheduler's cap (a cron fire with an explicit timeout) cuts a stalled cloud
            // stream sooner, so fallbacks still run before the fire's deadline.
            let cap = self
                .writer
                .run()
                .request
                .model_idle_timeout_ms
                .map(Duration::from_millis);
            cap.map_or(config.model_idle_timeout, |c| {
                c.min(config.model_idle_timeout)
            })
        };
        let started_at = self.writer.now();
        let started = Instant::now();
        let outcome = stream_model(
            selected.profile.provider.as_ref(),
            request,
            idle,
            self.stop.token(),
            Some(&mut self.writer),
        )
        .await;
        let mut record = AttemptRecord {
            index: self.writer.next_attempt_index(),
            model: selected.model.full_name.clone(),
            profile: Some(selected.profile.name.clone()),
            outcome: String::new(),
            usage: Default::default(),
            cost_usd: None,
            started_at,
            duration_ms: started.elapsed().as_millis() as u64,
            error: None,
        };
        let failure = match outcome {
            Ok(turn) => {
                return Ok(Attempted::Answered {
                    turn: Box::new(turn),
                    record,
                });
            }
            Err(StreamError::Store(e)) => return Err(e),
            // A failure while the run is being stopped is the stop, whatever the provider said.
            Err(StreamError::Failed(failure)) if self.stop.reason().is_none() => failure,
            Err(StreamError::Failed(_) | StreamError::Stopped) => {
                let reason = self.stop.reason().unwrap_or(StopReason::Abort);
                record.outcome = AttemptOutcome::Stopped.as_str().into();
                self.charge(&mut record);
                self.writer.record_attempt(record);
                return Ok(Attempted::Stopped(reason));
            }
        };
        let (error, stage, progress) = failure.classify(idle);
        record.outcome = AttemptOutcome::Failed(error.reason).as_str().into();
        record.error = Some(error.message.clone());
        self.charge(&mut record);
        self.writer.record_attempt(record);
        Ok(Attempted::Failed(FailedAttempt {
            error,
            stage,
            progress,
            prompt_ratio,
            idle,
        }))
    }
}
