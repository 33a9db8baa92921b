//! Keeping the prompt within the model's context window: the token precheck before every
//! model call, and compaction with its observer hooks around it — inside a run too: the
//! results of the run's earlier tool rounds cut (in the request only), or one summarizing
//! model call replacing the history before the run, or before the run's latest rounds, by one
//! transcript entry (`context::relief` decides which).

use super::stream::{ModelFailure, StreamError, stream_model};
use super::turn_loop::{Selected, Turn};
use crate::context::compaction::{compacted_history, nothing_to_compact, summary_request};
use crate::context::precheck::{self, Route};
use crate::context::relief::{self, Pressure, Relief, RoundSize};
use crate::context::tokens::estimate_parts;
use crate::hooks::{CompactionEvent, CompactionResultEvent};
use crate::retry::CompactionTrigger;
use crate::writer::CommitKind;
use agentlane_core::{EventStream, Message, StoreError};
use agentlane_providers::{ModelProvider, ModelRequest};
use serde_json::json;
use std::ops::Range;
use std::time::Duration;

/// Why nothing was compacted when neither history before the run nor an earlier round is left.
const NOTHING_TO_COMPACT: &str =
    "there is no earlier history and no earlier tool round of this run left to compact";

/// What a summary covers: `history[..split]`, whose last transcript entry is `through_seq`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    /// The summary replaces `history[..split]`.
    pub split: usize,
    /// The seq of the last transcript entry the summary covers.
    pub through_seq: u64,
    /// The span reaches into the run (its prompt and earlier rounds), not only the history
    /// before it.
    pub in_run: bool,
}

/// What relieved the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Relieved {
    /// The results of the run's earlier rounds were cut (in the request only).
    Cut,
    /// A summary was written; `in_run`: it covers the run's earlier rounds too.
    Summarised { in_run: bool },
}

/// The note after an in-run summary, before the user's own words of the run.
const IN_RUN_NOTE: &str = "This run is still in progress: the tool rounds after this summary are \
its latest. The user's messages in this run, verbatim:";

