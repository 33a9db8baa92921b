//! Transcript entries: the ordered, append-only history of one session id.

use crate::ids::RunId;
use serde::{Deserialize, Serialize};

/// One tool call requested by the model. `arguments` is the raw JSON text the model produced
/// (it may be invalid JSON; the tool reports that as an error result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A message in a session's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum Message {
    /// What the user sent.
    User { content: String },
    /// What the model answered: visible text, optional reasoning, and tool calls to run.
    #[serde(rename_all = "camelCase")]
    Assistant {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
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
        summary: String,
        through_seq: u64,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// The result of one tool call, paired with the assistant message that asked for it.
    #[serde(rename_all = "camelCase")]
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

impl Message {
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
    pub seq: u64,
    /// The run that wrote it.
    pub run_id: RunId,
    /// Milliseconds since the epoch.
    pub ts: u64,
    pub message: Message,
}
