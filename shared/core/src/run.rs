//! Runs (one accepted turn each) and their events.

use crate::ids::{RunId, SessionId, SessionKey, TenantId};
use serde::{Deserialize, Serialize};

/// `queued → running → ok | error | aborted | timeout`; a running run may pause
/// (`requires_action`) and run again once answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum RunStatus {
    /// Accepted and waiting in its lane for a runner to pick it up.
    Queued,
    /// A runner holds it and is calling the model or its tools.
    Running,
    /// Paused until its pending tool calls are answered (`POST /v1/runs/{id}/actions`).
    RequiresAction,
    /// Ended with a reply (`payloads`).
    Ok,
    /// Ended with an error (`error` says why), e.g. every model and fallback failed.
    Error,
    /// Ended by an abort request, the supervisor or an `interrupt` message (`error.code` says which).
    Aborted,
    /// Ended at its deadline (`timeoutSeconds`, a cron job's timeout) before it finished.
    Timeout,
}

impl RunStatus {
    /// Whether the run has ended (`ok`, `error`, `aborted`, `timeout`) and will never change status again.
    pub fn is_terminal(self) -> bool {
        match self {
            RunStatus::Queued | RunStatus::Running | RunStatus::RequiresAction => false,
            RunStatus::Ok | RunStatus::Error | RunStatus::Aborted | RunStatus::Timeout => true,
        }
    }

    /// The wire name (`queued`, `running`, `requires_action`, `ok`, …), as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::RequiresAction => "requires_action",
            RunStatus::Ok => "ok",
            RunStatus::Error => "error",
            RunStatus::Aborted => "aborted",
            RunStatus::Timeout => "timeout",
        }
    }

    /// A status by its wire name; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "requires_action" => RunStatus::RequiresAction,
            "ok" => RunStatus::Ok,
            "error" => RunStatus::Error,
            "aborted" => RunStatus::Aborted,
            "timeout" => RunStatus::Timeout,
            _ => return None,
        })
    }
}

/// Whether a run can still make progress (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum LivenessState {
    /// Making progress (the default), and every run that ended normally.
    #[default]
    Working,
    /// Handed back unfinished (a checkpoint, a lease running out) or waiting on `requires_action`.
    Paused,
    /// Every retry and fallback is exhausted; the run ended with a clear error.
    Blocked,
    /// Given up: aborted, stuck, or ended without a complete turn.
    Abandoned,
}

/// What happens to a message that arrives while its session is busy (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum QueueMode {
    /// Runs after the current turn, as its own turn (the default).
    #[default]
    Followup,
    /// Folded with the other messages that arrive while busy into one follow-up turn (~500 ms
    /// debounce, cap 20).
    Collect,
    /// Injected into the running turn at its next model boundary; a followup when nothing runs.
    Steer,
    /// Aborts the running turn (it ends `aborted`, `interrupted`), then runs.
    Interrupt,
}

impl QueueMode {
    /// The canonical name (`followup`, `collect`, `steer`, `interrupt`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::Followup => "followup",
            QueueMode::Collect => "collect",
            QueueMode::Steer => "steer",
            QueueMode::Interrupt => "interrupt",
        }
    }

    /// A mode by its name or one of OpenClaw's aliases (case-insensitive, surrounding blanks
    /// ignored): `followup|follow-up|follow-ups|followups|steer+backlog`,
    /// `collect|coalesce`, `steer|steering|queue|queued`, `interrupt|interrupts|abort`.
    /// `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "followup" | "follow-up" | "follow-ups" | "followups" | "steer+backlog" => {
                QueueMode::Followup
            }
            "collect" | "coalesce" => QueueMode::Collect,
            "steer" | "steering" | "queue" | "queued" => QueueMode::Steer,
            "interrupt" | "interrupts" | "abort" => QueueMode::Interrupt,
            _ => return None,
        })
    }
}

/// What became of an accepted message (SPEC §4): it ran as its own turn, was steered into or
/// collected into another run (`Run::into_run_id`), or was the running turn an `interrupt`
/// message aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum QueueOutcome {
    /// Ran as its own turn (the default).
    #[default]
    Ran,
    /// Injected into the session's running turn (`intoRunId`): it has no reply of its own.
    Steered,
    /// Folded into a `collect` follow-up turn (`intoRunId`) with other messages.
    Collected,
    /// Was running when an `interrupt` message arrived: it ended `aborted` (`intoRunId` is the
    /// interrupting run).
    Interrupted,
}

