//! What a hook answers ([`HookOutcome`], one variant per answering point) and the merged,
//! typed results the registry hands the runner.

use super::point::HookPoint;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A hook's answer. [`HookOutcome::Continue`] ("no opinion") fits every point; any other
/// variant must match the point it answers, or it counts as an unreadable answer.
#[derive(Debug, Clone, PartialEq)]
pub enum HookOutcome {
    /// Nothing to change. The only answer observer points take (besides a model override).
    Continue,
    /// `before_model_resolve`.
    ModelOverride(ModelOverride),
    /// `before_prompt_build`.
    Prompt(PromptAdditions),
    /// `before_agent_reply`.
    Reply(ReplyClaim),
    /// `before_agent_run`.
    RunGate(RunGate),
    /// `before_agent_finalize`.
    Finalize(FinalizeAction),
    /// `before_tool_call`.
    ToolCall(ToolCallVerdict),
    /// `tool_result_persist`.
    Persist(PersistRewrite),
    /// `message_sending`.
    Sending(SendingVerdict),
}

impl HookOutcome {
    /// Whether this answer is one `point` understands.
    pub fn fits(&self, point: HookPoint) -> bool {
        match self {
            HookOutcome::Continue => true,
            HookOutcome::ModelOverride(_) => point == HookPoint::BeforeModelResolve,
            HookOutcome::Prompt(_) => point == HookPoint::BeforePromptBuild,
            HookOutcome::Reply(_) => point == HookPoint::BeforeAgentReply,
            HookOutcome::RunGate(_) => point == HookPoint::BeforeAgentRun,
            HookOutcome::Finalize(_) => point == HookPoint::BeforeAgentFinalize,
            HookOutcome::ToolCall(_) => point == HookPoint::BeforeToolCall,
            HookOutcome::Persist(_) => point == HookPoint::ToolResultPersist,
            HookOutcome::Sending(_) => point == HookPoint::MessageSending,
        }
    }

    /// The variant's name, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            HookOutcome::Continue => "continue",
            HookOutcome::ModelOverride(_) => "a model override",
            HookOutcome::Prompt(_) => "prompt additions",
            HookOutcome::Reply(_) => "a reply claim",
            HookOutcome::RunGate(_) => "a run gate",
            HookOutcome::Finalize(_) => "a finalize action",
            HookOutcome::ToolCall(_) => "a tool call verdict",
            HookOutcome::Persist(_) => "a persist rewrite",
            HookOutcome::Sending(_) => "a sending verdict",
        }
    }
}

/// `before_model_resolve`: `{"model": "provider/model"}`. The highest-priority override wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelOverride {
    /// The model to use (`provider/model`); `None` leaves the choice unchanged.
    #[serde(default)]
    pub model: Option<String>,
}

/// `before_prompt_build` additions; also the merged result. Wire:
/// `{"prependContext": [..], "systemPrompt": "..", "prependSystemContext": [..],
/// "appendSystemContext": [..]}` (each list also accepts a single string).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PromptAdditions {
    /// Text put before the user's prompt, in order.
    #[serde(deserialize_with = "one_or_many")]
    pub prepend_context: Vec<String>,
    /// Replaces the base system prompt (the last hook that sets it wins).
    pub system_prompt: Option<String>,
    /// Text put before the system prompt, in order.
    #[serde(deserialize_with = "one_or_many")]
    pub prepend_system_context: Vec<String>,
    /// Text put after the system prompt, in order.
    #[serde(deserialize_with = "one_or_many")]
    pub append_system_context: Vec<String>,
}

impl PromptAdditions {
    /// Adds a lower-priority hook's additions: lists append, a defined `system_prompt` replaces.
    pub fn merge(&mut self, later: PromptAdditions) {
        self.prepend_context.extend(later.prepend_context);
        self.prepend_system_context
            .extend(later.prepend_system_context);
        self.append_system_context
            .extend(later.append_system_context);
        if later.system_prompt.is_some() {
            self.system_prompt = later.system_prompt;
        }
    }

    /// Whether applying these additions changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &PromptAdditions::default()
    }

    /// The system prompt: prepended parts, the (replaced) base, appended parts, separated by
    /// blank lines; empty parts are dropped.
    pub fn system_prompt(&self, base: &str) -> String {
        let middle = self.system_prompt.as_deref().unwrap_or(base);
        join_parts(
            self.prepend_system_context
                .iter()
                .map(String::as_str)
                .chain([middle])
                .chain(self.append_system_context.iter().map(String::as_str)),
        )
    }

    /// The user prompt with the prepended context before it.
    pub fn prompt(&self, prompt: &str) -> String {
        join_parts(
            self.prepend_context
                .iter()
                .map(String::as_str)
                .chain([prompt]),
        )
    }
}

fn join_parts<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts
        .filter(|p| !p.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    })
}

/// `before_agent_reply`: `{"handled": true, "reply": "..."}`. `handled` without `reply` means
/// the turn ends silently.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplyClaim {
    /// `true` claims the turn: no model call is made.
    pub handled: bool,
    /// The reply to deliver; `None` with `handled` ends the turn silently.
    pub reply: Option<String>,
}

/// The merged `before_agent_reply` result: the first hook that claimed the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyClaimed {
    /// The name of the hook that claimed the turn.
    pub hook: String,
    /// The synthetic reply; `None` = no reply (silence).
    pub reply: Option<String>,
}

