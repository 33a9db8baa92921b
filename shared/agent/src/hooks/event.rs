//! What a hook is told: the run it belongs to ([`HookContext`]) and one typed payload per point
//! ([`HookEvent`]). Payloads carry only what the point needs: never credentials, provider
//! settings or whole transcripts.

use super::point::HookPoint;
use crate::retry::CompactionTrigger;
use agentlane_core::{
    Run, RunError, RunId, RunStatus, SessionId, SessionKey, TenantId, ToolCall, Usage,
};
use serde::Serialize;
use serde_json::Value;

/// Which run (or session) an event belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookContext {
    /// The tenant that owns the session.
    pub tenant: TenantId,
    /// The session's caller-chosen key (stable across resets).
    pub session_key: SessionKey,
    /// The session's current id (`ses_…`); changes on reset.
    pub session_id: SessionId,
    /// `None` for session events raised outside a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
}

impl HookContext {
    /// The context of `run`.
    pub fn for_run(run: &Run) -> Self {
        Self {
            tenant: run.tenant.clone(),
            session_key: run.session_key.clone(),
            session_id: run.session_id.clone(),
            run_id: Some(run.run_id.clone()),
        }
    }
}

/// One hook call's payload; the variant names the point.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum HookEvent {
    /// Raised at `before_model_resolve`.
    BeforeModelResolve(ModelResolveEvent),
    /// Raised at `before_prompt_build`.
    BeforePromptBuild(PromptBuildEvent),
    /// Raised at `before_agent_reply`.
    BeforeAgentReply(AgentReplyEvent),
    /// Raised at `before_agent_run`.
    BeforeAgentRun(AgentRunEvent),
    /// Raised at `before_agent_finalize`.
    BeforeAgentFinalize(FinalizeEvent),
    /// Raised at `agent_end`.
    AgentEnd(AgentEndEvent),
    /// Raised at `before_compaction`.
    BeforeCompaction(CompactionEvent),
    /// Raised at `after_compaction`.
    AfterCompaction(CompactionResultEvent),
    /// Raised at `before_tool_call`.
    BeforeToolCall(ToolCallEvent),
    /// Raised at `after_tool_call`.
    AfterToolCall(ToolResultEvent),
    /// Raised at `tool_result_persist`.
    ToolResultPersist(PersistEvent),
    /// Raised at `message_received`.
    MessageReceived(MessageEvent),
    /// Raised at `message_sending`.
    MessageSending(MessageEvent),
    /// Raised at `message_sent`.
    MessageSent(MessageEvent),
    /// Raised at `session_start`.
    SessionStart(SessionStartEvent),
    /// Raised at `session_end`.
    SessionEnd(SessionEndEvent),
}

impl HookEvent {
    /// The point this event is raised at.
    pub fn point(&self) -> HookPoint {
        match self {
            HookEvent::BeforeModelResolve(_) => HookPoint::BeforeModelResolve,
            HookEvent::BeforePromptBuild(_) => HookPoint::BeforePromptBuild,
            HookEvent::BeforeAgentReply(_) => HookPoint::BeforeAgentReply,
            HookEvent::BeforeAgentRun(_) => HookPoint::BeforeAgentRun,
            HookEvent::BeforeAgentFinalize(_) => HookPoint::BeforeAgentFinalize,
            HookEvent::AgentEnd(_) => HookPoint::AgentEnd,
            HookEvent::BeforeCompaction(_) => HookPoint::BeforeCompaction,
            HookEvent::AfterCompaction(_) => HookPoint::AfterCompaction,
            HookEvent::BeforeToolCall(_) => HookPoint::BeforeToolCall,
            HookEvent::AfterToolCall(_) => HookPoint::AfterToolCall,
            HookEvent::ToolResultPersist(_) => HookPoint::ToolResultPersist,
            HookEvent::MessageReceived(_) => HookPoint::MessageReceived,
            HookEvent::MessageSending(_) => HookPoint::MessageSending,
            HookEvent::MessageSent(_) => HookPoint::MessageSent,
            HookEvent::SessionStart(_) => HookPoint::SessionStart,
            HookEvent::SessionEnd(_) => HookPoint::SessionEnd,
        }
    }
}

/// `before_model_resolve`: the model is about to be chosen for the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelResolveEvent {
    /// The user's prompt for the run.
    pub prompt: String,
    /// The model the request named, if any.
    pub requested_model: Option<String>,
}

/// `before_prompt_build`: the system prompt and the user prompt are about to be assembled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptBuildEvent {
    /// The user's prompt for the run.
    pub prompt: String,
    /// The system prompt as configured, before hooks add context.
    pub system_prompt: String,
}

/// What started a turn (for `before_agent_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyTrigger {
    /// A user (API) request started the turn.
    User,
    /// A cron job started the turn.
    Cron,
    /// A heartbeat started the turn.
    Heartbeat,
}

/// `before_agent_reply`: a hook may answer the turn itself, without a model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentReplyEvent {
    /// What started the turn.
    pub trigger: ReplyTrigger,
    /// The prompt the turn answers.
    pub prompt: String,
}