impl Turn<'_> {
    /// The token-budget precheck before a model call: when the prompt would not fit, cut
    /// oversized tool results when that alone is enough; else relieve it (see
    /// [`Turn::relieve`]: cut the run's earlier rounds, or summarise, spending an overflow
    /// compaction); then cut oversized results if still needed. Whatever remains is left to
    /// the provider (its overflow error takes the failure path).
    pub(super) async fn precheck(&mut self, selected: &Selected) -> Result<(), StoreError> {
        let window = selected.model.context_window;
        let route_of = |t: &Self| {
            let h = &t.history;
            precheck::route(t.prompt_estimate(h), window, precheck::reducible_chars(h))
        };
        let mut route = route_of(self);
        if route == Route::Fits {
            return Ok(());
        }
        // Relief may call the model to summarize: a held start is not kept waiting for it.
        self.writer.write_held_start().await?;
        if route != Route::TruncateToolResultsOnly {
            let budget = precheck::prompt_budget(window);
            let over = self.prompt_estimate(&self.history).saturating_sub(budget);
            let trigger = (
                CompactionTrigger::Overflow,
                self.runner.config.model_idle_timeout,
            );
            match self
                .relieve(selected, (over, budget), trigger, false)
                .await?
            {
                Ok(Relieved::Summarised { .. }) => self.retry.on_compacted(false),
                Ok(Relieved::Cut) => {}
                Err(why) => tracing::debug!(%why, "the precheck found nothing to compact"),
            }
            route = route_of(self);
        }
        if route != Route::Fits && route != Route::CompactOnly {
            let over = self
                .prompt_estimate(&self.history)
                .saturating_sub(precheck::prompt_budget(window));
            let cut = precheck::truncate_tool_results(&mut self.history, over * 4 * 3 / 2 + 2048);
            self.writer.event(
                EventStream::Compaction,
                json!({ "phase": "truncate", "toolResults": cut }),
            );
        }
        Ok(())
    }

    /// The precheck's estimate of a prompt with `history` (safety margin and framing included).
    pub(super) fn prompt_estimate<M: std::borrow::Borrow<Message>>(&self, history: &[M]) -> u64 {
        let system = self.system_prompt();
        let tools = self.agent.tools.spec_chars();
        (estimate_parts(&system, history, tools) as f64 * precheck::SAFETY_MARGIN) as u64
            + precheck::TOKENS_PER_MESSAGE * history.len() as u64
    }

    /// The run's rounds and what the prompt is made of, for [`relief::relief`].
    fn pressure(
        &self,
        over: u64,
        budget: u64,
        summaries_left: bool,
    ) -> (Pressure, Vec<Range<usize>>) {
        let run_start = self.scope.run_start.min(self.history.len());
        let ranges = relief::rounds(&self.history, run_start);
        let rounds = ranges
            .iter()
            .map(|r| RoundSize {
                tokens: relief::tokens_of(&self.history[r.clone()]),
                cuttable: relief::cuttable_tokens(&self.history[r.clone()]),
            })
            .collect();
        let before_run = (self.scope.through_seq.is_some()
            && nothing_to_compact(&self.history, run_start).is_none())
        .then(|| relief::tokens_of(&self.history[..run_start]));
        let pressure = Pressure {
            over,
            budget,
            before_run,
            rounds,
            summaries_left,
        };
        (pressure, ranges)
    }

    /// Whether anything could relieve an overflowing prompt: history before the run to
    /// summarise, or earlier rounds of the run to cut or summarise.
    pub(super) fn can_relieve(&self) -> bool {
        let (pressure, _) = self.pressure(1, 1, true);
        pressure.before_run.is_some() || pressure.rounds.len() > 1
    }

    /// Relieves a prompt `over` tokens over `budget` with what [`relief::relief`] says: the
    /// results of the run's earlier rounds cut (in the request only: the transcript keeps them
    /// whole, and a later pickup cuts again as its own precheck needs), or a summary written
    /// (spending an overflow compaction unless `spent`: the failure path spent it already).
    /// `Ok(Err(why))`: nothing was done.
    pub(super) async fn relieve(
        &mut self,
        selected: &Selected,
        (over, budget): (u64, u64),
        (trigger, idle): (CompactionTrigger, Duration),
        spent: bool,
    ) -> Result<Result<Relieved, String>, StoreError> {
        let left = spent || self.retry.overflow_compaction_left();
        let (pressure, ranges) = self.pressure(over, budget, left);
        let span = match relief::relief(&pressure) {
            Relief::Fits => return Ok(Err("the prompt fits".into())),
            Relief::Nothing => return Ok(Err(NOTHING_TO_COMPACT.into())),
            Relief::CutEarlier { rounds } => {
                self.cut_earlier(&ranges[..rounds]);
                return Ok(Ok(Relieved::Cut));
            }
            Relief::SummariseBeforeRun => match self.scope.through_seq {
                Some(through_seq) => Span {
                    split: self.scope.run_start,
                    through_seq,
                    in_run: false,
                },
                None => return Ok(Err(NOTHING_TO_COMPACT.into())),
            },
            Relief::SummariseRounds { rounds } => match self.round_span(ranges[rounds].start) {
                Some(span) => span,
                None => return Ok(Err("the run's rounds do not match its transcript".into())),
            },
        };
        if !spent && !self.retry.take_overflow_compaction() {
            return Ok(Err("no overflow compaction is left".into()));
        }
        Ok(match self.compact(selected, idle, trigger, span).await? {
            Ok(()) => Ok(Relieved::Summarised {
                in_run: span.in_run,
            }),
            Err(why) => Err(why),
        })
    }

    /// The span of a summary of everything before `split` (the start of a round). Every
    /// message from a round on is one transcript entry of the run, the last ones written, so
    /// the entry before `split` is found by counting back from the writer's next seq.
    fn round_span(&self, split: usize) -> Option<Span> {
        let kept = (self.history.len() - split) as u64;
        let through_seq = self.writer.next_seq().checked_sub(kept + 1)?;
        let covered = self.scope.through_seq.map_or(0, |s| s + 1);
        (split >= self.scope.run_start && through_seq >= covered).then_some(Span {
            split,
            through_seq,
            in_run: true,
        })
    }

    /// Cuts the tool results of `ranges` (earlier rounds of the run) and records it.
    fn cut_earlier(&mut self, ranges: &[Range<usize>]) {
        let before = self.prompt_estimate(&self.history);
        let cut = relief::cut_rounds(&mut self.history, ranges);
        self.retry.on_earlier_rounds_cut();
        let after = self.prompt_estimate(&self.history);
        self.writer.event(
            EventStream::Compaction,
            json!({
                "phase": "truncate",
                "scope": "run",
                "rounds": ranges.len(),
                "toolResults": cut,
                "tokensBefore": before,
                "tokensAfter": after,
            }),
        );
    }

    /// Compaction of `history[..span.split]` (entries up to `span.through_seq`), with the
    /// observer hooks around it. `Ok(Ok(()))`: the run's messages now start right after the
    /// summary; `Ok(Err(why))`: nothing was compacted, the history is unchanged.
    pub(super) async fn compact(
        &mut self,
        selected: &Selected,
        idle: Duration,
        trigger: CompactionTrigger,
        span: Span,
    ) -> Result<Result<(), String>, StoreError> {
        let runner = self.runner;
        let system = self.system_prompt();
        let hooks = &runner.hooks;
        if !hooks.is_empty() {
            let event = CompactionEvent {
                trigger,
                messages: self.history.len(),
                estimated_tokens: estimate_parts(&system, &self.history, 0),
            };
            hooks.before_compaction(&self.hook_ctx, event).await;
        }
        let result = self
            .summarize_history(selected, idle, trigger, span, &system)
            .await?;
        if !hooks.is_empty() {
            let event = CompactionResultEvent {
                trigger,
                compacted: result.is_ok(),
                error: result.as_ref().err().cloned(),
            };
            hooks.after_compaction(&self.hook_ctx, event).await;
        }
        if result.is_ok() {
            self.scope.run_start = 1;
            self.scope.through_seq = Some(span.through_seq);
        }
        Ok(result)
    }

    /// Summarizes `history[..span.split]` with one model call and replaces it, in the history
    /// and in the transcript, by a compaction entry. A summary reaching into the run carries
    /// the user's words of the run verbatim, and lands with the run's checkpoint in one commit.
    async fn summarize_history(
        &mut self,
        selected: &Selected,
        idle: Duration,
        trigger: CompactionTrigger,
        span: Span,
        system: &str,
    ) -> Result<Result<(), String>, StoreError> {
        let split = span.split;
        if let Some(why) = nothing_to_compact(&self.history, split) {
            return Ok(Err(why.to_owned()));
        }
        let scope = if span.in_run { "run" } else { "history" };
        let tokens_before = estimate_parts(system, &self.history, 0);
        self.writer.event(
            EventStream::Compaction,
            json!({ "phase": "start", "trigger": trigger, "scope": scope, "tokensBefore": tokens_before }),
        );
        self.writer.flush_events().await?;
        let request = summary_request(&selected.model.model, &self.history, split);
        let summary = match self.summary_call(selected, idle, request).await? {
            Ok(summary) => summary,
            Err(e) => return Ok(Err(e)),
        };
        let summary = if span.in_run {
            // The run's prompt, then what joined it (collected or steer messages) in the span.
            let run_start = self.scope.run_start.min(split);
            let prompt = Message::user(self.writer.run().request.message.clone());
            let mut said = vec![prompt.clone()];
            said.extend(
                self.history[run_start..split]
                    .iter()
                    .filter(|m| **m != prompt)
                    .map(|m| m.message().clone()),
            );
            let words = relief::user_words(&said, 4_000);
            format!(
                "{}\n\n{IN_RUN_NOTE}\n{}",
                summary.trim(),
                words.join("\n\n")
            )
        } else {
            summary
        };
        let compacted = compacted_history(
            &summary,
            span.through_seq,
            tokens_before,
            system,
            &self.history,
            split,
        );
        let tokens_after = match compacted.first().map(|m| m.message()) {
            Some(Message::Compaction { tokens_after, .. }) => *tokens_after,
            _ => 0,
        };
        self.writer.event(
            EventStream::Compaction,
            json!({
                "phase": "end",
                "completed": true,
                "trigger": trigger,
                "scope": scope,
                "tokensBefore": tokens_before,
                "tokensAfter": tokens_after,
            }),
        );
        let entry = compacted
            .iter()
            .take(1)
            .map(|m| m.message().clone())
            .collect();
        if span.in_run {
            self.writer.checkpoint(&self.retry);
            self.writer.commit(CommitKind::Progress(entry)).await?;
        } else {
            self.writer.commit(CommitKind::Entries(entry)).await?;
        }
        self.history = compacted;
        Ok(Ok(()))
    }

    /// The summarizing call for `request`, checked against the run's and the tenant's budgets
    /// and counted in the run's usage like any call. `Ok(Err(why))`: no summary.
    async fn summary_call(
        &mut self,
        selected: &Selected,
        idle: Duration,
        request: ModelRequest,
    ) -> Result<Result<String, String>, StoreError> {
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
        match called.map(|(text, _)| text) {
            Ok(s) if !s.trim().is_empty() => Ok(Ok(s)),
            Ok(_) => Ok(Err("the summary came back empty".into())),
            Err(e) => {
                self.writer.event(
                    EventStream::Compaction,
                    json!({ "phase": "end", "completed": false, "error": e }),
                );
                self.writer.flush_events().await?;
                Ok(Err(e))
            }
        }
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