/// `before_agent_run`, an answer and the merged result. Wire: `{"outcome": "pass"}` or
/// `{"outcome": "block", "reason": "...", "message": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunGate {
    /// Let the run start.
    Pass,
    /// Terminal: the run is not started and its prompt is not retained.
    Block {
        /// Why (for logs and the run's error).
        reason: String,
        /// What the user is told, if the hook chose the words.
        message: Option<String>,
    },
}

/// Default reason of a block that gave none.
pub const DEFAULT_RUN_BLOCK_REASON: &str = "Run blocked by plugin hook";
/// Default reason of a tool call block that gave none.
pub const DEFAULT_TOOL_BLOCK_REASON: &str = "Tool call blocked by plugin hook";

/// `before_agent_finalize`, an answer and the merged result. Wire: `{"action": "finalize"}` or
/// `{"action": "revise", "instruction": "..."}` (`reason` or `retry.instruction` also accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizeAction {
    /// Deliver the answer as it is.
    Finalize,
    /// Suppress delivery and run again with this instruction (see [`MAX_FINALIZE_REVISIONS`]).
    Revise {
        /// What the model is asked to change in its answer.
        instruction: String,
    },
}

/// How many hook-requested revisions one run makes at most; then it finalizes.
pub const MAX_FINALIZE_REVISIONS: u32 = 3;

/// `before_tool_call`: `{"block": true, "blockReason": "...", "params": {...}}`, every field
/// optional. Unknown fields make the answer unreadable (so a typo cannot silently allow).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ToolCallVerdict {
    /// `Some(true)` blocks and stops lower-priority hooks; `Some(false)` is a no-op.
    pub block: Option<bool>,
    /// Why the call was blocked; [`DEFAULT_TOOL_BLOCK_REASON`] when absent.
    pub block_reason: Option<String>,
    /// Replacement arguments (the last hook that sets them wins).
    pub params: Option<Value>,
}

/// The merged `before_tool_call` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallDecision {
    /// Run the call, with `params` replacing its arguments when set.
    Allow {
        /// Replacement arguments; `None` keeps the model's.
        params: Option<Value>,
    },
    /// Do not run the call; its result is `reason` as an error result.
    Block {
        /// The error result the model sees in place of the tool's output.
        reason: String,
        /// The hook that blocked (or failed).
        hook: String,
    },
}

/// `tool_result_persist`: `{"content": "..."}` replaces the text to persist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PersistRewrite {
    /// Replacement text; `None` keeps the text as it is.
    pub content: Option<String>,
}

/// `message_sending`: `{"cancel": true}` or `{"content": "..."}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SendingVerdict {
    /// `true` cancels the message and stops lower-priority hooks; `false` is a no-op.
    pub cancel: bool,
    /// Replacement text, seen by lower-priority hooks.
    pub content: Option<String>,
}

/// The merged `message_sending` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendDecision {
    /// Deliver the message.
    Send {
        /// The text to deliver, as rewritten by the hooks.
        content: String,
    },
    /// Do not deliver the message.
    Cancel {
        /// The hook that cancelled it.
        hook: String,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn prompt_additions_merge_in_order_and_last_system_prompt_wins() {
        let mut acc = PromptAdditions {
            prepend_context: vec!["a".into()],
            system_prompt: Some("first".into()),
            prepend_system_context: vec!["p1".into()],
            append_system_context: vec!["x1".into()],
        };
        acc.merge(PromptAdditions {
            prepend_context: vec!["b".into()],
            system_prompt: None,
            prepend_system_context: vec![],
            append_system_context: vec!["x2".into()],
        });
        assert_eq!(acc.system_prompt.as_deref(), Some("first"));
        acc.merge(PromptAdditions {
            system_prompt: Some("second".into()),
            ..Default::default()
        });
        assert_eq!(acc.system_prompt("base"), "p1\n\nsecond\n\nx1\n\nx2");
        assert_eq!(acc.prompt("question"), "a\n\nb\n\nquestion");
        assert!(PromptAdditions::default().is_empty());
        assert_eq!(PromptAdditions::default().system_prompt("base"), "base");
    }

    #[test]
    fn prompt_additions_accept_a_single_string_per_list() {
        let a: PromptAdditions =
            serde_json::from_str(r#"{"prependContext": "ctx", "appendSystemContext": ["x"]}"#)
                .unwrap();
        assert_eq!(a.prepend_context, vec!["ctx".to_owned()]);
        assert_eq!(a.append_system_context, vec!["x".to_owned()]);
        assert_eq!(a.system_prompt, None);
    }

    #[test]
    fn tool_call_verdict_rejects_unknown_fields() {
        let ok: ToolCallVerdict =
            serde_json::from_str(r#"{"block": true, "blockReason": "no"}"#).unwrap();
        assert_eq!(ok.block, Some(true));
        assert_eq!(ok.block_reason.as_deref(), Some("no"));
        assert!(serde_json::from_str::<ToolCallVerdict>(r#"{"blocked": true}"#).is_err());
    }

    #[test]
    fn outcomes_fit_only_their_point() {
        let verdict = HookOutcome::ToolCall(ToolCallVerdict::default());
        assert!(verdict.fits(HookPoint::BeforeToolCall));
        assert!(!verdict.fits(HookPoint::BeforeAgentRun));
        for p in HookPoint::ALL {
            assert!(HookOutcome::Continue.fits(p));
        }
    }
}
