//! Durable pauses (issue 20): a tool batch with client calls or calls that need approval runs
//! what it can, then the run commits `requires_action` and its pickup ends; nothing runs or
//! polls while it waits. The answer (recorded beside the run by the API) comes back as a lane
//! message; the pickup that resumes turns each pending call into its result — a client's
//! output, a denial, an expiry, an abort — and runs the approved calls, at most once: the
//! commit that precedes them marks the pause resumed, and a later pickup that finds the mark
//! answers any of them still without a result "interrupted" instead of running it again.

use super::TurnExit;
use super::stop::StopReason;
use super::tool_exec::ToolRun;
use super::turn_loop::{LoopEnd, Turn};
use crate::context::precheck;
use crate::writer::CommitKind;
use agentlane_core::action::{Resolution, pending_kind, resolve};
use agentlane_core::{
    EventStream, Message, PendingCall, RequiredAction, Run, StoreError, ToolCall,
};
use agentlane_providers::SharedMessage;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Whether a paused run has something to resume with: an answer to its pause, an abort, or a
/// resume an earlier pickup began.
pub(super) fn may_resume(run: &Run) -> bool {
    let Some(action) = &run.required_action else {
        return true;
    };
    run.abort_requested
        || action.resumed
        || run
            .action_answer
            .as_ref()
            .is_some_and(|a| a.action_id == action.id)
}

impl Turn<'_> {
    /// The calls of a batch that pause the run, in call order (calls that must not run, in
    /// `invalid`, are answered at once instead).
    pub(super) fn pending_calls(
        &self,
        calls: &[ToolCall],
        invalid: &BTreeMap<String, String>,
    ) -> Vec<PendingCall> {
        calls
            .iter()
            .filter(|c| !invalid.contains_key(&c.id))
            .filter_map(|c| {
                let kind = pending_kind(
                    &c.name,
                    &self.agent.client_tools,
                    self.agent.approval.as_ref(),
                )?;
                Some(PendingCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| Value::String(c.arguments.clone())),
                    kind,
                })
            })
            .collect()
    }

    /// The pause that waits on `calls`.
    pub(super) fn required_action(&self, calls: Vec<PendingCall>) -> RequiredAction {
        let now = self.writer.now();
        let timeout = u64::try_from(self.agent.action_timeout().as_millis()).unwrap_or(u64::MAX);
        let id = self
            .writer
            .run()
            .required_action
            .as_ref()
            .map_or(1, |a| a.id + 1);
        // An absolute deadline (a cron fire's timeout) still holds: the pause expires then,
        // and the resumed run ends `timeout`.
        let mut expires_at = now.saturating_add(timeout);
        if let Some(deadline) = self.writer.run().request.deadline_at {
            expires_at = expires_at.min(deadline.max(now));
        }
        RequiredAction {
            id,
            tool_calls: calls,
            paused_at: now,
            expires_at,
            resumed: false,
            event_seq: None,
        }
    }

    /// Commits the pause: `requires_action` (livenessState `paused`), the checkpoint, a
    /// `lifecycle` event, the session still busy and the lock released.
    pub(super) async fn pause(
        mut self,
        mut action: RequiredAction,
    ) -> Result<TurnExit, StoreError> {
        let calls: Vec<Value> = action
            .tool_calls
            .iter()
            .map(|c| json!({"toolCallId": c.id, "name": c.name, "kind": c.kind}))
            .collect();
        let event = json!({
            "phase": "requires_action",
            "toolCalls": calls,
            "expiresAt": action.expires_at,
        });
        tracing::info!(
            run = %self.writer.run().run_id,
            calls = action.tool_calls.len(),
            expires_at = action.expires_at,
            "the run pauses for its pending tool calls"
        );
        self.writer.checkpoint(&self.retry);
        self.writer.event(EventStream::Lifecycle, event);
        action.event_seq = self.writer.last_event_seq();
        self.writer.require_action(action);
        self.writer.commit(CommitKind::HandBack).await?;
        agentlane_core::metrics::incr(
            agentlane_core::metrics::TURNS,
            &[("status", "requires_action")],
        );
        Ok(TurnExit::Paused)
    }

    /// The results a resumed pickup starts with, given `missing` (an "aborted" result for each
    /// dangling call of the last assistant message): a pending call of the run's pause gets
    /// its answer's result instead, and an approved one none yet (it runs after the start
    /// commit, which marks the pause resumed).
    pub(super) fn resume_results(&mut self, missing: Vec<Message>) -> Vec<Message> {
        let run = self.writer.run();
        let Some(action) = run.required_action.clone() else {
            return missing;
        };
        let dangling: BTreeSet<String> = missing
            .iter()
            .filter_map(|m| match m {
                Message::Tool { tool_call_id, .. } => Some(tool_call_id.clone()),
                _ => None,
            })
            .collect();
        let fates: BTreeMap<String, (PendingCall, Resolution)> =
            resolve(&action, run.action_answer.as_ref(), run.abort_requested)
                .into_iter()
                .filter(|(call, _)| dangling.contains(&call.id))
                .map(|(call, fate)| (call.id.clone(), (call, fate)))
                .collect();
        let mut approved = Vec::new();
        let mut out = Vec::with_capacity(missing.len());
        for message in missing {
            let Message::Tool {
                tool_call_id, name, ..
            } = &message
            else {
                out.push(message);
                continue;
            };
            match fates.get(tool_call_id) {
                None => out.push(message),
                Some((_, Resolution::Result { content, is_error })) => out.push(Message::Tool {
                    tool_call_id: tool_call_id.clone(),
                    name: name.clone(),
                    content: content.clone(),
                    is_error: *is_error,
                }),
                Some((call, Resolution::Run)) => approved.push(ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: match &call.arguments {
                        Value::String(raw) => raw.clone(),
                        other => other.to_string(),
                    },
                }),
            }
        }
        if !approved.is_empty() {
            self.writer.mark_resumed();
        }
        self.approved = approved;
        out
    }

    /// After the start commit of a resumed pause: the approved calls run and their results are
    /// committed; then steer messages accepted while it waited join the run. An abort ends it
    /// here (every call already has its result).
    pub(super) async fn after_resume(&mut self) -> Result<Option<LoopEnd>, StoreError> {
        let approved = std::mem::take(&mut self.approved);
        let paused = self.writer.run().required_action.is_some();
        if !approved.is_empty() {
            tracing::info!(run = %self.writer.run().run_id, calls = approved.len(), "running the approved calls");
            let runs: Vec<ToolRun> = self.run_calls(&approved, &BTreeMap::new()).await?;
            let model = self.writer.run().model.clone();
            let cap = match self.runner.models.resolve(model.as_deref()) {
                Ok(model) => precheck::tool_result_cap(model.context_window),
                Err(_) => precheck::tool_result_cap(Default::default()),
            };
            let mut messages = Vec::with_capacity(runs.len());
            for r in runs {
                messages.push(self.record_result(r, cap).await);
            }
            self.history
                .extend(messages.iter().cloned().map(SharedMessage::from));
            self.writer.checkpoint(&self.retry);
            self.writer.commit(CommitKind::Progress(messages)).await?;
        }
        if self.writer.run().abort_requested {
            return Ok(Some(LoopEnd::Stopped(StopReason::Abort)));
        }
        if paused {
            self.take_steers().await?;
        }
        Ok(None)
    }
}