/// `before_agent_run`: the run is about to start working on `prompt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRunEvent {
    /// The prompt the run works on.
    pub prompt: String,
    /// The resolved model (`provider/model`); `None` before one is resolved.
    pub model: Option<String>,
}

/// `before_agent_finalize`: the run has a final answer and is about to deliver it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizeEvent {
    /// The final answer text about to be delivered.
    pub text: String,
    /// Revisions already made in this run.
    pub revisions: u32,
}

/// `agent_end`: the run reached a terminal status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEndEvent {
    /// The terminal status the run reached.
    pub status: RunStatus,
    /// The final answer text; `None` when the run produced none.
    pub text: Option<String>,
    /// Why the run failed; `None` unless it failed.
    pub error: Option<RunError>,
    /// Tokens the run used, summed over all its model calls.
    pub usage: Usage,
    /// Wall-clock time from start to the terminal status, in milliseconds.
    pub duration_ms: u64,
}

/// `before_compaction`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEvent {
    /// What caused the compaction: a context overflow or a model timeout.
    pub trigger: CompactionTrigger,
    /// Messages in the history being compacted.
    pub messages: usize,
    /// Estimated tokens of the history before compaction.
    pub estimated_tokens: u64,
}

/// `after_compaction`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionResultEvent {
    /// What caused the compaction.
    pub trigger: CompactionTrigger,
    /// Whether the history was actually compacted.
    pub compacted: bool,
    /// Why it did not compact (no secrets, no raw provider bodies).
    pub error: Option<String>,
}

/// `before_tool_call`: the model asked for a tool call; it has not run yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    /// The tool's name as the model called it.
    pub tool_name: String,
    /// The model's id for this call; the result carries the same id.
    pub tool_call_id: String,
    /// The parsed arguments; a string holding the raw text when the model's JSON is invalid.
    pub arguments: Value,
}

impl ToolCallEvent {
    /// The event for `call`.
    pub fn from_call(call: &ToolCall) -> Self {
        Self {
            tool_name: call.name.clone(),
            tool_call_id: call.id.clone(),
            arguments: parse_arguments(&call.arguments),
        }
    }
}

/// A tool call's raw argument text as JSON (a JSON string when it does not parse).
pub fn parse_arguments(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// `after_tool_call`: a tool call finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultEvent {
    /// The tool's name as the model called it.
    pub tool_name: String,
    /// The model's id for this call.
    pub tool_call_id: String,
    /// The call's arguments, parsed as in [`ToolCallEvent::arguments`].
    pub arguments: Value,
    /// The result text the tool produced (an error message when `is_error`).
    pub result: String,
    /// Whether the tool failed; the model sees the result as an error.
    pub is_error: bool,
    /// How long the tool ran, in milliseconds.
    pub duration_ms: u64,
}

/// `tool_result_persist`: a tool result is about to be written to the transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistEvent {
    /// The tool's name as the model called it.
    pub tool_name: String,
    /// The model's id for this call.
    pub tool_call_id: String,
    /// The text to persist (already rewritten by higher-priority hooks).
    pub result: String,
    /// Whether the result is an error result.
    pub is_error: bool,
}

/// `message_received`, `message_sending` and `message_sent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageEvent {
    /// For `message_sending`: the text as rewritten by higher-priority hooks.
    pub text: String,
}

/// `session_start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStartEvent {
    /// The session id this one replaces (after a reset).
    pub resumed_from: Option<SessionId>,
}

/// Why a session ended (OpenClaw's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEndReason {
    /// A new session was started in place of this one.
    New,
    /// The session was reset by the user or the API.
    Reset,
    /// The session was idle longer than its idle timeout.
    Idle,
    /// The session hit its daily reset time.
    Daily,
    /// Compaction started a new session.
    Compaction,
    /// The session was deleted.
    Deleted,
    /// The process is shutting down.
    Shutdown,
    /// The process is restarting.
    Restart,
    /// Any other reason.
    Unknown,
}

/// `session_end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEndEvent {
    /// Why the session ended.
    pub reason: SessionEndReason,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_call_event_parses_arguments_and_keeps_invalid_text() {
        let call = ToolCall {
            id: "c1".into(),
            name: "shell".into(),
            arguments: r#"{"cmd":"ls"}"#.into(),
        };
        let ev = ToolCallEvent::from_call(&call);
        assert_eq!(ev.arguments, json!({"cmd": "ls"}));
        assert_eq!(parse_arguments("{not json"), json!("{not json"));
    }

    #[test]
    fn events_serialize_as_their_payload_in_camel_case() {
        let ev = HookEvent::BeforeToolCall(ToolCallEvent {
            tool_name: "shell".into(),
            tool_call_id: "c1".into(),
            arguments: json!({"cmd": "ls"}),
        });
        assert_eq!(ev.point(), HookPoint::BeforeToolCall);
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            json!({"toolName": "shell", "toolCallId": "c1", "arguments": {"cmd": "ls"}})
        );
        let end = HookEvent::SessionEnd(SessionEndEvent {
            reason: SessionEndReason::Idle,
        });
        assert_eq!(
            serde_json::to_value(&end).unwrap(),
            json!({"reason": "idle"})
        );
    }
}
