//! `GET /v1/sessions/{key}`, its transcript, and reset.

use super::runs::page_limit;
use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery, EmptyBody, read_json};
use crate::page;
use crate::request_context::fingerprint;
use crate::views::{SessionView, TranscriptView};
use agentlane_core::backoff::jittered;
use agentlane_core::validate::validate_session_key;
use agentlane_core::{Session, SessionId, SessionKey, StoreError, TenantId};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Longest `sessionId` query value worth a lookup.
const MAX_SESSION_ID_LEN: usize = 128;

pub(crate) fn session_key(raw: String) -> Result<SessionKey, ApiError> {
    validate_session_key(&raw).map_err(ApiError::InvalidRequest)?;
    Ok(SessionKey::new(raw))
}

async fn load_session(
    state: &Shared,
    tenant: &TenantId,
    key: &SessionKey,
) -> Result<Session, ApiError> {
    state
        .history()
        .get_session(tenant, key)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("session {key}")))
}

/// Session metadata: current id, status, lane, counters, lock state.
#[utoipa::path(get, path = "/v1/sessions/{sessionKey}", operation_id = "getSession", tag = "sessions",
    params(("sessionKey" = String, Path, description = "A session key: 1-256 characters of `[A-Za-z0-9:._@/-]`, one path segment (send `/` as `%2F`)", min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")),
    responses((status = 200, description = "The session", body = SessionView)))]
pub(crate) async fn get_session(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<SessionView>, ApiError> {
    let key = session_key(raw)?;
    let session = load_session(&state, &tenant, &key).await?;
    let now = state.clock.now_ms();
    let mut view = SessionView::of(&session, now);
    view.diagnostic = diagnose(&state, &session, now).await;
    Ok(Json(view))
}

/// The supervisor's diagnostic of a session (thresholds from `AGENTLANE_STUCK_WARN_MS` /
/// `AGENTLANE_STUCK_ABORT_MS`): a processing session's, or an idle one's with queued work and
/// no active run (`session.stuck`, issue 11); `None` when healthy, or its run cannot be read.
async fn diagnose(
    state: &Shared,
    session: &agentlane_core::Session,
    now: u64,
) -> Option<agentlane_supervisor::Diagnostic> {
    let thresholds = agentlane_supervisor::Thresholds::from_lookup(|n| std::env::var(n).ok())
        .unwrap_or_default();
    if session.status != agentlane_core::SessionStatus::Processing {
        return agentlane_supervisor::classify_pending(session, now, &thresholds);
    }
    let run = match &session.active_run_id {
        Some(id) => state
            .store
            .get_run(&session.tenant, id)
            .await
            .ok()
            .flatten(),
        None => None,
    };
    agentlane_supervisor::classify(session, run.as_ref(), now, &thresholds)
}

/// Query of the transcript route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct TranscriptQuery {
    /// An earlier session id of the key (default: the current one).
    #[param(min_length = 1, max_length = 128)]
    pub session_id: Option<String>,
    /// Entries after this `seq` (the `next` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<u64>,
    /// Page size, 1-5000 (default 1000).
    #[param(minimum = 1, maximum = 5000)]
    pub limit: Option<usize>,
}

/// Transcript entries of the current session id (or of `sessionId`), in order: at most
/// `limit`, and at most `max_page_bytes` of JSON; `next` continues (pass it as `after`).
#[utoipa::path(get, path = "/v1/sessions/{sessionKey}/transcript", operation_id = "getTranscript", tag = "sessions",
    params(("sessionKey" = String, Path, description = "A session key: 1-256 characters of `[A-Za-z0-9:._@/-]`, one path segment (send `/` as `%2F`)", min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$"), TranscriptQuery),
    responses((status = 200, description = "A page of transcript entries", body = TranscriptView)))]
pub(crate) async fn transcript(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<TranscriptQuery>,
) -> Result<Json<TranscriptView>, ApiError> {
    let key = session_key(raw)?;
    let limit = page_limit(query.limit)?;
    let session = load_session(&state, &tenant, &key).await?;
    let session_id = match query.session_id {
        None => session.session_id,
        Some(id) if id.is_empty() || id.len() > MAX_SESSION_ID_LEN => {
            return Err(ApiError::InvalidRequest(format!(
                "sessionId must be 1-{MAX_SESSION_ID_LEN} characters"
            )));
        }
        Some(id) => SessionId::new(id),
    };
    let entries = state
        .history()
        .read_transcript_page(
            &tenant,
            &session_id,
            query.after,
            page::budget(limit, state.config.limits.max_page_bytes),
        )
        .await?;
    let entries = page::fit(entries, state.config.limits.max_page_bytes);
    let next = entries.last().map(|e| e.seq).or(query.after);
    Ok(Json(TranscriptView {
        session_key: key,
        session_id,
        entries,
        next,
    }))
}

