//! Transcript entries: the ordered, append-only history of one session id.

use crate::ids::RunId;
use serde::{Deserialize, Serialize};

/// One tool call requested by the model. `arguments` is the raw JSON text the model produced
/// (it may be invalid JSON; the tool reports that as an error result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ToolCall {
    /// The provider's id for the call; its `tool` result names it in `toolCallId`.
    pub id: String,
    /// The tool the model asked for.
    pub name: String,
    /// The arguments as raw JSON text, exactly as the model wrote them.
    pub arguments: String,
}

/// A message in a session's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum Message {
    /// What the user sent.
    User {
        /// The user's text, as sent.
        content: String,
    },
    /// What the model answered: visible text, optional reasoning, and tool calls to run.
    #[serde(rename_all = "camelCase")]
    Assistant {
        /// The visible text (may be empty when the model only called tools).
        content: String,
        /// The model's reasoning text, when the provider returned it; never shown as the reply.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// The tool calls the model asked for, in order; each is answered by a `tool` entry.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model that produced it (`provider/model`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// A summary of the history up to and including entry `throughSeq`, written by compaction.
    /// When a history is assembled, the latest compaction replaces every entry it covers.
    #[serde(rename_all = "camelCase")]
    Compaction {
        /// The model-written summary of the covered history.
        summary: String,
        /// The seq of the last entry the summary covers.
        through_seq: u64,
        /// The prompt's estimated tokens (system prompt and history) before compaction.
        tokens_before: u64,
        /// The prompt's estimated tokens after it (the summary replacing what it covers).
        tokens_after: u64,
    },
    /// The result of one tool call, paired with the assistant message that asked for it.
    #[serde(rename_all = "camelCase")]
    Tool {
        /// The id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// The tool's name, as the model called it.
        name: String,
        /// What the tool returned (or the error text), as the model sees it.
        content: String,
        /// The call failed (an error, a timeout, a block, an aborted call): the model is told so.
        is_error: bool,
    },
}

impl Message {
    /// A user message with `content`.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// How a compaction summary is shown to a model: as context in a user message.
    pub fn compaction_text(summary: &str) -> String {
        format!("[Summary of the earlier conversation, written when it was compacted]\n{summary}")
    }
}

/// One persisted message. `seq` is dense and strictly increasing within a session id; a store
/// refuses a second entry with the same `seq`, so a retried write can never duplicate an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TranscriptEntry {
    /// The entry's place in its session id's transcript (dense, strictly increasing).
    pub seq: u64,
    /// The run that wrote it.
    pub run_id: RunId,
    /// Milliseconds since the epoch.
    pub ts: u64,
    /// What was said (user, assistant, tool result or compaction summary).
    pub message: Message,
}
