//! `POST /v1/agent` (accept a turn) and `POST /v1/agent.wait`.

use crate::Shared;
use crate::auth::Tenant;
use crate::deadline::ResponseDeadline;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{EmptyBody, read_json};
use crate::request_context::fingerprint;
use crate::validate::{AgentBody, validate_agent_body};
use crate::views::{AcceptedView, WaitView};
use crate::wait::{WaitFor, wait_for_run};
use agentlane_core::{
    AcceptedRecord, Lane, LaneMessage, NewTurn, RunId, RunStatus, SessionId, StoreError,
    TurnMessage,
};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Accepts a turn: validate, write the run `queued` unless the session already has its cap of
/// runs queued or running (`429 rate_limited`, checked in the store's accept transaction, so
/// concurrent submits cannot pass it together), enqueue it on its lane, answer 202.
#[utoipa::path(post, path = "/v1/agent", operation_id = "submitTurn", tag = "agent",
    request_body = AgentBody,
    responses(
        (status = 202, description = "Accepted: the run is queued on its session's lane", body = AcceptedView,
            links(
                ("GetRun" = (operation_id = "getRun", parameters(("runId" = "$response.body#/runId")))),
                ("RunEvents" = (operation_id = "runEvents", parameters(("runId" = "$response.body#/runId")))),
                ("AbortRun" = (operation_id = "abortRun", parameters(("runId" = "$response.body#/runId")))),
                ("GetSession" = (operation_id = "getSession", parameters(("sessionKey" = "$response.body#/sessionKey")))),
                ("GetTranscript" = (operation_id = "getTranscript", parameters(("sessionKey" = "$response.body#/sessionKey")))),
                ("ResetSession" = (operation_id = "resetSession", parameters(("sessionKey" = "$response.body#/sessionKey")))),
            )),
        (status = 409, description = "`conflict`: the idempotency key names a different turn", body = ErrorBody),
    ))]
pub(crate) async fn submit(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<AcceptedView>), ApiError> {
    let body: AgentBody = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let turn = validate_agent_body(body, &state.config, &tenant)?;
    let AcceptedTurn { run, created } = accept(&state, &tenant, turn).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AcceptedView {
            run_id: run.run_id,
            session_id: run.session_id,
            session_key: run.session_key,
            accepted_at: run.accepted_at,
            status: run.status,
            deduplicated: !created,
        }),
    ))
}

/// A turn the store accepted: its run, and whether this call created it (`false`: an
/// idempotent replay named an existing run).
#[derive(Debug, Clone)]
pub(crate) struct AcceptedTurn {
    pub run: agentlane_core::Run,
    pub created: bool,
}

