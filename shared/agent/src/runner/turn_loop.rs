//! The loop of one pickup: model attempts and tool rounds until a final answer, a failure, or a
//! stop. One driver ([`Turn::run_loop`]) calls the named steps; every decision about what comes
//! next is asked of [`RetryState`] (`crate::retry`), the one place that decides.

use super::Runner;
use super::attempt::Attempted;
use super::stop::{StopReason, StopSignal};
use crate::hooks::{HookContext, HookPoint, PromptAdditions, PromptBuildEvent};
use crate::models::{Profile, ResolvedModel};
use crate::retry::{ModelExhausted, RetryState};
use crate::writer::RunWriter;
use agentlane_core::{EventStream, Message, RunError, StoreError};
use serde_json::json;
use std::time::Duration;

/// Where the current run sits in its session's history (for compaction).
pub(super) struct RunScope {
    /// Index in the history of the run's first message still shown (after a summary inside
    /// the run: the first message the summary left).
    pub run_start: usize,
    /// Seq of the last transcript entry before `history[run_start]` (what a summary of
    /// `history[..run_start]` covers); `None` when there is none.
    pub through_seq: Option<u64>,
}

/// A failed tool of the run: `(tool name, error text)`.
pub(super) type ToolFailure = (String, String);

/// How the loop ended.
pub(super) enum LoopEnd {
    Final {
        text: String,
        last_tool_error: Option<ToolFailure>,
        /// The final assistant message, written with the terminal status in one commit.
        pending: Option<Message>,
    },
    Failed(RunError),
    /// Directed retries are spent and the model still shows nothing.
    Incomplete,
    Stopped(StopReason),
    /// The batch's client calls or calls that need approval wait for their answer.
    Paused(agentlane_core::RequiredAction),
}

/// What a step of the loop leads to.
pub(super) enum Step {
    /// Another attempt.
    Continue,
    /// The loop is over.
    End(LoopEnd),
}

/// The model and auth profile an attempt uses.
pub(super) struct Selected {
    pub model: ResolvedModel,
    pub profile: Profile,
    /// Another model remains in the chain after this one.
    pub has_fallback: bool,
}

/// Which model the next attempt uses.
enum Selection {
    Use(Box<Selected>),
    /// The chain moved on: select again.
    Next,
    End(LoopEnd),
}

/// One pickup of a run: everything the loop's steps share, owned in one place.
pub(super) struct Turn<'r> {
    pub runner: &'r Runner,
    pub writer: RunWriter,
    /// The model's view of the session (compactions applied), grown as the run goes.
    pub history: Vec<agentlane_providers::SharedMessage>,
    pub scope: RunScope,
    /// The run's retry state, checkpointed with the run record.
    pub retry: RetryState,
    pub stop: StopSignal,
    pub hook_ctx: HookContext,
    /// Hook additions to the prompts, decided once per pickup.
    pub additions: PromptAdditions,
    /// The last tool of the run that failed (for the reply when the model says nothing).
    pub last_tool_error: Option<ToolFailure>,
    /// The agent the run runs, at its version.
    pub agent: std::sync::Arc<crate::agents::AgentProfile>,
    /// Approved calls of a resumed pause, to run after the start commit.
    pub approved: Vec<agentlane_core::ToolCall>,
    /// The session's interrupt mark when the pickup took the lock (a held start watches for a
    /// new one).
    pub interrupt_seen: Option<agentlane_core::InterruptMark>,
}

