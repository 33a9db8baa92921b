//! One tool round: the assistant's tool calls announced and committed, the calls run
//! (unless their arguments could not be repaired or a hook blocks them) — concurrently, or one
//! at a time with a steering checkpoint before each launch when the deployment or a called tool
//! asks for sequential execution — their results — in call order, size-capped, rewritten by
//! persist hooks — committed in one logical commit, and the retry state asked whether the run
//! loops.

use super::tool_exec::{ToolRun, run_batch};
use super::turn_loop::{LoopEnd, Selected, Step, Turn};
use crate::audit;
use crate::context::precheck;
use crate::hooks::{
    HookPoint, PersistEvent, ToolCallDecision, ToolCallEvent, ToolResultEvent, parse_arguments,
};
use crate::writer::CommitKind;
use agentlane_core::{EventStream, Message, StoreError, ToolCall};
use agentlane_providers::AssistantTurn;
use agentlane_providers::SharedMessage;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The result of a sequential call not started because a steer message was waiting (SPEC §4):
/// every call keeps exactly one result, and the steer joins the run after the batch.
pub const SKIPPED_FOR_STEER: &str = "Skipped due to queued user message.";

impl Turn<'_> {
    /// Runs the tool calls of `turn` (whose assistant message is `assistant`); `invalid` holds
    /// the calls that must not run, with the error to answer them with.
    pub(super) async fn tool_round(
        &mut self,
        selected: &Selected,
        assistant: Message,
        turn: &AssistantTurn,
        invalid: &BTreeMap<String, String>,
    ) -> Result<Step, StoreError> {
        for call in &turn.tool_calls {
            self.writer.event(
                EventStream::Tool,
                json!({
                    "phase": "start",
                    "name": call.name,
                    "toolCallId": call.id,
                    "args": audit::args_preview(&call.arguments),
                }),
            );
        }
        self.writer.checkpoint(&self.retry);
        self.writer
            .commit(CommitKind::Progress(vec![assistant]))
            .await?;
        // Client calls and calls that need approval wait; the others run now.
        let pending = self.pending_calls(&turn.tool_calls, invalid);
        let waiting: std::collections::BTreeSet<&str> =
            pending.iter().map(|c| c.id.as_str()).collect();
        let now: Vec<ToolCall> = turn
            .tool_calls
            .iter()
            .filter(|c| !waiting.contains(c.id.as_str()))
            .cloned()
            .collect();
        let results = self.run_calls(&now, invalid).await?;
        let tool_loop = self.retry.on_tool_results(results.iter().map(|r| {
            (
                r.call.name.as_str(),
                r.call.arguments.as_str(),
                r.content.as_str(),
            )
        }));
        let cap = precheck::tool_result_cap(selected.model.context_window);
        let mut messages = Vec::with_capacity(results.len());
        for r in results {
            messages.push(self.record_result(r, cap).await);
        }
        self.history
            .extend(messages.iter().cloned().map(SharedMessage::from));
        self.writer.checkpoint(&self.retry);
        if !messages.is_empty() {
            self.writer.commit(CommitKind::Progress(messages)).await?;
        }
        if let Some(error) = tool_loop {
            return Ok(Step::End(LoopEnd::Failed(error)));
        }
        if !pending.is_empty() {
            return Ok(Step::End(LoopEnd::Paused(self.required_action(pending))));
        }
        self.take_steers().await?;
        Ok(Step::Continue)
    }

    /// The model boundary after a tool batch: steer messages accepted meanwhile join the run
    /// (SPEC §4), so the next model call sees them and the answer comes after them.
    pub(super) async fn take_steers(&mut self) -> Result<(), StoreError> {
        let steered = self.writer.take_steers().await?;
        if steered.is_empty() {
            return Ok(());
        }
        let run_ids: Vec<&str> = steered.iter().map(|r| r.run_id.as_str()).collect();
        tracing::info!(run = %self.writer.run().run_id, steered = ?run_ids, "steer messages joined the run");
        self.writer.event(
            EventStream::Lifecycle,
            json!({ "phase": "steered", "runIds": run_ids }),
        );
        self.history.extend(
            steered
                .iter()
                .map(|run| Message::user(run.request.message.clone()).into()),
        );
        Ok(())
    }

    /// Every call's outcome, in call order. Calls whose arguments could not be repaired, and
    /// calls a hook blocks, are answered with an error, not run. A hook may also rewrite a
    /// call's arguments.
    pub(super) async fn run_calls(
        &self,
        calls: &[ToolCall],
        invalid: &BTreeMap<String, String>,
    ) -> Result<Vec<ToolRun>, StoreError> {
        let hooks = &self.runner.hooks;
        let mut refused: BTreeMap<String, String> = invalid
            .iter()
            .map(|(id, problem)| (id.clone(), format!("error: {problem}")))
            .collect();
        let mut runnable: Vec<ToolCall> = Vec::new();
        for call in calls {
            if refused.contains_key(&call.id) {
                continue;
            }
            let mut call = call.clone();
            if hooks.has(HookPoint::BeforeToolCall) {
                match hooks
                    .before_tool_call(&self.hook_ctx, ToolCallEvent::from_call(&call))
                    .await
                {
                    ToolCallDecision::Block { reason, .. } => {
                        refused.insert(call.id.clone(), format!("blocked: {reason}"));
                        continue;
                    }
                    ToolCallDecision::Allow { params: Some(p) } => call.arguments = p.to_string(),
                    ToolCallDecision::Allow { params: None } => {}
                }
            }
            runnable.push(call);
        }
        let tools = &self.agent.tools;
        let sequential = self.runner.config.sequential_tools
            || runnable
                .iter()
                .any(|call| tools.get(&call.name).is_some_and(|tool| tool.sequential()));
        let mut ran = if sequential {
            self.run_one_at_a_time(&runnable).await?
        } else {
            self.launch(&runnable).await
        }
        .into_iter();
        Ok(calls
            .iter()
            .filter_map(|call| match refused.get(&call.id) {
                Some(content) => Some(ToolRun {
                    call: call.clone(),
                    content: content.clone(),
                    is_error: true,
                    duration_ms: 0,
                }),
                None => ran.next(),
            })
            .collect())
    }

    /// Runs `calls` concurrently.
    async fn launch(&self, calls: &[ToolCall]) -> Vec<ToolRun> {
        let remaining = self
            .runner
            .deadline(self.writer.run())
            .map(|at| Duration::from_millis(at.saturating_sub(self.writer.now())));
        run_batch(
            &self.agent.tools,
            calls,
            (self.runner.config.tool_timeout, remaining),
            self.stop.token(),
            self.writer.run().run_id.as_str(),
        )
        .await
    }

    /// Runs `calls` one at a time. Before each launch, a steer message waiting for the run
    /// (a read of the session's pending steers) stops the launches: that call and the ones
    /// after it are answered [`SKIPPED_FOR_STEER`], and the steer joins after the batch.
    async fn run_one_at_a_time(&self, calls: &[ToolCall]) -> Result<Vec<ToolRun>, StoreError> {
        let mut runs = Vec::with_capacity(calls.len());
        let mut steered = false;
        for call in calls {
            if !steered && self.writer.steers_waiting().await? {
                steered = true;
                tracing::info!(run = %self.writer.run().run_id, skipped = calls.len() - runs.len(), "a steer message waits: the calls not started are skipped");
            }
            if steered {
                runs.push(ToolRun {
                    call: call.clone(),
                    content: SKIPPED_FOR_STEER.to_owned(),
                    is_error: true,
                    duration_ms: 0,
                });
            } else {
                runs.extend(self.launch(std::slice::from_ref(call)).await);
            }
        }
        Ok(runs)
    }

    /// One result: its `tool` end event and audit line, the observer and persist hooks, and the
    /// transcript message (cut to `cap` characters).
    pub(super) async fn record_result(&mut self, r: ToolRun, cap: usize) -> Message {
        self.writer.event(
            EventStream::Tool,
            json!({
                "phase": "end",
                "name": r.call.name,
                "toolCallId": r.call.id,
                "isError": r.is_error,
                "durationMs": r.duration_ms,
            }),
        );
        audit::tool_call(self.writer.run(), &r.call.name, r.is_error, r.duration_ms);
        if r.is_error {
            self.last_tool_error = Some((r.call.name.clone(), r.content.clone()));
        }
        let mut content = r.content;
        let hooks = &self.runner.hooks;
        if !hooks.is_empty() {
            let observed = ToolResultEvent {
                tool_name: r.call.name.clone(),
                tool_call_id: r.call.id.clone(),
                arguments: parse_arguments(&r.call.arguments),
                result: content.clone(),
                is_error: r.is_error,
                duration_ms: r.duration_ms,
            };
            hooks.after_tool_call(&self.hook_ctx, observed).await;
            let persist = PersistEvent {
                tool_name: r.call.name.clone(),
                tool_call_id: r.call.id.clone(),
                result: content,
                is_error: r.is_error,
            };
            content = hooks.tool_result_persist(&self.hook_ctx, persist).await;
        }
        Message::Tool {
            tool_call_id: r.call.id,
            name: r.call.name,
            content: precheck::truncate(&content, cap).unwrap_or(content),
            is_error: r.is_error,
        }
    }
}