/// Accepts a validated turn for `tenant`, as `POST /v1/agent` does (the OpenAI-compatible
/// routes too): writes the run `queued` unless the session already has its cap of runs queued
/// or running (`429 rate_limited`, checked in the store's accept transaction, so concurrent
/// submits cannot pass it together), enqueues it on its lane, and asks the session's active
/// run to stop when the turn is an `interrupt`. `404` names an unknown agent; `409` an
/// idempotency key naming another turn, or a session of another agent.
pub(crate) async fn accept(
    state: &Shared,
    tenant: &agentlane_core::TenantId,
    turn: crate::validate::ValidTurn,
) -> Result<AcceptedTurn, ApiError> {
    let limits = state.admission.limits_of(tenant);
    let max_open_runs = limits.max_queued_runs_per_session;
    let now = state.clock.now_ms();
    // Read with the accept's own reads: a spent period refuses the turn (429).
    let spend_caps = match &state.spend {
        Some(_) => limits.budget().limited_caps(now),
        None => Vec::new(),
    };
    let outcome = state
        .intake()
        .accept_turn(NewTurn {
            tenant: tenant.clone(),
            session_key: turn.session_key,
            run_id: RunId::generate(),
            new_session_id: SessionId::generate(),
            request: turn.request,
            idempotency_key: turn.idempotency_key,
            now,
            idempotency_ttl_ms: state.config.idempotency_ttl_ms,
            max_open_runs,
            default_mode: state.config.default_queue_mode,
            spend_caps,
        })
        .await
        .map_err(|error| match error {
            // The idempotency key already names a different turn, or the session belongs to
            // another agent.
            StoreError::Conflict(detail) => ApiError::Conflict(detail),
            // The agent the turn names does not exist (the message names it).
            StoreError::NotFound(detail) => ApiError::NotFound(detail),
            // The session's cap of queued runs, checked in the accepting transaction.
            StoreError::SessionFull { open, cap } => ApiError::rate_limited(
                format!(
                    "this session already has {open} runs queued or running (at most {cap}); \
                     wait for one to end"
                ),
                Duration::from_secs(1),
            ),
            other => ApiError::from(other),
        })?;
    let run = outcome.run;
    // A replay that finds the run still queued enqueues again: the dedup id makes that a no-op
    // when the first enqueue happened, and heals a crash between accept and enqueue otherwise.
    // A store that queued the created run in the accept's own write needs no second enqueue.
    let queued_by_store = outcome.created && state.store.queues_accepted_turns();
    if !queued_by_store && (outcome.created || run.status == RunStatus::Queued) {
        let message = LaneMessage {
            lane: Lane::for_session(tenant, &run.session_key),
            dedup_id: run.run_id.to_string(),
            body: TurnMessage {
                session_key: Some(run.session_key.clone()),
                tenant: tenant.clone(),
                run_id: run.run_id.clone(),
                // The runner starts a fresh run from its record, checked by the store.
                accepted: (outcome.created && state.store.checks_accepted_records())
                    .then(|| AcceptedRecord::of(&run))
                    .flatten(),
            },
        };
        enqueue_with_retry(state.queue.as_ref(), &message).await?;
    }
    if outcome.created && run.request.queue_mode == Some(agentlane_core::QueueMode::Interrupt) {
        interrupt_active_run(state, tenant, &run).await?;
    }
    tracing::info!(
        run_id = %run.run_id,
        session = %fingerprint(run.session_key.as_str()),
        deduplicated = !outcome.created,
        "turn accepted"
    );
    Ok(AcceptedTurn {
        run,
        created: outcome.created,
    })
}

/// The body of `POST /v1/agent.wait`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WaitBody {
    /// A run id from `POST /v1/agent` (unknown or malformed ids answer 404).
    #[schema(min_length = 1, max_length = 128)]
    pub run_id: String,
    /// How long to wait, in ms (default 30 s, capped by the server's `max_wait_ms`).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub timeout_ms: Option<u64>,
}

/// Waits for a run to end, at most `timeoutMs` (capped); the run goes on if the wait ends first.
/// Holds one of the tenant's wait slots meanwhile.
#[utoipa::path(post, path = "/v1/agent.wait", operation_id = "waitRun", tag = "agent",
    request_body = WaitBody,
    responses(
        (status = 200, description = "The run ended, or the wait did (`status: timeout|pending` with `timeoutPhase`)", body = WaitView),
    ))]
