//! `GET /v1/sessions` (a tenant's sessions), `GET /v1/runs?sessionKey=` (a session's runs) and
//! `DELETE /v1/sessions/{sessionKey}` (a session and everything of it), issue 24. The lists
//! come from the store's indexes ([`agentlane_core::SessionCatalog`]), never from a scan.

use super::sessions::session_key;
use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::page;
use crate::request_context::fingerprint;
use crate::views::{RunsView, SessionView, SessionsView, run_view};
use agentlane_core::backoff::jittered;
use agentlane_core::{RunStatus, SessionCursor, SessionFilter, SessionKey, SessionStatus};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Default page size of the session and run lists.
pub(crate) const DEFAULT_LIST_PAGE: usize = 100;
/// Largest page size of the session and run lists.
pub(crate) const MAX_LIST_PAGE: usize = 1000;

/// `limit` checked against 1..=[`MAX_LIST_PAGE`].
fn list_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIST_PAGE),
        Some(n) if (1..=MAX_LIST_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::InvalidRequest(format!(
            "limit is {n}; use 1-{MAX_LIST_PAGE}"
        ))),
    }
}

/// Query of `GET /v1/sessions`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct SessionsQuery {
    /// Only the sessions of this agent (`main`: also those from before agents).
    #[param(min_length = 1, max_length = 64)]
    pub agent_id: Option<String>,
    /// Only the sessions in this status: `idle` or `processing`.
    #[param(inline)]
    pub status: Option<SessionStatus>,
    /// The `next` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// The tenant's sessions, newest activity (`updatedAt`) first: at most `limit`, and at most
/// `max_page_bytes` of JSON; `next` continues (pass it as `cursor`), `null` at the end.
#[utoipa::path(get, path = "/v1/sessions", operation_id = "listSessions", tag = "sessions",
    params(SessionsQuery),
    responses(
        (status = 200, description = "A page of sessions, newest activity first", body = SessionsView),
        (status = 400, description = "`invalid_request`: a malformed cursor, status or limit", body = ErrorBody),
    ))]
pub(crate) async fn list_sessions(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<SessionsQuery>,
) -> Result<Json<SessionsView>, ApiError> {
    let limit = list_limit(query.limit)?;
    let after = match query.cursor.as_deref() {
        None | Some("") => None,
        Some(token) => Some(SessionCursor::decode(token).ok_or_else(|| {
            ApiError::InvalidRequest("cursor is not a `next` of this list".into())
        })?),
    };
    let filter = SessionFilter {
        agent_id: query.agent_id.filter(|a| !a.is_empty()),
        status: query.status,
    };
    let found = state
        .catalog
        .list_sessions(
            &tenant,
            &filter,
            after.as_ref(),
            page::budget(limit, state.config.limits.max_page_bytes),
        )
        .await?;
    let now = state.clock.now_ms();
    let views: Vec<SessionView> = found
        .sessions
        .iter()
        .map(|s| SessionView::of(s, now))
        .collect();
    let kept = page::fit(views, state.config.limits.max_page_bytes);
    // A page the answer's own byte rule cut goes on after the last session it kept.
    let next = if kept.len() < found.sessions.len() {
        kept.len()
            .checked_sub(1)
            .and_then(|last| found.sessions.get(last))
            .map(SessionCursor::after)
    } else {
        found.next
    };
    Ok(Json(SessionsView {
        sessions: kept,
        next: next.map(|c| c.encode()),
    }))
}

/// Query of `GET /v1/runs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct RunsQuery {
    /// The session whose runs to list.
    #[param(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")]
    pub session_key: String,
    /// Only the runs in this status.
    #[param(inline)]
    pub status: Option<RunStatus>,
    /// Runs numbered below this `sessionSeq` (the `next` of the previous page).
    #[param(minimum = 0)]
    pub before: Option<u64>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// The runs of a session key (every session id it had), newest first (`sessionSeq`
