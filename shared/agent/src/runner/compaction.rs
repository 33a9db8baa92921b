//! Keeping the prompt within the model's context window: the token precheck before every
//! model call, and compaction (one summarizing model call replacing the history before the
//! current run by one transcript entry) with its observer hooks around it.

use super::stream::{ModelFailure, StreamError, stream_model};
use super::turn_loop::{Selected, Turn};
use crate::context::compaction::{compacted_history, nothing_to_compact, summary_request};
use crate::context::precheck::{self, Route};
use crate::context::tokens::estimate_parts;
use crate::hooks::{CompactionEvent, CompactionResultEvent};
use crate::retry::CompactionTrigger;
use crate::writer::CommitKind;
use agentlane_core::{EventStream, Message, StoreError};
use agentlane_providers::{ModelProvider, ModelRequest};
use serde_json::json;
use std::time::Duration;

impl Turn<'_> {
    /// The token-budget precheck before a model call: when the prompt would not fit, compact the
    /// earlier history (spending an overflow compaction) and/or cut oversized tool results, so
    /// the call is made with a prompt that fits. Whatever remains is left to the provider (its
    /// overflow error takes the failure path).
    pub(super) async fn precheck(&mut self, selected: &Selected) -> Result<(), StoreError> {
        let system = self.system_prompt();
        let tools = self.agent.tools.specs();
        let estimate = |h: &[Message]| -> u64 {
            (estimate_parts(&system, h, &tools) as f64 * precheck::SAFETY_MARGIN) as u64
                + precheck::TOKENS_PER_MESSAGE * h.len() as u64
        };
        let window = selected.model.context_window;
        let route_of =
            |h: &[Message]| precheck::route(estimate(h), window, precheck::reducible_chars(h));
        let mut route = route_of(&self.history);
        if matches!(route, Route::CompactOnly | Route::CompactThenTruncate)
            && let Some(through_seq) = self.scope.through_seq
            && self.retry.take_overflow_compaction()
        {
            let idle = self.runner.config.model_idle_timeout;
            let trigger = CompactionTrigger::Overflow;
            if let Ok(run_start) = self.compact(selected, idle, trigger, through_seq).await? {
                self.scope.run_start = run_start;
                self.retry.on_compacted(false);
            }
            route = route_of(&self.history);
        }
        if route != Route::Fits && route != Route::CompactOnly {
            let over = estimate(&self.history).saturating_sub(precheck::prompt_budget(window));
            let cut = precheck::truncate_tool_results(&mut self.history, over * 4 * 3 / 2 + 2048);
            self.writer.event(
                EventStream::Compaction,
                json!({ "phase": "truncate", "toolResults": cut }),
            );
        }
        Ok(())
    }

    /// Compaction of the history before the current run (entries up to `through_seq`), with the
    /// observer hooks around it. `Ok(Ok(run_start))`: the run's first message is now at
    /// `run_start`; `Ok(Err(why))`: nothing was compacted, the history is unchanged.
    pub(super) async fn compact(
        &mut self,
        selected: &Selected,
        idle: Duration,
        trigger: CompactionTrigger,
        through_seq: u64,
    ) -> Result<Result<usize, String>, StoreError> {
        let runner = self.runner;
        let system = self.system_prompt();
        let hooks = &runner.hooks;
        if !hooks.is_empty() {
            let event = CompactionEvent {
                trigger,
                messages: self.history.len(),
                estimated_tokens: estimate_parts(&system, &self.history, &[]),
            };
            hooks.before_compaction(&self.hook_ctx, event).await;
        }
        let result = self
            .summarize_history(selected, idle, trigger, through_seq, &system)
            .await?;
        if !hooks.is_empty() {
            let event = CompactionResultEvent {
                trigger,
                compacted: result.is_ok(),
                error: result.as_ref().err().cloned(),
            };
            hooks.after_compaction(&self.hook_ctx, event).await;
        }
        Ok(result)
    }

    /// Summarizes `history[..run_start]` with one model call and replaces it, in the history and
    /// in the transcript, by a compaction entry.
    async fn summarize_history(
        &mut self,
        selected: &Selected,
        idle: Duration,
        trigger: CompactionTrigger,
        through_seq: u64,
        system: &str,
    ) -> Result<Result<usize, String>, StoreError> {
        let run_start = self.scope.run_start;
        if let Some(why) = nothing_to_compact(&self.history, run_start) {
            return Ok(Err(why.to_owned()));
        }
        let tokens_before = estimate_parts(system, &self.history, &[]);
        self.writer.event(
            EventStream::Compaction,
            json!({ "phase": "start", "trigger": trigger, "tokensBefore": tokens_before }),
        );
        self.writer.flush_events().await?;
        let request = summary_request(&selected.model.model, &self.history, run_start);
        // The summarizing call counts against the run's and the tenant's budgets like any.
        if let Some(error) = self.over_budget(selected, &request) {
            return Ok(Err(format!("budget_exceeded: {}", error.message)));
        }
        let held = match self.reserve_side_call(selected, &request).await? {
            Ok(held) => held,
            Err(error) => return Ok(Err(format!("budget_exceeded: {}", error.message))),
        };
        let provider = selected.profile.provider.as_ref();
        let called = self.summarize(provider, request, idle).await;
        let usage = called.as_ref().map(|(_, usage)| *usage).unwrap_or_default();
        self.settle_usage(held, usage).await;
        let model = &selected.model.full_name;
        let cost = self
            .price_of(model)
            .map(|p| agentlane_core::spend::usd(p.cost_micros(&usage)));
        self.writer.record_usage(model, usage, cost);
        let summary = match called.map(|(text, _)| text) {
            Ok(s) if !s.trim().is_empty() => s,
            Ok(_) => return Ok(Err("the summary came back empty".into())),
            Err(e) => {
                self.writer.event(
                    EventStream::Compaction,
                    json!({ "phase": "end", "completed": false, "error": e }),
                );
                self.writer.flush_events().await?;
                return Ok(Err(e));
            }
        };
        let compacted = compacted_history(
            &summary,
            through_seq,
            tokens_before,
            system,
            &self.history,
            run_start,
        );
        let tokens_after = match compacted.first() {
            Some(Message::Compaction { tokens_after, .. }) => *tokens_after,
            _ => 0,
        };
        self.writer.event(
            EventStream::Compaction,
            json!({
                "phase": "end",
                "completed": true,
                "trigger": trigger,
                "tokensBefore": tokens_before,
                "tokensAfter": tokens_after,
            }),
        );
        let entry = compacted.iter().take(1).cloned().collect();
        self.writer.commit(CommitKind::Entries(entry)).await?;
        self.history = compacted;
        Ok(Ok(1))
    }

    /// The summarizing call, through the same streamer as attempts (no events: the summary is
    /// not a reply). `Err` says why it gave no summary.
    async fn summarize(
        &self,
        provider: &dyn ModelProvider,
        request: ModelRequest,
        idle: Duration,
    ) -> Result<(String, agentlane_core::Usage), String> {
        match stream_model(provider, request, idle, self.stop.token(), None).await {
            Ok(turn) => Ok((turn.text, turn.usage)),
            Err(StreamError::Failed(failure)) => Err(match failure {
                ModelFailure::Refused(e) | ModelFailure::Broken { error: e, .. } => e.message,
                ModelFailure::OpenTimedOut => "the compaction call timed out".into(),
                ModelFailure::Idle { .. } => "the compaction call went idle".into(),
                ModelFailure::EndedEarly { .. } => "the compaction stream ended early".into(),
            }),
            Err(StreamError::Stopped) => Err("the run was stopped".into()),
            Err(StreamError::Store(e)) => Err(e.to_string()),
        }
    }
}
