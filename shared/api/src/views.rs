//! Response bodies: what clients see of runs, sessions and transcripts.

use agentlane_core::{
    Event, Lane, Payload, Run, RunError, RunId, RunStatus, Session, SessionId, SessionKey,
    SessionStatus, TranscriptEntry, Usage,
};
use serde::Serialize;

/// `202` answer of `POST /v1/agent`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedView {
    /// The new run's id (`run_…`); or the existing run's when deduplicated.
    pub run_id: RunId,
    /// The session id the run belongs to (`ses_…`).
    pub session_id: SessionId,
    /// The session key the turn was sent to.
    pub session_key: SessionKey,
    /// ms since the epoch.
    pub accepted_at: u64,
    /// The run's status: `queued`, or the existing run's status when deduplicated.
    pub status: RunStatus,
    /// Present (and true) when an idempotency key named an existing run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deduplicated: bool,
}

/// What `agent.wait` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitStatus {
    /// The run ended `ok`.
    Ok,
    /// The run ended in error, or was aborted.
    Error,
    /// The run timed out, or only the wait ended while it ran (`runStatus: running`).
    Timeout,
    /// Only the wait ended, and the run is still queued (`timeoutPhase: "queue"`).
    Pending,
    /// The run is paused until its tool calls are answered (`requiredAction`); the wait
    /// returns at once, it is not a timeout.
    RequiresAction,
}

/// Where a run was when a wait ended before it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutPhase {
    /// Still queued: no runner has picked it up.
    Queue,
    /// Running: the model or a tool is at work.
    Run,
}

/// `200` answer of `POST /v1/agent.wait`: with the run's final payloads and usage once it
/// ended, so one wait answers a turn.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitView {
    /// The run waited on.
    pub run_id: RunId,
    /// How the wait ended.
    pub status: WaitStatus,
    /// The run's own status when the wait ended.
    pub run_status: RunStatus,
    /// Whether the run, or its session after it, can still make progress (SPEC §5; OpenClaw's
    /// `agent.wait` answers it too): `working`, `paused` (waiting for a client or a person),
    /// `blocked` (every retry and fallback spent), `abandoned` (declared stuck).
    pub liveness_state: agentlane_core::LivenessState,
    /// When a runner started the run, ms since the epoch; absent while queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// When the run reached a terminal status, ms since the epoch; absent until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// Why the run failed; absent unless it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The replies shown to the user (terminal runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payloads: Option<Vec<Payload>>,
    /// Tokens used by every attempt (terminal runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What every attempt cost in USD (terminal runs whose models have prices only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The model that answered (terminal runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Set when only the wait ended: where the run still is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_phase: Option<TimeoutPhase>,
    /// What a paused run waits for (`status: requires_action` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_action: Option<RequiredActionView>,
}

/// What a paused run waits for: answer every call with `POST /v1/runs/{runId}/actions`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequiredActionView {
    /// The calls to answer, each with its id, tool name and arguments.
    pub tool_calls: Vec<agentlane_core::PendingCall>,
    /// When the pause ends unanswered (ms since epoch): the calls are then answered
    /// `Expired` and the run goes on.
    pub expires_at: u64,
}

impl RequiredActionView {
    /// The pending action of `run`, while it is paused.
    pub fn of(run: &Run) -> Option<Self> {
        match (&run.required_action, run.status) {
            (Some(action), RunStatus::RequiresAction) => Some(Self {
                tool_calls: action.tool_calls.clone(),
                expires_at: action.expires_at,
            }),
            _ => None,
        }
    }
}

impl WaitView {
    /// The wait's answer for the run as last read.
    pub fn of(run: &Run) -> Self {
        let (status, error) = match run.status {
            RunStatus::Ok => (WaitStatus::Ok, None),
            RunStatus::Error => (
                WaitStatus::Error,
                Some(run_error(run, "error", "the run failed")),
            ),
            RunStatus::Aborted => (
                WaitStatus::Error,
                Some(run_error(run, "aborted", "the run was aborted")),
            ),
            RunStatus::Timeout => (
                WaitStatus::Timeout,
                Some(run_error(run, "timeout", "the run timed out")),
            ),
            RunStatus::Running => (WaitStatus::Timeout, None),
            RunStatus::Queued => (WaitStatus::Pending, None),
            RunStatus::RequiresAction => (WaitStatus::RequiresAction, None),
        };
        let ended = run.status.is_terminal();
        let timeout_phase = match run.status {
            RunStatus::Queued => Some(TimeoutPhase::Queue),
            RunStatus::Running => Some(TimeoutPhase::Run),
            RunStatus::RequiresAction
            | RunStatus::Ok
            | RunStatus::Error
            | RunStatus::Aborted
            | RunStatus::Timeout => None,
        };
        Self {
            run_id: run.run_id.clone(),
            status,
            run_status: run.status,
            liveness_state: run.liveness_state,
            started_at: run.started_at,
            ended_at: run.ended_at,
            error,
            payloads: ended.then(|| run.payloads.clone()),
            usage: ended.then_some(run.usage),
            cost_usd: run.cost_usd.filter(|_| ended),
            model: if ended { run.model.clone() } else { None },
            timeout_phase,
            required_action: RequiredActionView::of(run),
        }
    }
}

fn run_error(run: &Run, code: &str, message: &str) -> RunError {
    run.error
        .clone()
        .unwrap_or_else(|| RunError::new(code, message))
}