/// descending): at most `limit`, and at most `max_page_bytes` of JSON; `next` continues (pass
/// it as `before`), `null` at the end. Internals (`checkpoint`, `requestFingerprint`) are left
/// out as in `GET /v1/runs/{runId}`.
#[utoipa::path(get, path = "/v1/runs", operation_id = "listRuns", tag = "runs",
    params(RunsQuery),
    responses(
        (status = 200, description = "A page of the session's runs, newest first", body = RunsView),
        (status = 400, description = "`invalid_request`: no `sessionKey`, or a malformed one", body = ErrorBody),
    ))]
pub(crate) async fn list_runs(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<Json<RunsView>, ApiError> {
    let limit = list_limit(query.limit)?;
    let key = session_key(query.session_key)?;
    let found = state
        .catalog
        .list_session_runs(
            &tenant,
            &key,
            query.status,
            query.before,
            page::budget(limit, state.config.limits.max_page_bytes),
        )
        .await?;
    let mut views = Vec::with_capacity(found.runs.len());
    for run in &found.runs {
        let mut view = run_view(run).map_err(|e| ApiError::Internal(format!("run view: {e}")))?;
        if let Some(object) = view.as_object_mut() {
            for internal in super::runs::INTERNAL_FIELDS {
                object.remove(*internal);
            }
        }
        views.push(view);
    }
    let kept = page::fit(views, state.config.limits.max_page_bytes);
    let next = if kept.len() < found.runs.len() {
        kept.len()
            .checked_sub(1)
            .and_then(|last| found.runs.get(last))
            .map(|r| r.session_seq)
    } else {
        found.next
    };
    Ok(Json(RunsView { runs: kept, next }))
}

/// Deletes the session and everything of it on the store: its transcript (every session id
/// the key had), runs, events, idempotency records, pending steers and queued turns. A running
/// turn is aborted first, and the delete waits for it to release the session (up to
/// `reset_wait_ms`, as a reset); `409 session_busy` if it does not. `204`, then `404`.
#[utoipa::path(delete, path = "/v1/sessions/{sessionKey}", operation_id = "deleteSession", tag = "sessions",
    params(("sessionKey" = String, Path, description = "A session key: 1-256 characters of `[A-Za-z0-9:._@/-]`, one path segment (send `/` as `%2F`)", min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")),
    responses(
        (status = 204, description = "The session and all its data are deleted"),
        (status = 404, description = "`not_found`: the tenant has no such session", body = ErrorBody),
        (status = 409, description = "`session_busy`: a running turn kept the session lock", body = ErrorBody),
    ))]
pub(crate) async fn delete_session(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let key = session_key(raw)?;
    let session = state
        .history()
        .get_session(&tenant, &key)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("session {key}")))?;
    if let Some(run_id) = &session.active_run_id
        && let Some(run) = state.intake().request_abort(&tenant, run_id).await?
        && !run.status.is_terminal()
    {
        super::actions::wake_for_abort(&state, &run).await?;
    }
    let removed = delete_when_free(&state, &tenant, &key).await?;
    tracing::info!(
        session = %fingerprint(key.as_str()),
        runs = removed.runs,
        events = removed.events,
        entries = removed.transcript_entries,
        "session deleted"
    );
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes the session once no writer holds its lock, trying again with a growing pause while
/// one does, until the reset wait (within the request's timeout) is over.
async fn delete_when_free(
    state: &Shared,
    tenant: &agentlane_core::TenantId,
    key: &SessionKey,
) -> Result<agentlane_core::SessionRemoval, ApiError> {
    let wait = Duration::from_millis(state.config.reset_wait_ms.min(state.config.max_wait_ms)).min(
        state
            .config
            .limits
            .request_timeout()
            .saturating_sub(Duration::from_secs(1)),
    );
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(50);
    loop {
        let now = state.clock.now_ms();
        match state.catalog.delete_session(tenant, key, now).await {
            Ok(Some(removed)) => return Ok(removed),
            Ok(None) => return Err(ApiError::not_found(format!("session {key}"))),
            Err(agentlane_core::StoreError::Busy)
                if tokio::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(jittered(pause)).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(agentlane_core::StoreError::Busy) => {
                return Err(ApiError::SessionBusy(format!(
                    "session {key} is still locked by a running turn (aborted) after {} ms; \
                     retry the delete",
                    wait.as_millis()
                )));
            }
            Err(other) => return Err(other.into()),
        }
    }
}
