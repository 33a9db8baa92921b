//! The JSON the API answers with, typed as far as the contract fixes it. Unknown fields are
//! ignored; a missing documented field fails decoding, which fails the test.

use agentlane_core::{
    Event, EventStream, LivenessState, Message, Payload, RunError, RunStatus, TranscriptEntry,
    Usage,
};
use serde::Deserialize;

/// `202` answer of `POST /v1/agent`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The new (or, for a repeated idempotency key, the existing) run.
    pub run_id: String,
    /// The transcript identity behind the session key.
    pub session_id: String,
    /// The session key, echoed.
    pub session_key: String,
    /// Milliseconds since the epoch.
    pub accepted_at: u64,
}

/// `status` of `agent.wait`: whether the *wait* saw the run end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitStatus {
    /// The run ended `ok`.
    Ok,
    /// The run ended otherwise.
    Error,
    /// Only the wait ended while the run was running (or the run itself timed out).
    Timeout,
    /// Only the wait ended, and the run is still queued (`timeoutPhase: "queue"`).
    Pending,
    /// The run is paused for its tool calls' answers (`requiredAction`).
    RequiresAction,
}

/// Answer of `POST /v1/agent.wait`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitReply {
    /// The run waited for.
    pub run_id: String,
    /// Whether the wait saw the run end.
    pub status: WaitStatus,
    /// The run's real status.
    pub run_status: RunStatus,
    /// When the run started, if it did.
    #[serde(default)]
    pub started_at: Option<u64>,
    /// When the run ended, if it did.
    #[serde(default)]
    pub ended_at: Option<u64>,
    /// Why it did not end ok.
    #[serde(default)]
    pub error: Option<RunError>,
    /// The replies shown to the user, once the run ended.
    #[serde(default)]
    pub payloads: Option<Vec<Payload>>,
    /// Tokens used, once the run ended.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The model that answered, once the run ended.
    #[serde(default)]
    pub model: Option<String>,
    /// Where the run still was when only the wait ended (`queue` or `run`).
    #[serde(default)]
    pub timeout_phase: Option<String>,
}

/// One entry of a run's attempt ledger.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// Position in the ledger.
    pub index: u32,
    /// `provider/model`.
    pub model: String,
    /// `ok`, `tool_calls`, or a failure class.
    pub outcome: String,
    /// The auth profile used (`openai#1`, ...), when the runner records one.
    #[serde(default)]
    pub profile: Option<String>,
    /// What went wrong, for a failed attempt.
    #[serde(default)]
    pub error: Option<String>,
    /// When the attempt started (milliseconds since the epoch).
    #[serde(default)]
    pub started_at: u64,
}

/// `GET /v1/runs/{id}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// `queued|running|ok|error|aborted|timeout`.
    pub status: RunStatus,
    /// Whether it can still make progress.
    pub liveness_state: LivenessState,
    /// The model that answered, once known.
    #[serde(default)]
    pub model: Option<String>,
    /// Every model call made, in order.
    #[serde(default)]
    pub attempts: Vec<AttemptView>,
    /// What the user is shown.
    #[serde(default)]
    pub payloads: Vec<Payload>,
    /// Why it did not end ok.
    #[serde(default)]
    pub error: Option<RunError>,
    /// How many times a runner picked it up.
    #[serde(default)]
    pub pickups: u32,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub started_at: Option<u64>,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub ended_at: Option<u64>,
    /// The runner's resumable state (e.g. `{"retry": {...}}`), as stored with the run.
    #[serde(default)]
    pub checkpoint: Option<serde_json::Value>,
    /// What became of the message: `ran`, `steered`, `collected` or `interrupted`.
    #[serde(default)]
    pub queue_outcome: Option<String>,
    /// The run that carried it (steered, collected).
    #[serde(default)]
    pub into_run_id: Option<String>,
}

impl RunView {
    /// The texts of the non-error payloads, joined by newlines.
    pub fn reply_text(&self) -> String {
        self.payloads
            .iter()
            .filter(|p| !p.is_error)
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `[startedAt, endedAt]`, when both are set.
    pub fn interval(&self) -> Option<(u64, u64)> {
        Some((self.started_at?, self.ended_at?))
    }
}

/// `GET /v1/runs/{id}/events` page.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EventsPage {
    /// Events in seq order.
    pub events: Vec<Event>,
    /// The `after` cursor for the next page.
    #[serde(default)]
    pub next: Option<u64>,
}

/// `GET /v1/sessions/{key}/transcript`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptView {
    /// The session key.
    pub session_key: String,
    /// The session id the entries belong to.
    pub session_id: String,
    /// Ordered entries.
    pub entries: Vec<TranscriptEntry>,
    /// The `after` cursor of the next page.
    #[serde(default)]
    pub next: Option<u64>,
}

impl TranscriptView {
    /// The entries a run wrote.
    pub fn entries_of(&self, run_id: &str) -> Vec<&TranscriptEntry> {
        self.entries
            .iter()
            .filter(|e| e.run_id.as_str() == run_id)
            .collect()
    }

    /// `role` of every entry, in order.
    pub fn roles(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| role(&e.message)).collect()
    }

    /// The user messages, in order.
    pub fn user_texts(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter_map(|e| match &e.message {
                Message::User { content } => Some(content.as_str()),
                Message::Assistant { .. } | Message::Tool { .. } | Message::Compaction { .. } => {
                    None
                }
            })
            .collect()
    }

    /// The seqs, in order.
    pub fn seqs(&self) -> Vec<u64> {
        self.entries.iter().map(|e| e.seq).collect()
    }
}

/// `user`, `assistant`, `tool` or `compaction`.
pub fn role(message: &Message) -> &'static str {
    match message {
        Message::User { .. } => "user",
        Message::Assistant { .. } => "assistant",
        Message::Tool { .. } => "tool",
        Message::Compaction { .. } => "compaction",
    }
}

/// The visible text of an assistant message (`None` for other roles).
pub fn assistant_text(message: &Message) -> Option<&str> {
    match message {
        Message::Assistant { content, .. } => Some(content.as_str()),
        Message::User { .. } | Message::Tool { .. } | Message::Compaction { .. } => None,
    }
}

/// The `phase` of a lifecycle or tool event.
pub fn phase(event: &Event) -> Option<&str> {
    event.data.get("phase").and_then(serde_json::Value::as_str)
}

/// Whether `event` is on `stream` with `phase`.
pub fn is(event: &Event, stream: EventStream, wanted_phase: &str) -> bool {
    event.stream == stream && phase(event) == Some(wanted_phase)
}

/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorDetail {
    /// Machine-readable code (`invalid_request`, `unauthorized`, ...).
    pub code: String,
    /// Human-readable message.
    pub message: String,
}
