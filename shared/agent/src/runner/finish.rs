//! The end of a pickup: the terminal commit (status, payloads, the final answer, the session
//! idle, the lock released) with the reply hooks around it — or, on shutdown, the hand-back
//! commit. Also the turn a `before_agent_reply` hook claimed.

use super::stop::StopReason;
use super::turn_loop::{LoopEnd, Turn};
use super::{INCOMPLETE_REPLY, TurnExit};
use crate::answer::reply::shape_payloads;
use crate::audit;
use crate::hooks::{AgentEndEvent, HookPoint, MessageEvent, ReplyClaimed, SendDecision};
use crate::writer::CommitKind;
use crate::writer::record::Ending;
use agentlane_core::{
    AbortReason, EventStream, LivenessState, Message, Payload, Run, RunError, RunStatus,
    StoreError, metrics,
};
use serde_json::json;

impl Turn<'_> {
    /// Writes the terminal state (or the hand-back state) and releases the lock.
    pub(super) async fn finish(mut self, end: LoopEnd) -> Result<TurnExit, StoreError> {
        let mut final_messages = Vec::new();
        let abort_reason = match end {
            LoopEnd::Stopped(StopReason::Abort) => self.abort_reason().await,
            _ => AbortReason::Requested,
        };
        let ending = match end {
            LoopEnd::Final {
                text,
                last_tool_error,
                pending,
            } => {
                final_messages.extend(pending);
                let tool_error = last_tool_error
                    .as_ref()
                    .map(|(n, m)| (n.as_str(), m.as_str()));
                ending(RunStatus::Ok, LivenessState::Working, None)
                    .with_payloads(shape_payloads(&text, tool_error))
            }
            LoopEnd::Failed(e) => ending(RunStatus::Error, LivenessState::Blocked, Some(e)),
            LoopEnd::Incomplete => ending(
                RunStatus::Error,
                LivenessState::Abandoned,
                Some(RunError::new("incomplete_turn", INCOMPLETE_REPLY)),
            )
            .with_payloads(vec![Payload {
                text: INCOMPLETE_REPLY.to_owned(),
                is_error: true,
            }]),
            LoopEnd::Stopped(StopReason::Abort) => ending(
                RunStatus::Aborted,
                LivenessState::Abandoned,
                Some(match abort_reason {
                    AbortReason::Requested => {
                        RunError::new(abort_reason.code(), "the run was aborted on request")
                    }
                    AbortReason::Interrupted => RunError::new(
                        abort_reason.code(),
                        "an interrupt message to the session ended the run",
                    ),
                    AbortReason::Stuck => RunError::new(
                        abort_reason.code(),
                        "the run made no progress past the stuck-abort threshold; the \
                         supervisor aborted it",
                    ),
                }),
            ),
            LoopEnd::Stopped(StopReason::SessionReset) => ending(
                RunStatus::Aborted,
                LivenessState::Abandoned,
                Some(RunError::new(
                    "session_reset",
                    "the session was reset after this run was accepted",
                )),
            ),
            LoopEnd::Stopped(StopReason::Timeout) => ending(
                RunStatus::Timeout,
                LivenessState::Abandoned,
                Some(RunError::new("run_timeout", "the run reached its timeout")),
            ),
            LoopEnd::Stopped(StopReason::LockLost) => return Ok(TurnExit::Abandoned),
            LoopEnd::Stopped(StopReason::Shutdown) => return self.hand_back().await,
            LoopEnd::Paused(action) => return self.pause(action).await,
        };
        let status = ending.status;
        if status == RunStatus::Aborted && abort_reason == AbortReason::Interrupted {
            self.writer
                .set_queue_outcome(agentlane_core::QueueOutcome::Interrupted);
        }
        let payloads = self.shape_with_hooks(ending.payloads.clone()).await;
        self.writer.end(Ending { payloads, ..ending });
        let run = self.writer.run();
        let event = json!({
            "phase": if status == RunStatus::Ok { "end" } else { "error" },
            "status": status.as_str(),
            "endedAt": run.ended_at,
            "error": run.error,
            "livenessState": run.liveness_state,
            "usage": run.usage,
            "costUsd": run.cost_usd,
        });
        self.writer.event(EventStream::Lifecycle, event);
        self.writer
            .commit(CommitKind::Finish(final_messages))
            .await?;
        audit::run_end(self.writer.run());
        metrics::incr(metrics::TURNS, &[("status", status.as_str())]);
        self.after_reply().await;
        Ok(TurnExit::Finished(status))
    }

    /// Why the run was asked to abort: the reason on the run record (the copy read at pickup,
    /// else a fresh read, since the request usually came later). A failed read counts as a
    /// plain request.
    async fn abort_reason(&self) -> AbortReason {
        if let Some(reason) = self.writer.run().abort_reason {
            return reason;
        }
        let run = self.writer.run();
        match self.runner.store.get_run(&run.tenant, &run.run_id).await {
            Ok(Some(fresh)) => fresh.abort_reason.unwrap_or(AbortReason::Requested),
            _ => AbortReason::Requested,
        }
    }

    /// A run steered into `carrier` (which ended) ends as it did: same status, payloads and
    /// error; one more finished run of the session, and the lock released.
    pub(super) async fn finish_carried(mut self, carrier: &Run) -> Result<TurnExit, StoreError> {
        let status = carrier.status;
        self.writer.end(Ending {
            status,
            liveness: carrier.liveness_state,
            error: carrier.error.clone(),
            payloads: carrier.payloads.clone(),
        });
        let run = self.writer.run();
        let event = json!({
            "phase": if status == RunStatus::Ok { "end" } else { "error" },
            "status": status.as_str(),
            "endedAt": run.ended_at,
            "error": run.error,
            "queueOutcome": run.queue_outcome,
            "intoRunId": run.into_run_id,
        });
        self.writer.event(EventStream::Lifecycle, event);
        self.writer.commit(CommitKind::Finish(Vec::new())).await?;
        audit::run_end(self.writer.run());
        Ok(TurnExit::Finished(status))
    }

    /// Shutdown: the run is paused, its lock released, and a later pickup resumes it.
    async fn hand_back(mut self) -> Result<TurnExit, StoreError> {
        self.writer.pause();
        self.writer.event(
            EventStream::Lifecycle,
            json!({ "phase": "paused", "reason": "handed back" }),
        );
        self.writer.commit(CommitKind::HandBack).await?;
        Ok(TurnExit::HandBack)
    }

    /// The payloads after the `message_sending` hooks (which may rewrite or cancel each).
    async fn shape_with_hooks(&self, payloads: Vec<Payload>) -> Vec<Payload> {
        let hooks = &self.runner.hooks;
        if !hooks.has(HookPoint::MessageSending) {
            return payloads;
        }
        let mut shaped = Vec::with_capacity(payloads.len());
        for mut payload in payloads {
            let event = MessageEvent {
                text: payload.text.clone(),
            };
            match hooks.message_sending(&self.hook_ctx, event).await {
                SendDecision::Cancel { .. } => continue,
                SendDecision::Send { content } => payload.text = content,
            }
            shaped.push(payload);
        }
        shaped
    }

    /// The observer hooks after the run ended: `message_sent` for each payload, `agent_end`.
    async fn after_reply(&self) {
        let hooks = &self.runner.hooks;
        if hooks.is_empty() {
            return;
        }
        let run = self.writer.run();
        for payload in &run.payloads {
            let event = MessageEvent {
                text: payload.text.clone(),
            };
            hooks.message_sent(&self.hook_ctx, event).await;
        }
        let now = self.writer.now();
        let event = AgentEndEvent {
            status: run.status,
            text: run.payloads.first().map(|p| p.text.clone()),
            error: run.error.clone(),
            usage: run.usage,
            duration_ms: run
                .ended_at
                .unwrap_or(now)
                .saturating_sub(run.started_at.unwrap_or(now)),
        };
        hooks.agent_end(&self.hook_ctx, event).await;
    }

    /// A `before_agent_reply` hook claimed the turn: record the prompt and the hook's reply (none
    /// = silent) and end the run ok, without any model call.
    pub(super) async fn claimed(mut self, claim: ReplyClaimed) -> Result<TurnExit, StoreError> {
        let now = self.writer.now();
        self.writer.begin_claimed(&claim.hook);
        let run = self.writer.run();
        let event = json!({
            "phase": "start",
            "startedAt": now,
            "model": run.model,
            "claimedBy": claim.hook,
        });
        let prompt = Message::user(run.request.message.clone());
        self.writer.event(EventStream::Lifecycle, event);
        self.writer
            .commit(CommitKind::Progress(vec![prompt]))
            .await?;
        let reply = claim.reply.unwrap_or_default();
        let pending = (!reply.is_empty()).then(|| Message::Assistant {
            content: reply.clone(),
            reasoning: None,
            tool_calls: Vec::new(),
            model: self.writer.run().model.clone(),
        });
        self.finish(LoopEnd::Final {
            text: reply,
            last_tool_error: None,
            pending,
        })
        .await
    }
}

/// An ending without payloads.
fn ending(status: RunStatus, liveness: LivenessState, error: Option<RunError>) -> Ending {
    Ending {
        status,
        liveness,
        error,
        payloads: Vec::new(),
    }
}

impl Ending {
    fn with_payloads(self, payloads: Vec<Payload>) -> Self {
        Self { payloads, ..self }
    }
}
