//! `POST /v1/runs/{runId}/actions`: the answer to a paused run (issue 20) — every pending call
//! answered exactly once — recorded beside the run in one conditional write, then one lane
//! message that resumes it. The same body again answers `200` with the same result (and sends
//! the resume again: a duplicate is harmless, a lost one is healed); another body after one was
//! recorded is `409`.

use super::agent::enqueue_with_retry;
use super::run_id;
use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, EmptyBody, read_json};
use agentlane_core::action::check_answers;
use agentlane_core::{
    ActionAnswer, AnswerOutcome, LaneMessage, RecordedAnswer, Run, RunId, RunStatus, TenantId,
};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use std::sync::Arc;

/// The answer of `POST /v1/runs/{runId}/actions`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActionsView {
    pub run_id: RunId,
    /// The run's status after the answer (`requires_action` until the resume picks it up).
    pub status: RunStatus,
    /// When the answer was recorded (ms since epoch); the same for a repeated body.
    pub answered_at: u64,
    /// `true` when this request recorded nothing new (the same body was accepted before).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repeated: bool,
}

/// Answers a paused run's pending tool calls: client tools' outputs and approvals.
#[utoipa::path(post, path = "/v1/runs/{runId}/actions", operation_id = "answerRunActions", tag = "runs",
    params(("runId" = String, Path, description = "A run id (`run_…`)", min_length = 1, max_length = 128)),
    request_body = ActionAnswer,
    responses(
        (status = 202, description = "Recorded; the run resumes", body = ActionsView),
        (status = 200, description = "The same answer was recorded before (nothing new)", body = ActionsView),
        (status = 400, description = "`invalid_request`: not every pending call answered exactly once the right way (the ids are listed)", body = ErrorBody),
        (status = 404, description = "`not_found`: no such run for this tenant", body = ErrorBody),
        (status = 409, description = "`conflict`: the run is not waiting (never paused, already answered differently, expired or ended)", body = ErrorBody),
    ))]
pub(crate) async fn answer(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<ActionsView>), ApiError> {
    let id = run_id(raw)?;
    let body: ActionAnswer = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let answered = record_answer(&state, &tenant, &id, body).await?;
    let status = if answered.view.repeated {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(answered.view)))
}

/// An answer recorded (or found recorded) for one pause of a run.
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    pub view: ActionsView,
    /// The pause answered ([`agentlane_core::RequiredAction::id`]).
    pub action_id: u32,
    /// The run as the answer left it.
    pub run: Run,
}

/// Records `body` as the answer to run `id`'s pause and sends the lane message that resumes
/// it; the same body again is found recorded (`repeated`) and the resume is sent again. The
/// errors of `POST /v1/runs/{runId}/actions`.
pub(crate) async fn record_answer(
    state: &Shared,
    tenant: &TenantId,
    id: &RunId,
    body: ActionAnswer,
) -> Result<Answered, ApiError> {
    let run = state
        .history()
        .get_run(tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id}")))?;
    let Some(action) = run.required_action.clone() else {
        return Err(not_waiting(&run));
    };
    if let Some(view) = repeated(&run, action.id, &body) {
        resume(state, &run, action.id).await?;
        return Ok(Answered {
            view,
            action_id: action.id,
            run,
        });
    }
    if run.status != RunStatus::RequiresAction {
        return Err(not_waiting(&run));
    }
    check_answers(&action, &body).map_err(|p| ApiError::InvalidRequest(p.message()))?;
    let recorded = RecordedAnswer {
        action_id: action.id,
        answer: body.clone(),
        answered_at: state.clock.now_ms(),
        expired: false,
    };
    match state.intake().answer_action(tenant, id, recorded).await? {
        AnswerOutcome::Recorded(run) => {
            resume(state, &run, action.id).await?;
            tracing::info!(run_id = %id, action = action.id, "pause answered");
            let answered_at = run.action_answer.as_ref().map_or(0, |a| a.answered_at);
            Ok(Answered {
                view: ActionsView {
                    run_id: id.clone(),
                    status: run.status,
                    answered_at,
                    repeated: false,
                },
                action_id: action.id,
                run,
            })
        }
        AnswerOutcome::NotWaiting(run) => match repeated(&run, action.id, &body) {
            // Two identical answers raced: the other recorded it.
            Some(view) => Ok(Answered {
                view,
                action_id: action.id,
                run,
            }),
            None => Err(not_waiting(&run)),
        },
        AnswerOutcome::NotFound => Err(ApiError::not_found(format!("run {id}"))),
    }
}

/// The view of an answer already recorded with the same body for the pause `action_id`.
fn repeated(run: &Run, action_id: u32, body: &ActionAnswer) -> Option<ActionsView> {
    let answer = run.action_answer.as_ref()?;
    answer.same_as(action_id, body).then(|| ActionsView {
        run_id: run.run_id.clone(),
        status: run.status,
        answered_at: answer.answered_at,
        repeated: true,
    })
}

fn not_waiting(run: &Run) -> ApiError {
    let why = match (&run.required_action, &run.action_answer, run.status) {
        (None, _, _) => "it never paused".to_owned(),
        (Some(action), Some(a), _) if a.action_id == action.id && a.expired => {
            "its pause expired".to_owned()
        }
        (Some(action), Some(a), _) if a.action_id == action.id => {
            "its pause was already answered with a different body".to_owned()
        }
        (_, _, status) => format!("its status is {}", status.as_str()),
    };
    ApiError::Conflict(format!(
        "run {} is not waiting for an answer: {why}",
        run.run_id
    ))
}

/// Sends the lane message that resumes the run (still paused only: once it runs, its own
/// pickup has the answer).
async fn resume(state: &Shared, run: &Run, action_id: u32) -> Result<(), ApiError> {
    wake(state, run, format!("{}:resume:{action_id}", run.run_id)).await
}

/// After an abort request on a paused run: nothing runs it, so its lane message is sent; the
/// pickup answers every pending call "aborted" and ends the run.
pub(crate) async fn wake_for_abort(state: &Shared, run: &Run) -> Result<(), ApiError> {
    wake(state, run, format!("{}:abort-paused", run.run_id)).await
}

/// Sends `run`'s lane message with `dedup_id` while it is paused.
async fn wake(state: &Shared, run: &Run, dedup_id: String) -> Result<(), ApiError> {
    if run.status != RunStatus::RequiresAction {
        return Ok(());
    }
    let message = LaneMessage::for_run(run, dedup_id);
    enqueue_with_retry(state.queue.as_ref(), &message).await?;
    Ok(())
}
