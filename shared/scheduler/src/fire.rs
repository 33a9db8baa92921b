//! Turning a claimed fire into a run: accepted through the normal intake
//! ([`Store::accept_turn`]) in its own fresh session and enqueued on that session's lane, like
//! any turn. Both steps are idempotent (idempotency key and dedup id derive from the run id), so
//! a fire whose submit failed halfway is submitted again safely.

use crate::plan::EXPLICIT_TIMEOUT_IDLE_CAP_MS;
use agentlane_core::cron::{CronJob, JobRun};
use agentlane_core::{
    Lane, LaneMessage, LaneQueue, NewTurn, QueueError, QueueMode, SessionId, StoreError,
    TurnIntake, TurnMessage, TurnRequest,
};

/// How long the idempotency key of a fire maps to its run.
const FIRE_IDEMPOTENCY_TTL_MS: u64 = 24 * 3600 * 1000;

/// Why a fire could not be submitted (it stays listed `queued`; the ticker tries again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The job's fire entry carries no run id to submit.
    #[error("the fire has no run id")]
    NoRun,
    /// The store failed while accepting the fire's turn.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The queue refused the fire's lane message.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// The turn a fire of `job` asks for: the job's message and model; its timeout counted from the
/// fire (an absolute deadline); with an explicit timeout, stalled cloud streams cut at 60 s.
pub fn fire_request(job: &CronJob, entry: &JobRun) -> TurnRequest {
    let timeout = job.effective_timeout_seconds();
    TurnRequest {
        budget: job.budget,
        max_output_tokens: None,
        output_tokens_ceiling: None,
        message: job.message.clone(),
        queue_mode: Some(QueueMode::Followup),
        model: job.model.clone(),
        thinking: None,
        timeout_seconds: Some(timeout.unwrap_or(0)),
        extra_system_prompt: None,
        history: Vec::new(),
        deadline_at: timeout.map(|t| entry.fired_at.saturating_add(t.saturating_mul(1000))),
        model_idle_timeout_ms: match job.timeout_seconds {
            Some(t) if t > 0 => Some(EXPLICIT_TIMEOUT_IDLE_CAP_MS),
            _ => None,
        },
        agent_id: job.agent_id.clone(),
        agent_version: None,
        tools: Vec::new(),
    }
}

/// Accepts the fire's run (a no-op when already accepted with the same request) and enqueues
/// it on its lane. A fire already accepted is sent again with [`send`], not submitted: the job
/// may have been edited since, and its request would no longer match the accepted one.
pub async fn submit(
    store: &dyn TurnIntake,
    queue: &dyn LaneQueue,
    job: &CronJob,
    entry: &JobRun,
    now: u64,
) -> Result<(), SubmitError> {
    let (Some(run_id), Some(session_key)) = (entry.run_id.clone(), entry.session_key.clone())
    else {
        return Err(SubmitError::NoRun);
    };
    let outcome = store
        .accept_turn(NewTurn {
            tenant: job.tenant.clone(),
            session_key: session_key.clone(),
            run_id: run_id.clone(),
            new_session_id: SessionId::generate(),
            request: fire_request(job, entry),
            idempotency_key: Some(format!("cron:{}:{}", job.job_id, run_id)),
            now,
            idempotency_ttl_ms: FIRE_IDEMPOTENCY_TTL_MS,
            max_open_runs: 0,
            default_mode: None,
            spend_caps: Vec::new(),
        })
        .await?;
    if outcome.run.status.is_terminal() {
        return Ok(());
    }
    send(queue, &job.tenant, entry).await
}

/// Pauses before the second and third enqueue of a fire when the queue throttles or is
/// unavailable (each jittered), like a turn's enqueue: a blip does not leave a fire waiting for
/// the ticker's resubmit ([`crate::ticker`], 5 s later).
const ENQUEUE_RETRY_PAUSES_MS: [u64; 2] = [100, 300];

/// Enqueues the run of a fire already accepted on its lane, as accepted: the run keeps the
/// request recorded when it was fired, whatever the job became since. A no-op for a message
/// already sent (same dedup id). A throttled or unavailable queue is tried twice more.
pub async fn send(
    queue: &dyn LaneQueue,
    tenant: &agentlane_core::TenantId,
    entry: &JobRun,
) -> Result<(), SubmitError> {
    let (Some(run_id), Some(session_key)) = (entry.run_id.clone(), entry.session_key.clone())
    else {
        return Err(SubmitError::NoRun);
    };
    let message = LaneMessage {
        lane: Lane::for_session(tenant, &session_key),
        dedup_id: run_id.to_string(),
        body: TurnMessage {
            tenant: tenant.clone(),
            run_id,
            session_key: Some(session_key),
            accepted: None,
        },
    };
    let mut pauses = ENQUEUE_RETRY_PAUSES_MS.into_iter();
    loop {
        match queue.enqueue(&message).await {
            Err(QueueError::Throttled(_) | QueueError::Unavailable(_))
                if let Some(pause) = pauses.next() =>
            {
                let pause =
                    agentlane_core::backoff::jittered(std::time::Duration::from_millis(pause));
                tracing::warn!(run_id = %message.body.run_id, pause_ms = pause.as_millis(), "cron: enqueue failed; retrying");
                tokio::time::sleep(pause).await;
            }
            other => return Ok(other?),
        }
    }
}

/// Writes of a manual fire retried when another writer changed the job in between.
const MANUAL_FIRE_RETRIES: u32 = 4;

/// Fires `job_id` now (`POST /v1/cron/jobs/{id}/run`): lists the fire on the job (a conditional
/// write, retried on a concurrent change) and submits its run. `None` when the tenant has no
/// such job. A submit that fails after the fire is listed is logged and left to the ticker,
/// which submits listed fires whose run is missing.
pub async fn fire_now(
    cron: &dyn agentlane_core::cron::CronStore,
    store: &dyn TurnIntake,
    queue: &dyn LaneQueue,
    tenant: &agentlane_core::TenantId,
    job_id: &agentlane_core::cron::JobId,
    now: u64,
) -> Result<Option<JobRun>, SubmitError> {
    for _ in 0..=MANUAL_FIRE_RETRIES {
        let Some(job) = cron.get_job(tenant, job_id).await? else {
            return Ok(None);
        };
        let (mut next, entry) =
            crate::plan::manual_fire(&job, now, agentlane_core::RunId::generate());
        next.version = job.version + 1;
        match cron.replace_job(&next, job.version).await {
            Ok(()) => {
                if let Err(e) = submit(store, queue, &next, &entry, now).await {
                    tracing::warn!(%job_id, error = %e, "cron: manual fire not submitted yet");
                }
                return Ok(Some(entry));
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(SubmitError::Store(StoreError::Conflict(
        "the job kept changing; try again".into(),
    )))
}