impl Turn<'_> {
    /// Model attempts and tool rounds until a final answer, a failure, or a stop.
    pub(super) async fn run_loop(&mut self) -> Result<LoopEnd, StoreError> {
        let chain = self.model_chain();
        self.additions = self.prompt_additions().await;
        if let Some(end) = self.answered_before() {
            return Ok(end);
        }
        loop {
            if let Some(reason) = self.stop.reason() {
                return Ok(LoopEnd::Stopped(reason));
            }
            let selected = match self.select_model(&chain) {
                Selection::Use(selected) => selected,
                Selection::Next => continue,
                Selection::End(end) => return Ok(end),
            };
            self.precheck(&selected).await?;
            let request = self.build_request(&selected.model);
            if let Some(error) = self.over_budget(&selected, &request) {
                return Ok(LoopEnd::Failed(error));
            }
            let held = match self.reserve_spend(&selected, &request).await? {
                Ok(held) => held,
                Err(error) => return Ok(LoopEnd::Failed(error)),
            };
            let attempt = self.attempt(&selected, request).await;
            if let Ok(attempted) = &attempt {
                self.settle_spend(held, attempted).await;
            }
            let attempt = attempt?;
            let step = match attempt {
                Attempted::Answered { turn, record } => {
                    let turn = *turn;
                    self.after_answer(&selected, turn, record).await?
                }
                Attempted::Failed(failed) => self.after_failure(&selected, failed).await?,
                Attempted::Stopped(reason) => Step::End(LoopEnd::Stopped(reason)),
            };
            match step {
                Step::Continue => {}
                Step::End(end) => return Ok(end),
            }
        }
    }

    /// The run's model chain: the turn's model, else the agent's, else the deployment's; then
    /// the agent's fallbacks, else the deployment's.
    pub(super) fn model_chain(&self) -> Vec<String> {
        let requested = self.writer.run().request.model.as_deref();
        self.runner.models.chain_with(
            requested.or(self.agent.model.as_deref()),
            self.agent.fallback_models.as_deref(),
        )
    }

    /// The system prompt of the run (without the hooks' additions).
    pub(super) fn system_prompt(&self) -> String {
        self.runner.system_prompt(self.writer.run(), &self.agent)
    }

    /// A previous pickup may have produced the final answer and died before ending the run.
    fn answered_before(&self) -> Option<LoopEnd> {
        match self.history.last().map(|m| m.message()) {
            Some(Message::Assistant {
                content,
                tool_calls,
                ..
            }) if tool_calls.is_empty() && !content.trim().is_empty() => Some(LoopEnd::Final {
                text: content.clone(),
                last_tool_error: None,
                pending: None,
            }),
            _ => None,
        }
    }

    /// The `before_prompt_build` hooks' additions, asked once per pickup.
    async fn prompt_additions(&self) -> PromptAdditions {
        if !self.runner.hooks.has(HookPoint::BeforePromptBuild) {
            return PromptAdditions::default();
        }
        let run = self.writer.run();
        let event = PromptBuildEvent {
            prompt: run.request.message.clone(),
            system_prompt: self.runner.system_prompt(run, &self.agent),
        };
        self.runner
            .hooks
            .before_prompt_build(&self.hook_ctx, event)
            .await
    }

    /// The model of the chain and the auth profile for the next attempt. The retry state says
    /// when the chain moves on or ends.
    fn select_model(&mut self, chain: &[String]) -> Selection {
        let name = match self.retry.current_model(chain) {
            Ok(name) => name,
            Err(error) => return Selection::End(LoopEnd::Failed(error)),
        };
        let has_fallback = self.retry.has_model_after(chain.len());
        let model = match self.runner.models.resolve(Some(name)) {
            Ok(model) => model,
            Err(message) => {
                if has_fallback {
                    tracing::warn!(model = %name, %message, "model unavailable; falling back");
                }
                return match self.retry.on_unusable_model(has_fallback, message) {
                    None => Selection::Next,
                    Some(error) => Selection::End(LoopEnd::Failed(error)),
                };
            }
        };
        match self
            .retry
            .check_attempt_cap(model.profiles.len(), has_fallback)
        {
            None => {}
            Some(ModelExhausted::Fallback { reason }) => {
                self.note_retry("fallback", reason.as_str(), Duration::ZERO);
                self.retry.advance_model();
                return Selection::Next;
            }
            Some(ModelExhausted::Fail(error)) => return Selection::End(LoopEnd::Failed(error)),
        }
        let profile_index = self
            .runner
            .models
            .pick_profile(&model, self.retry.profile_index());
        self.retry.start_attempt(profile_index);
        let profile = model.profiles[profile_index.min(model.profiles.len() - 1)].clone();
        self.writer.use_model(&model.full_name);
        Selection::Use(Box::new(Selected {
            model,
            profile,
            has_fallback,
        }))
    }

    /// Records a retry decision as a lifecycle event (visible to clients).
    pub(super) fn note_retry(&mut self, action: &str, reason: &str, delay: Duration) {
        let event = json!({
            "phase": "retry",
            "action": action,
            "reason": reason,
            "delayMs": delay.as_millis() as u64,
            "model": self.writer.run().model,
        });
        self.writer.event(EventStream::Lifecycle, event);
    }
}
