//! An attempt that answered: the answer normalised (tool calls sanitized, promoted from text,
//! names resolved), held-back text shown or dropped, the attempt recorded; then, for an answer
//! without tool calls, the retry state decides between accepting it and a directed retry, and a
//! `before_agent_finalize` hook may ask for a revision.

use super::turn_loop::{LoopEnd, Selected, Step, Turn};
use crate::answer::normalize::{Change, normalize};
use crate::answer::reply::is_silent;
use crate::hooks::{FinalizeAction, FinalizeEvent, HookPoint};
use crate::retry::{Answered, AttemptOutcome, Completion, Continuation};
use crate::writer::CommitKind;
use agentlane_core::{AttemptRecord, Message, StoreError};
use agentlane_providers::AssistantTurn;
use agentlane_providers::SharedMessage;
use std::collections::BTreeMap;
use std::time::Duration;

impl Turn<'_> {
    /// What follows an attempt that answered.
    pub(super) async fn after_answer(
        &mut self,
        selected: &Selected,
        turn: AssistantTurn,
        mut record: AttemptRecord,
    ) -> Result<Step, StoreError> {
        self.runner
            .models
            .mark_good(&selected.model.provider_name, &selected.profile.name);
        let (turn, invalid) = self.normalize(turn);
        let answered = Answered::of(&turn);
        let outcome = if !turn.tool_calls.is_empty() {
            AttemptOutcome::ToolCalls
        } else if answered == Answered::Missing {
            AttemptOutcome::MissingAssistant
        } else {
            AttemptOutcome::Answer
        };
        record.outcome = outcome.as_str().into();
        record.usage = turn.usage;
        self.charge(&mut record);
        self.writer.record_attempt(record);
        let visible = answered == Answered::Visible;
        let reasoning = !turn.reasoning.trim().is_empty();
        if turn.tool_calls.is_empty() {
            match self.retry.on_completion(answered) {
                Completion::Accept => {}
                Completion::Retry(continuation) => {
                    return self.directed_retry(selected, &turn, continuation).await;
                }
                Completion::Resend => {
                    self.note_retry("retry", "missing_assistant", Duration::ZERO);
                    self.writer.checkpoint(&self.retry);
                    self.writer.commit(CommitKind::Progress(Vec::new())).await?;
                    return Ok(Step::Continue);
                }
                // A failed tool and nothing to say: the tool-error reply (SPEC §3).
                Completion::GiveUp if self.last_tool_error.is_some() => {
                    self.writer.checkpoint(&self.retry);
                    return Ok(Step::End(LoopEnd::Final {
                        text: String::new(),
                        last_tool_error: self.last_tool_error.take(),
                        pending: None,
                    }));
                }
                Completion::GiveUp => return Ok(Step::End(LoopEnd::Incomplete)),
            }
        } else {
            let rounds = self.writer.tool_rounds();
            let max = self.runner.config.max_tool_rounds;
            if let Err(error) = self.retry.on_tool_round(rounds, max) {
                return Ok(Step::End(LoopEnd::Failed(error)));
            }
        }
        let assistant = Message::Assistant {
            content: turn.text.clone(),
            reasoning: reasoning.then(|| turn.reasoning.clone()),
            tool_calls: turn.tool_calls.clone(),
            model: Some(selected.model.full_name.clone()),
        };
        self.history.push(assistant.clone().into());
        if !turn.tool_calls.is_empty() {
            return self.tool_round(selected, assistant, &turn, &invalid).await;
        }
        if visible && self.revision_requested(&turn.text).await {
            self.note_retry("finalize_revision", "before_agent_finalize", Duration::ZERO);
            self.writer.checkpoint(&self.retry);
            self.writer
                .commit(CommitKind::Progress(vec![assistant]))
                .await?;
            return Ok(Step::Continue);
        }
        self.writer.checkpoint(&self.retry);
        Ok(Step::End(LoopEnd::Final {
            text: turn.text,
            last_tool_error: self.last_tool_error.take(),
            pending: Some(assistant),
        }))
    }

    /// Stream normalisation: sanitize malformed calls, promote text tool calls, trim names.
    /// Held-back text that was a tool call or the silent token is never shown. Returns the turn
    /// and the calls that must not run (by id, with the error to answer them with).
    fn normalize(&mut self, turn: AssistantTurn) -> (AssistantTurn, BTreeMap<String, String>) {
        let normalized = normalize(turn, &super::Runner::offered_tools(&self.agent));
        for change in &normalized.changes {
            tracing::info!(run = %self.writer.run().run_id, %change, "normalized the model's tool calls");
        }
        let promoted = normalized
            .changes
            .iter()
            .any(|c| matches!(c, Change::PromotedTextCall { .. }));
        if promoted || is_silent(&normalized.turn.text) {
            self.writer.discard_held();
        } else {
            self.writer.release_held();
        }
        (normalized.turn, normalized.invalid)
    }

    /// An answer that shows nothing gets another attempt with an instruction. Reasoning is kept
    /// so the instruction makes sense; an empty turn is not.
    async fn directed_retry(
        &mut self,
        selected: &Selected,
        turn: &AssistantTurn,
        continuation: Continuation,
    ) -> Result<Step, StoreError> {
        let keep: Vec<Message> = (!turn.reasoning.trim().is_empty())
            .then(|| Message::Assistant {
                content: String::new(),
                reasoning: Some(turn.reasoning.clone()),
                tool_calls: Vec::new(),
                model: Some(selected.model.full_name.clone()),
            })
            .into_iter()
            .collect();
        self.history
            .extend(keep.iter().cloned().map(SharedMessage::from));
        self.retry.continue_with(Some(continuation));
        self.note_retry("directed_retry", continuation.as_str(), Duration::ZERO);
        self.writer.checkpoint(&self.retry);
        self.writer.commit(CommitKind::Progress(keep)).await?;
        Ok(Step::Continue)
    }

    /// Whether a `before_agent_finalize` hook asks for a revision of the final answer `text`
    /// (recorded in the retry state, within its budget).
    async fn revision_requested(&mut self, text: &str) -> bool {
        if !self.runner.hooks.has(HookPoint::BeforeAgentFinalize) || !self.retry.may_revise() {
            return false;
        }
        let event = FinalizeEvent {
            text: text.to_owned(),
            revisions: self.retry.finalize_revisions(),
        };
        match self
            .runner
            .hooks
            .before_agent_finalize(&self.hook_ctx, event)
            .await
        {
            FinalizeAction::Revise { instruction } => {
                self.retry.on_revision(instruction);
                true
            }
            FinalizeAction::Finalize => false,
        }
    }
}