/// What the client asked for in `POST /v1/agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TurnRequest {
    /// The user's message: 1 byte to 256 KiB (configurable).
    pub message: String,
    /// The mode the client asked for; `None`: the session's default mode (else `followup`).
    /// A run's stored request names the mode it was accepted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
    /// The model to use (`provider/model`); `None`: the agent's, else the deployment default
    /// (`AGENTLANE_MODEL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The reasoning effort asked for (`off`, `minimal`, `low`, `medium`, `high`); `None`: the
    /// agent's, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// 0 = unlimited; `None` = the deployment default (48 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Text appended to the system prompt for this turn only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_system_prompt: Option<String>,
    /// The conversation before `message`, written ahead of it in the transcript when the
    /// session has none yet: a stateless client's earlier turns (the OpenAI-compatible
    /// endpoint seeds a fresh session with them). User and assistant text; ignored on a
    /// session that already has a transcript, whose history is the context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::transcript::Message>,
    /// An absolute deadline (ms since epoch) set by whoever fired the run (cron: fire time +
    /// the job's timeout). The run ends `timeout` then, even if it started later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<u64>,
    /// A cap on the cloud model idle timeout for this run (cron jobs with an explicit timeout:
    /// 60 s, so fallbacks still run before the deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_idle_timeout_ms: Option<u64>,
    /// The agent the turn runs (`None`: `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The agent's version at accept, set by the store (0: the deployment's own `main`); the
    /// run runs with it even if the agent changes before pickup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<u64>,
    /// Client tools for this turn only (they join the agent's); a call of one pauses the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<crate::action::ClientTool>,
    /// The turn's spend limits (over all its model calls); the agent's fill what is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::spend::RunBudget>,
    /// The most one model call of the turn may write (sent to the provider, and reserved
    /// against budgets); `None`: the agent's, else the model's usual answer size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The most the caller lets one model call write, whatever the turn's, the agent's or the
    /// model's own cap (an OpenAI-compatible request's `max_tokens`): the smaller is sent and
    /// reserved. `None`: no ceiling of the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 128000))]
    pub output_tokens_ceiling: Option<u32>,
}

impl TurnRequest {
    /// The agent the turn runs: the one named, else `main`.
    pub fn agent(&self) -> &str {
        self.agent_id.as_deref().unwrap_or(crate::agent::MAIN_AGENT)
    }

    /// The queue mode: the one asked for, else `followup`.
    pub fn mode(&self) -> QueueMode {
        self.queue_mode.unwrap_or_default()
    }

    /// A digest of the session key and everything the client asked for (SHA-256, hex): two
    /// accepts with the same idempotency key must agree on it.
    pub fn fingerprint(&self, key: &SessionKey) -> String {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(key.as_str().as_bytes());
        hash.update([0u8]);
        // An unset mode hashes as `followup`, as it did before a session could have a default.
        // The agent's version is the store's, not the client's; `main` hashes as no agent.
        let request = TurnRequest {
            queue_mode: Some(self.mode()),
            agent_id: Some(self.agent())
                .filter(|a| *a != crate::agent::MAIN_AGENT)
                .map(str::to_owned),
            agent_version: None,
            ..self.clone()
        };
        // Serializing a plain struct of strings and numbers cannot fail.
        hash.update(serde_json::to_vec(&request).unwrap_or_default());
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Token counts reported by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Every prompt token, cached ones included.
    pub input_tokens: u64,
    /// Tokens the model generated, reasoning included.
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds `other`'s counts to these (a run's usage is the sum of its attempts').
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// One model call made for a run, in order (the attempt ledger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AttemptRecord {
    /// The attempt's place in the run's ledger, from 0.
    pub index: u32,
    /// `provider/model`.
    pub model: String,
    /// The auth profile (API key name) the call used; `None` when no call was made (a poisoned
    /// run's record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// `ok`, `tool_calls`, `missing_assistant` (the response had no assistant message), or a
    /// failure class such as `rate_limit`, `timeout`, `aborted`.
    pub outcome: String,
    /// Tokens this call reported.
    pub usage: Usage,
    /// What the call cost (USD), from the deployment's price of its model; `None` when the
    /// model has no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// When the call started (ms since the epoch).
    pub started_at: u64,
    /// How long the call took (ms).
    pub duration_ms: u64,
    /// The failure's message (never a secret or raw provider body); `None` when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A reply shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Payload {
    /// The reply text, the silent token `NO_REPLY` removed.
    pub text: String,
    /// A fallback reply standing in for a failure (a failed tool, an incomplete turn), not the
    /// model's answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// Why a run did not end `ok`. Messages never carry secrets or raw provider bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RunError {
    /// A stable machine-readable code (`aborted`, `stuck`, `interrupted`, `session_reset`,
    /// `poisoned`, `run_timeout`, a failover class such as `rate_limit`, …).
    pub code: String,
    /// A human-readable explanation.
    pub message: String,
}

impl RunError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// Why a run was asked to abort, which decides the error code it ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum AbortReason {
    /// `POST /runs/{id}/abort`, the scheduler's timeout: the run ends `aborted` (`aborted`).
    Requested,
    /// The supervisor saw the run stalled past the abort threshold: it ends `aborted`
    /// (`stuck`, livenessState `abandoned`).
    Stuck,
    /// A message accepted with `queueMode: interrupt` on its session: the run ends `aborted`
    /// (`interrupted`) and the interrupting message runs next.
    Interrupted,
}