pub(crate) async fn wait(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    deadline: Option<Extension<ResponseDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<WaitView>, ApiError> {
    let body: WaitBody = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let run_id = super::run_id(body.run_id)?;
    let mut slot = state.admission.wait_slot(&tenant)?;
    let timeout_ms = body
        .timeout_ms
        .unwrap_or(state.config.default_wait_ms)
        .min(state.config.max_wait_ms);
    // A host deadline (the streaming Lambda's) ends the wait in time to answer.
    let timeout = match deadline {
        Some(Extension(deadline)) => Duration::from_millis(timeout_ms).min(deadline.remaining()),
        None => Duration::from_millis(timeout_ms),
    };
    let wait = WaitFor {
        tenant: &tenant,
        run_id: &run_id,
        timeout,
    };
    let run = wait_for_run(state.history(), &state.notifier, wait, &mut slot).await?;
    Ok(Json(WaitView::of(&run)))
}

/// Enqueues, retrying a throttled or unavailable queue twice (about 100 ms, then 300 ms, each
/// [jittered](agentlane_core::backoff::jittered) so that ingress instances hit by the same blip
/// retry apart) before the client is told. A run whose enqueue still failed stays `queued`;
/// resubmitting with the same idempotency key enqueues it again.
pub(crate) async fn enqueue_with_retry(
    queue: &dyn agentlane_core::LaneQueue,
    message: &LaneMessage,
) -> Result<(), agentlane_core::QueueError> {
    let mut pauses = [100u64, 300].into_iter();
    loop {
        match queue.enqueue(message).await {
            Err(
                agentlane_core::QueueError::Throttled(_)
                | agentlane_core::QueueError::Unavailable(_),
            ) if let Some(pause) = pauses.next() => {
                let pause = agentlane_core::backoff::jittered(Duration::from_millis(pause));
                tracing::warn!(run_id = %message.body.run_id, pause_ms = pause.as_millis(), "enqueue failed; retrying");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

/// `interrupt` (SPEC §4): the run active on the session when `interrupting` was accepted is
/// asked to abort (`interrupted`), and woken when it is paused; the order rule lets
/// `interrupting` go next (its accept marked the session).
async fn interrupt_active_run(
    state: &Shared,
    tenant: &agentlane_core::TenantId,
    interrupting: &agentlane_core::Run,
) -> Result<(), ApiError> {
    let session = state
        .history()
        .get_session(tenant, &interrupting.session_key)
        .await?;
    let Some(active) = session.and_then(|s| s.active_run_id) else {
        return Ok(());
    };
    if active != interrupting.run_id {
        tracing::info!(run = %active, by = %interrupting.run_id, "interrupting the active run");
        let aborted = state
            .intake()
            .request_abort_for(tenant, &active, agentlane_core::AbortReason::Interrupted)
            .await?;
        // A paused run has no runner to see the abort: its message is sent, and its pickup
        // answers the pending calls "aborted"; then the interrupt runs.
        if let Some(run) = aborted {
            super::actions::wake_for_abort(state, &run).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{Delivery, QueueError, QueueResult, Receipt, RunId, SessionKey, TenantId};
    use std::sync::Mutex;
    use std::time::Duration;

    /// Fails its first `failures` enqueues (unit-test fake).
    struct Flaky {
        failures: Mutex<u32>,
        calls: Mutex<u32>,
    }

    #[async_trait::async_trait]
    impl agentlane_core::LaneQueue for Flaky {
        async fn enqueue(&self, _: &LaneMessage) -> QueueResult<()> {
            *self.calls.lock().unwrap() += 1;
            let mut left = self.failures.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Err(QueueError::Unavailable("blip".into()));
            }
            Ok(())
        }
        async fn receive(&self, _: usize, _: Duration, _: Duration) -> QueueResult<Vec<Delivery>> {
            Ok(Vec::new())
        }
        async fn ack(&self, _: &Receipt) -> QueueResult<()> {
            Ok(())
        }
        async fn set_visibility(&self, _: &Receipt, _: Duration) -> QueueResult<()> {
            Ok(())
        }
    }

    fn message() -> LaneMessage {
        let tenant = TenantId::new("t");
        let key = SessionKey::new("k");
        LaneMessage {
            lane: Lane::for_session(&tenant, &key),
            dedup_id: "r".into(),
            body: TurnMessage {
                session_key: Some(key),
                tenant,
                run_id: RunId::new("r"),
                accepted: None,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_blip_is_retried_and_a_lasting_outage_is_reported() {
        let blip = Flaky {
            failures: Mutex::new(2),
            calls: Mutex::new(0),
        };
        let started = tokio::time::Instant::now();
        assert_eq!(enqueue_with_retry(&blip, &message()).await, Ok(()));
        assert_eq!(*blip.calls.lock().unwrap(), 3);
        // about 100 + 300 ms, each pause spread by ±20 %
        let paused = started.elapsed();
        assert!(
            (Duration::from_millis(320)..=Duration::from_millis(480)).contains(&paused),
            "{paused:?}"
        );
        let down = Flaky {
            failures: Mutex::new(9),
            calls: Mutex::new(0),
        };
        assert!(matches!(
            enqueue_with_retry(&down, &message()).await,
            Err(QueueError::Unavailable(_))
        ));
        assert_eq!(*down.calls.lock().unwrap(), 3);
    }
}