/// The body of `PATCH /v1/sessions/{key}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PatchSessionBody {
    /// A mode name or alias sets the session's default queue mode; `null` clears it
    /// (`followup` again); absent leaves it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable = true, example = "steer")]
    queue_mode: Option<serde_json::Value>,
}

/// A field that is present, `null` included (`Option` alone reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

/// Sets the session's default queue mode (SPEC §2): the mode of a turn accepted without one.
/// `404` for a key without a session.
#[utoipa::path(patch, path = "/v1/sessions/{sessionKey}", operation_id = "patchSession", tag = "sessions",
    params(("sessionKey" = String, Path, description = "A session key: 1-256 characters of `[A-Za-z0-9:._@/-]`, one path segment (send `/` as `%2F`)", min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")),
    request_body = PatchSessionBody,
    responses((status = 200, description = "The session, with its default queue mode", body = SessionView)))]
pub(crate) async fn patch_session(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<SessionView>, ApiError> {
    let key = session_key(raw)?;
    let PatchSessionBody { queue_mode } = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::AsEmptyObject,
    )
    .await?;
    let mode = match queue_mode {
        None => {
            return Ok(Json(SessionView::of(
                &load_session(&state, &tenant, &key).await?,
                state.clock.now_ms(),
            )));
        }
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(name)) => {
            Some(crate::validate::parse_queue_mode_name(&name)?)
        }
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "queueMode must be a mode name or null, not {other}"
            )));
        }
    };
    let now = state.clock.now_ms();
    let session = match state
        .intake()
        .set_queue_mode(&tenant, &key, mode, now)
        .await
    {
        Ok(session) => session,
        Err(StoreError::NotFound(_)) => return Err(ApiError::not_found(format!("session {key}"))),
        Err(other) => return Err(other.into()),
    };
    Ok(Json(SessionView::of(&session, now)))
}

/// The (empty) body of a reset.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetBody {}

/// Gives the key a new session id (OpenClaw's `/new`). A writer like the runner: it waits for
/// a running turn to release the session lock (up to `reset_wait_ms`, then 409
/// `session_busy`), and takes it for the one write that swaps the id. Runs accepted before
/// the reset keep the old id and end `aborted` (`session_reset`) when their message comes.
#[utoipa::path(post, path = "/v1/sessions/{sessionKey}/reset", operation_id = "resetSession", tag = "sessions",
    params(("sessionKey" = String, Path, description = "A session key: 1-256 characters of `[A-Za-z0-9:._@/-]`, one path segment (send `/` as `%2F`)", min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")),
    request_body(content = Option<ResetBody>, description = "Empty, or `{}`"),
    responses(
        (status = 200, description = "The session, with a new session id", body = SessionView),
        (status = 409, description = "`session_busy`: a running turn kept the session lock", body = ErrorBody),
    ))]
pub(crate) async fn reset(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<SessionView>, ApiError> {
    let key = session_key(raw)?;
    let ResetBody {} = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::AsEmptyObject,
    )
    .await?;
    // Within the request's own timeout, with a second to answer.
    let wait = Duration::from_millis(state.config.reset_wait_ms.min(state.config.max_wait_ms)).min(
        state
            .config
            .limits
            .request_timeout()
            .saturating_sub(Duration::from_secs(1)),
    );
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(50);
    let session = loop {
        let now = state.clock.now_ms();
        match state
            .intake()
            .reset_session(&tenant, &key, SessionId::generate(), now)
            .await
        {
            Ok(session) => break session,
            Err(StoreError::NotFound(_)) => {
                return Err(ApiError::not_found(format!("session {key}")));
            }
            Err(StoreError::Busy) if tokio::time::Instant::now() + pause < deadline => {
                tokio::time::sleep(jittered(pause)).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(other) => return Err(ApiError::from(other)),
        }
    };
    let now = state.clock.now_ms();
    tracing::info!(
        session = %fingerprint(key.as_str()),
        generation = session.generation,
        "session reset"
    );
    Ok(Json(SessionView::of(&session, now)))
}
