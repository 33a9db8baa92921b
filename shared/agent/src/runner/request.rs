//! The model request of one attempt: the system prompt (with the hooks' additions), the history
//! as the model may see it (last-N-turns limit, pairing repaired), and the instruction of a
//! directed retry or a finalize revision.

use super::REVISION_PREFIX;
use super::turn_loop::Turn;
use crate::context::history::limit_turns;
use crate::context::repair::repair_pairing;
use crate::models::ResolvedModel;
use agentlane_core::{Message, ThinkingLevel, ThinkingSupport, thinking_support};
use agentlane_providers::ModelRequest;

impl Turn<'_> {
    /// The request of the next attempt on `model`. Takes the pending continuation and revision
    /// instructions from the retry state: each is sent once.
    pub(super) fn build_request(&mut self, model: &ResolvedModel) -> ModelRequest {
        let run = self.writer.run();
        let limit = self
            .agent
            .history_max_turns
            .or(self.runner.config.history_max_turns);
        // One copy of the history: the repaired one, from a borrowed view of the kept turns.
        let mut messages = repair_pairing(limit_turns(&self.history, limit));
        if !self.additions.prepend_context.is_empty() {
            // The run's own prompt gets the hooks' context; the transcript keeps the original.
            // (The repair leaves user messages as they are, so it is found after it too.)
            let run_prompt = messages.iter_mut().rev().find(
                |m| matches!(&***m, Message::User { content } if *content == run.request.message),
            );
            if let Some(m) = run_prompt {
                *m = Message::user(self.additions.prompt(&run.request.message)).into();
            }
        }
        if let Some(c) = self.retry.take_continuation() {
            messages.push(Message::user(c.instruction()).into());
        }
        if let Some(instruction) = self.retry.take_revision() {
            messages.push(Message::user(format!("{REVISION_PREFIX}\n\n{instruction}")).into());
        }
        ModelRequest {
            model: model.model.clone(),
            system: self
                .additions
                .system_prompt(&self.runner.system_prompt(run, &self.agent)),
            messages,
            tools: self.agent.tools.specs(),
            // Always sent: the cap is what the call's budget reservation holds.
            max_output_tokens: Some(output_cap(
                &run.request,
                self.agent.max_output_tokens,
                &model.full_name,
            )),
            thinking: thinking_for(
                run.request
                    .thinking
                    .as_deref()
                    .or(self.agent.thinking.as_deref()),
                &model.full_name,
            ),
        }
    }
}

/// The most one call of `request` on `model` (`provider/model`) may write: the turn's cap,
/// else the agent's (`agent`), else the model's usual answer size; never above the caller's
/// ceiling (an OpenAI-compatible request's `max_tokens`).
fn output_cap(request: &agentlane_core::TurnRequest, agent: Option<u32>, model: &str) -> u32 {
    let own = request
        .max_output_tokens
        .or(agent)
        .unwrap_or_else(|| agentlane_core::spend::default_output_tokens(model));
    request
        .output_tokens_ceiling
        .map_or(own, |ceiling| own.min(ceiling))
}

/// The run's thinking level for an attempt on `model` (`provider/model`). The API refused a
/// level the run's own model cannot take; a fallback model known to have no reasoning mode
/// gets none (rather than an error the fallback cannot recover from).
fn thinking_for(level: Option<&str>, model: &str) -> Option<ThinkingLevel> {
    let level = ThinkingLevel::parse(level?)?;
    match thinking_support(model) {
        ThinkingSupport::Unsupported => None,
        ThinkingSupport::Supported | ThinkingSupport::Unknown => Some(level),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fallback_without_reasoning_runs_without_the_level() {
        assert_eq!(
            thinking_for(Some("high"), "openai/o3-mini"),
            Some(ThinkingLevel::High)
        );
        assert_eq!(
            thinking_for(Some("low"), "local/llama3.2"),
            Some(ThinkingLevel::Low)
        );
        assert_eq!(thinking_for(Some("high"), "openai/gpt-4o-mini"), None);
        assert_eq!(thinking_for(Some("high"), "demo/agentlane-demo"), None);
        assert_eq!(thinking_for(None, "openai/o3-mini"), None);
    }

    #[test]
    fn a_callers_ceiling_lowers_the_cap_and_never_raises_it() {
        let turn = |own: Option<u32>, ceiling: Option<u32>| agentlane_core::TurnRequest {
            max_output_tokens: own,
            output_tokens_ceiling: ceiling,
            ..Default::default()
        };
        // (turn's cap, agent's cap, caller's ceiling, model) → the cap sent
        let table = [
            (None, None, None, "openai/gpt-4o-mini", 2_048),
            (None, None, Some(100), "openai/gpt-4o-mini", 100),
            (None, None, Some(16_000), "openai/gpt-4o-mini", 2_048),
            (None, Some(4_096), Some(16_000), "openai/gpt-4o-mini", 4_096),
            (None, Some(4_096), Some(1_000), "openai/gpt-4o-mini", 1_000),
            (
                Some(8_000),
                Some(4_096),
                Some(6_000),
                "openai/gpt-4o-mini",
                6_000,
            ),
            (Some(8_000), None, None, "demo/agentlane-demo", 8_000),
            (None, None, Some(10_000), "openai/o3", 8_192),
        ];
        for (own, agent, ceiling, model, cap) in table {
            assert_eq!(
                output_cap(&turn(own, ceiling), agent, model),
                cap,
                "{own:?} {agent:?} {ceiling:?} {model}"
            );
        }
    }
}