/// `GET /v1/runs/{id}`: the run as core serialises it, without the tenant, with the agent it
/// runs and that agent's version at accept (`agentId`, `agentVersion`; 0 is the deployment's
/// own `main`).
pub fn run_view(run: &Run) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(run)?;
    if let Some(object) = value.as_object_mut() {
        object.remove("tenant");
        // The answer is the API's record; the pending action shows while the run waits on it.
        object.remove("actionAnswer");
        match RequiredActionView::of(run) {
            Some(action) => {
                object.insert("requiredAction".into(), serde_json::to_value(action)?);
            }
            None => {
                object.remove("requiredAction");
            }
        }
        object.insert("agentId".into(), run.request.agent().into());
        object.insert(
            "agentVersion".into(),
            run.request.agent_version.unwrap_or(0).into(),
        );
    }
    Ok(value)
}

/// `202` answer of `POST /v1/runs/{id}/abort`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbortView {
    /// The run asked to stop.
    pub run_id: RunId,
    /// The run's status when the abort was recorded (a terminal run stays as it is).
    pub status: RunStatus,
    /// `true` once the abort is recorded; the runner stops at its next check.
    pub abort_requested: bool,
}

/// `GET /v1/runs/{id}/events` (JSON form).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EventsView {
    /// The run's events after `after`, in `seq` order.
    pub events: Vec<Event>,
    /// The last `seq` returned, else the `after` given, else null: pass it back as `after`.
    pub next: Option<u64>,
}

/// `GET /v1/sessions/{key}` and the answer of a reset.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The session's caller-chosen key.
    pub session_key: SessionKey,
    /// The session's current id (`ses_…`); changes on every reset.
    pub session_id: SessionId,
    /// Whether the session is idle or has a run in progress.
    pub status: SessionStatus,
    /// The agent the session belongs to (that of its first turn).
    pub agent_id: String,
    /// The FIFO lane the session's turns are queued on (one per tenant and session key).
    pub lane: Lane,
    /// The run in progress, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    /// Turns accepted for this key over all its session ids.
    pub runs_accepted: u64,
    /// Turns that reached a terminal status.
    pub runs_finished: u64,
    /// Resets so far; bumped by every reset.
    pub generation: u64,
    /// When the session was created, ms since the epoch.
    pub created_at: u64,
    /// When the session last changed, ms since the epoch.
    pub updated_at: u64,
    /// The last time a run made progress (a reply, a tool, a status change), ms since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<u64>,
    /// A writer holds a lease on the session's lock that has not ended (`lockUntil >= now`).
    pub locked: bool,
    /// The supervisor's diagnostic while one holds (`session.long_running`, `session.stalled`,
    /// `session.stuck`; SPEC §10).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<DiagnosticSchema>)]
    pub diagnostic: Option<agentlane_supervisor::Diagnostic>,
    /// The mode of a turn that asks for none (`PATCH` sets it); absent: `followup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<agentlane_core::QueueMode>,
}

/// The shape of a supervisor [`agentlane_supervisor::Diagnostic`] (documentation only).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Diagnostic)]
pub struct DiagnosticSchema {
    /// `session.long_running`, `session.stalled` or `session.stuck`.
    pub class: String,
    /// What the supervisor observed, for people (e.g. no progress for how long).
    pub reason: String,
    /// How long the condition has held, in ms.
    pub age_ms: u64,
}

impl SessionView {
    /// The view of `session` at time `now` (ms).
    pub fn of(session: &Session, now: u64) -> Self {
        Self {
            session_key: session.session_key.clone(),
            session_id: session.session_id.clone(),
            status: session.status,
            agent_id: session
                .agent_id
                .clone()
                .unwrap_or_else(|| agentlane_core::MAIN_AGENT.to_owned()),
            lane: Lane::for_session(&session.tenant, &session.session_key),
            active_run_id: session.active_run_id.clone(),
            runs_accepted: session.runs_accepted,
            runs_finished: session.runs_finished,
            generation: session.generation,
            created_at: session.created_at,
            updated_at: session.updated_at,
            last_progress_at: session.last_progress_at,
            locked: session.lock_is_live(now),
            diagnostic: None,
            queue_mode: session.queue_mode,
        }
    }
}

/// `GET /v1/sessions`: a page of the tenant's sessions, newest activity first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsView {
    /// The sessions, newest activity (`updatedAt`) first.
    pub sessions: Vec<SessionView>,
    /// Pass it back as `cursor` for the next page; `null` when the list is done.
    pub next: Option<String>,
}

/// `GET /v1/runs?sessionKey=`: a page of a session's runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunsView {
    /// The runs, as `GET /v1/runs/{runId}` shows them.
    #[schema(value_type = Vec<Run>)]
    pub runs: Vec<serde_json::Value>,
    /// The last `sessionSeq` returned while more may follow: pass it back as `before`; `null`
    /// when the list is done.
    pub next: Option<u64>,
}

/// `GET /v1/sessions/{key}/transcript`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptView {
    /// The session's caller-chosen key.
    pub session_key: SessionKey,
    /// The session id the entries belong to (`ses_…`).
    pub session_id: SessionId,
    /// The transcript entries after `after`, in `seq` order.
    pub entries: Vec<TranscriptEntry>,
    /// The last `seq` returned, else the `after` given, else null: pass it back as `after`.
    pub next: Option<u64>,
}