impl AbortReason {
    /// The error code a run aborted for this reason ends with.
    pub fn code(self) -> &'static str {
        match self {
            Self::Requested => "aborted",
            Self::Stuck => "stuck",
            Self::Interrupted => "interrupted",
        }
    }
}

/// One accepted turn and everything the runner learned while running it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Run {
    /// The run's id (`run_…`), unique across tenants.
    pub run_id: RunId,
    /// Never shown by the API (`GET /v1/runs/{id}` drops it).
    #[cfg_attr(feature = "utoipa", schema(ignore))]
    pub tenant: TenantId,
    /// The session key the message was sent to.
    pub session_key: SessionKey,
    /// The session the run belongs to: the key's current session id at accept.
    pub session_id: SessionId,
    /// Where the run is in its lifecycle (SPEC §3).
    pub status: RunStatus,
    /// Whether the run can still make progress (SPEC §5).
    pub liveness_state: LivenessState,
    /// What the client (or the cron job that fired it) asked for.
    pub request: TurnRequest,
    /// The client's idempotency key: the same key within 24 h answers with this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// When the run was accepted (ms since the epoch).
    pub accepted_at: u64,
    /// When a runner first picked it up (ms since the epoch); `None` while queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// When it ended (ms since the epoch); `None` until terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// The model that answered (`provider/model`); `demo/...` for the offline demo model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Every model call made for the run, in order.
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
    /// Tokens over all the run's attempts.
    #[serde(default)]
    pub usage: Usage,
    /// What the run's model calls cost (USD, the sum of its attempts' `costUsd`); `None` while
    /// none was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The replies shown to the user; empty until the run ends.
    #[serde(default)]
    pub payloads: Vec<Payload>,
    /// Why the run did not end `ok`; `None` while it runs and when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// Set by `POST /runs/{id}/abort`; the runner stops at its next check. Runner writes never
    /// clear it.
    #[serde(default)]
    pub abort_requested: bool,
    /// Why the abort was requested when it was not a plain request (`None`: a client, the
    /// scheduler). Set together with `abort_requested`, which owns it: runner writes never
    /// change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_reason: Option<AbortReason>,
    /// How many times a runner picked this run up (redeliveries and hand-backs included).
    #[serde(default)]
    pub pickups: u32,
    /// How many of those pickups ended by handing the run back cleanly (shutdown, lease time
    /// running out). `pickups - hand_backs` of a non-terminal run are failed deliveries.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hand_backs: u32,
    /// Opaque loop state the runner resumes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub checkpoint: Option<serde_json::Value>,
    /// The run's place in its session key's order, from 0 (all session ids of the key count):
    /// the session's `runs_accepted` before this run was accepted. A runner starts the run only
    /// once every earlier run is terminal (`Session::runs_finished` has reached this number).
    #[serde(default)]
    pub session_seq: u64,
    /// What the client sent, as [`TurnRequest::fingerprint`] of the accepted request: a retry
    /// with the same idempotency key must match it. `None` on runs accepted before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_fingerprint: Option<String>,
    /// What became of the message (SPEC §4); `ran` unless another run carried it.
    #[serde(default)]
    pub queue_outcome: QueueOutcome,
    /// The run that carried this one (`steered`, `collected`), or the run that interrupted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub into_run_id: Option<RunId>,
    /// Ended ahead of earlier runs of its session (an `interrupt` message that ran next): not
    /// yet counted in `Session::runs_finished`. When its own message comes in its turn, the
    /// runner counts it then (and runs nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_turn: bool,
    /// What the run went on without (an agent's MCP server unreachable at its start, a secret
    /// reference that could not be resolved); never a secret's value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The pause the run waits on (status `requires_action`), or its last one once resumed
    /// (then [`RequiredAction::resumed`](crate::action::RequiredAction::resumed)). Written by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_action: Option<crate::action::RequiredAction>,
    /// How long the run waited paused, over all its pauses (ms): its own timeout counts the
    /// time it ran, not the time it waited for an answer. Written by the runner at resume.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub paused_ms: u64,
    /// The answer to the run's latest pause. Only the API and the supervisor write it, beside
    /// the run record (like `abort_requested`): a runner commit never changes it. Not part of
    /// the run's JSON: each store keeps it in its own attribute.
    #[serde(skip)]
    #[cfg_attr(feature = "utoipa", schema(ignore))]
    pub action_answer: Option<crate::action::RecordedAnswer>,
}

