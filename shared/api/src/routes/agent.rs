//! `POST /v1/agent` (accept a turn) and `POST /v1/agent.wait`.

use crate::ApiState;
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{EmptyBody, read_json};
use crate::validate::{AgentBody, validate_agent_body};
use crate::views::{AcceptedView, WaitView};
use crate::wait::wait_for_run;
use agentlane_core::{Lane, LaneMessage, NewTurn, RunId, RunStatus, SessionId, TurnMessage};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Accepts a turn: validate, write the run `queued`, enqueue it on its lane, answer 202.
pub async fn submit(
    State(state): State<Arc<ApiState>>,
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
    let turn = validate_agent_body(body, &state.config)?;
    let outcome = state
        .store
        .accept_turn(NewTurn {
            tenant: tenant.clone(),
            session_key: turn.session_key,
            run_id: RunId::generate(),
            new_session_id: SessionId::generate(),
            request: turn.request,
            idempotency_key: turn.idempotency_key,
            now: state.clock.now_ms(),
            idempotency_ttl_ms: state.config.idempotency_ttl_ms,
        })
        .await?;
    let run = outcome.run;
    // A replay that finds the run still queued enqueues again: the dedup id makes that a no-op
    // when the first enqueue happened, and heals a crash between accept and enqueue otherwise.
    if outcome.created || run.status == RunStatus::Queued {
        let message = LaneMessage {
            lane: Lane::for_session(&tenant, &run.session_key),
            dedup_id: run.run_id.to_string(),
            body: TurnMessage {
                session_key: Some(run.session_key.clone()),
                tenant: tenant.clone(),
                run_id: run.run_id.clone(),
            },
        };
        state.queue.enqueue(&message).await?;
    }
    tracing::info!(
        run_id = %run.run_id,
        session_key = %run.session_key,
        deduplicated = !outcome.created,
        "turn accepted"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(AcceptedView {
            run_id: run.run_id,
            session_id: run.session_id,
            session_key: run.session_key,
            accepted_at: run.accepted_at,
            status: run.status,
            deduplicated: !outcome.created,
        }),
    ))
}

/// The body of `POST /v1/agent.wait`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitBody {
    pub run_id: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Waits for a run to end, at most `timeoutMs` (capped); the run goes on if the wait ends first.
pub async fn wait(
    State(state): State<Arc<ApiState>>,
    Tenant(tenant): Tenant,
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
    let timeout_ms = body
        .timeout_ms
        .unwrap_or(state.config.default_wait_ms)
        .min(state.config.max_wait_ms);
    let run = wait_for_run(
        state.store.as_ref(),
        &tenant,
        &run_id,
        Duration::from_millis(timeout_ms),
    )
    .await?;
    Ok(Json(WaitView::of(&run)))
}
