//! `GET /v1/runs/{id}`, its events (JSON pages or SSE), and abort.

use super::run_id;
use crate::Shared;
use crate::auth::Tenant;
use crate::deadline::ResponseDeadline;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::page;
use crate::sse::event_stream;
use crate::views::{AbortView, EventsView, run_view};
use crate::wait::RunWatch;
use agentlane_core::{Run, RunId, TenantId};
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;

/// Default page size of event and transcript reads.
pub(crate) const DEFAULT_PAGE: usize = 1000;
/// Largest page size of event and transcript reads.
pub(crate) const MAX_PAGE: usize = 5000;

/// `limit` checked against 1..=[`MAX_PAGE`].
pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::InvalidRequest(format!(
            "limit is {n}; use 1-{MAX_PAGE}"
        ))),
    }
}

async fn load_run(state: &Shared, tenant: &TenantId, id: &RunId) -> Result<Run, ApiError> {
    state
        .history()
        .get_run(tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id}")))
}

/// Query of `GET /v1/runs/{runId}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RunQuery {
    /// `internal`: also the runner's own records (`checkpoint`, the retry loop's state between
    /// hand-backs, and `requestFingerprint`), for debugging; left out otherwise.
    #[param(inline)]
    pub include: Option<RunInclude>,
}

/// What `?include=` adds to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunInclude {
    Internal,
}

/// The run record (without its tenant; the runner's internals only with `?include=internal`).
#[utoipa::path(get, path = "/v1/runs/{runId}", operation_id = "getRun", tag = "runs",
    params(("runId" = String, Path, description = "A run id (`run_…`)", min_length = 1, max_length = 128), RunQuery),
    responses((status = 200, description = "The run: status, model, attempts, usage, payloads", body = Run)))]
pub(crate) async fn get_run(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<RunQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = run_id(raw)?;
    let run = load_run(&state, &tenant, &id).await?;
    let mut view = run_view(&run).map_err(|e| ApiError::Internal(format!("run view: {e}")))?;
    if query.include != Some(RunInclude::Internal)
        && let Some(object) = view.as_object_mut()
    {
        for internal in INTERNAL_FIELDS {
            object.remove(*internal);
        }
    }
    Ok(Json(view))
}

/// The fields of a run only `?include=internal` shows: the runner's resume state and the
/// fingerprint idempotent resubmits are checked against.
pub(crate) const INTERNAL_FIELDS: &[&str] = &["checkpoint", "requestFingerprint"];

/// Query of the events route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Events after this `seq` (the `next` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<u64>,
    /// Page size, 1-5000 (default 1000; JSON form only).
    #[param(minimum = 1, maximum = 5000)]
    pub limit: Option<usize>,
}

/// A page of events (at most `limit`, and at most `max_page_bytes` of JSON: `next` continues),
/// or with `Accept: text/event-stream` an SSE stream until the run ends (one of the tenant's
/// stream slots while it lasts). `Last-Event-ID` (SSE reconnects) takes precedence over
/// `after`. With a [`ResponseDeadline`] the stream ends just before it with a `reconnect`
/// event and a `retry:` hint when the run has not ended by then.
#[utoipa::path(get, path = "/v1/runs/{runId}/events", operation_id = "runEvents", tag = "runs",
    params(("runId" = String, Path, description = "A run id (`run_…`)", min_length = 1, max_length = 128), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "SSE reconnects: the last `seq` seen (wins over `after`)")),
    responses((status = 200, description = "A page of events (JSON), or with `Accept: text/event-stream` an SSE stream until the run ends: `id` = seq, `event` = stream, `data` = the event",
        content((EventsView = "application/json"), (String = "text/event-stream")))))]
pub(crate) async fn events(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    deadline: Option<Extension<ResponseDeadline>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = run_id(raw)?;
    let limit = page_limit(query.limit)?;
    if wants_event_stream(&headers) {
        let after = match last_event_id(&headers)? {
            Some(seq) => Some(seq),
            None => query.after,
        };
        let slot = state.admission.stream_slot(&tenant).await?;
        let max_poll = std::time::Duration::from_millis(state.config.sse_poll_ms);
        let watch = RunWatch::new(&state.notifier, &tenant, &id, max_poll);
        load_run(&state, &tenant, &id).await?;
        let deadline = deadline.map(|Extension(deadline)| deadline.instant());
        let stream = event_stream(state, tenant, id, after, deadline, watch, slot);
        return Ok(stream.into_response());
    }
    load_run(&state, &tenant, &id).await?;
    let events = state
        .history()
        .read_events_page(
            &tenant,
            &id,
            query.after,
            page::budget(limit, state.config.limits.max_page_bytes),
        )
        .await?;
    let events = page::fit(events, state.config.limits.max_page_bytes);
    let next = events.last().map(|e| e.seq).or(query.after);
    Ok(Json(EventsView { events, next }).into_response())
}

fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<u64>().map(Some).map_err(|_| {
        ApiError::InvalidRequest("Last-Event-ID must be an event seq (a whole number)".into())
    })
}

/// Asks a live run to stop at its next check.
#[utoipa::path(post, path = "/v1/runs/{runId}/abort", operation_id = "abortRun", tag = "runs",
    params(("runId" = String, Path, description = "A run id (`run_…`)", min_length = 1, max_length = 128)),
    responses(
        (status = 202, description = "Abort requested: the run stops at its next check", body = AbortView),
        (status = 409, description = "`conflict`: the run already ended", body = ErrorBody),
    ))]
pub(crate) async fn abort(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<(StatusCode, Json<AbortView>), ApiError> {
    let id = run_id(raw)?;
    let run = load_run(&state, &tenant, &id).await?;
    let terminal = |status: agentlane_core::RunStatus| {
        ApiError::Conflict(format!(
            "run {id} already ended with status {}",
            status.as_str()
        ))
    };
    if run.status.is_terminal() {
        return Err(terminal(run.status));
    }
    let run = state
        .intake()
        .request_abort(&tenant, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id}")))?;
    if run.status.is_terminal() {
        return Err(terminal(run.status));
    }
    super::actions::wake_for_abort(&state, &run).await?;
    tracing::info!(run_id = %id, "abort requested");
    Ok((
        StatusCode::ACCEPTED,
        Json(AbortView {
            run_id: run.run_id,
            status: run.status,
            abort_requested: run.abort_requested,
        }),
    ))
}