impl Run {
    /// Whether `key` and `request` are what this run was accepted with (an idempotent retry),
    /// as opposed to a different turn reusing its idempotency key. A run without a
    /// fingerprint compares its session key and message.
    pub fn was_accepted_as(&self, key: &SessionKey, request: &TurnRequest) -> bool {
        match &self.request_fingerprint {
            Some(f) => *f == request.fingerprint(key),
            None => self.session_key == *key && self.request.message == request.message,
        }
    }
}

fn is_zero_ms(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Run {
    /// Whether this run is still queued, never picked up, `after_ms` or more after its accept:
    /// its lane message was probably never sent (the accepting process died between the accept
    /// and the enqueue), since the two are milliseconds apart.
    pub fn unsent_at(&self, now: u64, after_ms: u64) -> bool {
        self.status == RunStatus::Queued
            && self.pickups == 0
            && now.saturating_sub(self.accepted_at) >= after_ms
    }

    /// Pickups of this run that ended neither terminal nor with a clean hand-back (a crash, a
    /// store error, a commit that kept failing), counting the one in progress if it started.
    pub fn failed_pickups(&self) -> u32 {
        self.pickups.saturating_sub(self.hand_backs)
    }
}

/// Event streams of SPEC §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum EventStream {
    /// The run's start, end and errors (`phase: start|end|error`, with the terminal status),
    /// and what happens to it on the way (`retry`, `steered`, `collected`, `requires_action`,
    /// `paused`).
    Lifecycle,
    /// Assistant text deltas, coalesced into a few events per reply.
    Assistant,
    /// Tool calls: `phase: start` (name, call id, an argument preview) when the call is
    /// announced, `phase: end` (isError, durationMs) when its result is in; no partial
    /// updates. Never raw secrets.
    Tool,
    /// Compaction: `phase: truncate` (earlier tool results cut in the request), `start` and
    /// `end` around a summary; tokens before and after.
    Compaction,
}

impl EventStream {
    /// The wire name (`lifecycle`, `assistant`, `tool`, `compaction`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventStream::Lifecycle => "lifecycle",
            EventStream::Assistant => "assistant",
            EventStream::Tool => "tool",
            EventStream::Compaction => "compaction",
        }
    }

    /// A stream by its wire name; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "lifecycle" => EventStream::Lifecycle,
            "assistant" => EventStream::Assistant,
            "tool" => EventStream::Tool,
            "compaction" => EventStream::Compaction,
            _ => return None,
        })
    }
}

/// One run event. `seq` is dense and increasing per run, assigned by the run's writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Event {
    /// The event's place in its run, from 0, dense and increasing.
    pub seq: u64,
    /// Which stream the event belongs to.
    pub stream: EventStream,
    /// When it happened (ms since the epoch).
    pub ts: u64,
    /// The stream's payload (`phase`, text deltas, tool name and call id, …).
    pub data: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_modes_answer_to_their_names_and_openclaws_aliases() {
        let table = [
            ("followup", Some(QueueMode::Followup)),
            ("follow-ups", Some(QueueMode::Followup)),
            ("Followups", Some(QueueMode::Followup)),
            ("steer+backlog", Some(QueueMode::Followup)),
            ("collect", Some(QueueMode::Collect)),
            ("coalesce", Some(QueueMode::Collect)),
            ("steer", Some(QueueMode::Steer)),
            (" steering ", Some(QueueMode::Steer)),
            ("queued", Some(QueueMode::Steer)),
            ("interrupt", Some(QueueMode::Interrupt)),
            ("interrupts", Some(QueueMode::Interrupt)),
            ("ABORT", Some(QueueMode::Interrupt)),
            ("sideways", None),
            ("", None),
        ];
        for (name, mode) in table {
            assert_eq!(QueueMode::parse(name), mode, "{name:?}");
        }
        for mode in [
            QueueMode::Followup,
            QueueMode::Collect,
            QueueMode::Steer,
            QueueMode::Interrupt,
        ] {
            assert_eq!(QueueMode::parse(mode.as_str()), Some(mode));
        }
    }

    #[test]
    fn a_run_without_an_outcome_ran() {
        let run: Run = serde_json::from_value(serde_json::json!({
            "runId": "r", "tenant": "t", "sessionKey": "k", "sessionId": "s",
            "status": "queued", "livenessState": "working",
            "request": { "message": "hello" }, "acceptedAt": 1
        }))
        .expect("run");
        assert_eq!(
            (run.queue_outcome, run.into_run_id.clone()),
            (QueueOutcome::Ran, None)
        );
        let shown = serde_json::to_value(&run).expect("json");
        assert_eq!(shown["queueOutcome"], "ran");
    }
}
