//! `/v1/cron/jobs`: scheduled, isolated agent turns (SPEC §9). Create, list, read, change,
//! delete, and fire now. Jobs belong to the caller's tenant: another tenant's ids answer 404.
//!
//! The handlers are here; the request bodies in [`bodies`], their checks in [`validate`], the
//! answers in [`views`].

mod bodies;
mod validate;
mod views;

use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{EmptyBody, read_json};
use agentlane_core::StoreError;
use agentlane_core::cron::{CronJob, JobId, Schedule};
use agentlane_scheduler::CompiledSchedule;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use bodies::{JobPatchBody, NewJobBody};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use validate::{
    check_message, check_name, check_schedule, invalid, job_id, not_found, parse_schedule,
};
use views::{FiredView, JobList, JobView};

/// Writes of a PATCH retried when the scheduler changed the job in between.
const PATCH_RETRIES: u32 = 4;

/// `POST /v1/cron/jobs` → 201 the job.
#[utoipa::path(post, path = "/v1/cron/jobs", operation_id = "createCronJob", tag = "cron",
    request_body = NewJobBody,
    responses(
        (status = 201, description = "The job", body = JobView,
            links(
                ("GetJob" = (operation_id = "getCronJob", parameters(("jobId" = "$response.body#/jobId")))),
                ("UpdateJob" = (operation_id = "updateCronJob", parameters(("jobId" = "$response.body#/jobId")))),
                ("RunJob" = (operation_id = "runCronJob", parameters(("jobId" = "$response.body#/jobId")))),
                ("DeleteJob" = (operation_id = "deleteCronJob", parameters(("jobId" = "$response.body#/jobId")))),
            )),
        (status = 409, description = "`conflict`: the tenant has as many jobs as allowed", body = ErrorBody),
    ))]
pub(crate) async fn create(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let body: NewJobBody = read_body(&state, &headers, body).await?;
    let now = state.clock.now_ms();
    check_name(&body.name)?;
    check_message(&body.message, &state)?;
    body.check_settings(&state, &tenant)?;
    let schedule = parse_schedule(&body.schedule)?;
    let compiled = check_schedule(&schedule, now)?;
    let enabled = body.enabled.unwrap_or(true);
    let job = CronJob {
        tenant: tenant.clone(),
        job_id: JobId::generate(),
        name: body.name,
        next_run_at: if enabled {
            compiled.next_after(now, now)
        } else {
            None
        },
        schedule,
        message: body.message,
        model: body.model,
        timeout_seconds: body.timeout_seconds,
        agent_id: body.agent_id.filter(|a| a != agentlane_core::MAIN_AGENT),
        budget: body.budget,
        enabled,
        delete_after_run: body.delete_after_run.unwrap_or(false),
        delivery: body.delivery,
        last_runs: Vec::new(),
        consecutive_errors: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
        anchor_at: now,
        version: 1,
    };
    match state
        .cron
        .create_job(&job, state.config.max_cron_jobs)
        .await
    {
        Ok(()) => {}
        Err(StoreError::Conflict(why)) => return Err(ApiError::Conflict(why)),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(job_id = %job.job_id, "cron job created");
    Ok((StatusCode::CREATED, Json(JobView::from(&job))))
}

/// `GET /v1/cron/jobs`.
#[utoipa::path(get, path = "/v1/cron/jobs", operation_id = "listCronJobs", tag = "cron",
    responses((status = 200, description = "The tenant's jobs", body = JobList)))]
pub(crate) async fn list(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
) -> Result<Json<JobList>, ApiError> {
    let jobs = state.cron.list_jobs(&tenant).await?;
    Ok(Json(JobList {
        jobs: jobs.iter().map(JobView::from).collect(),
    }))
}

/// `GET /v1/cron/jobs/{jobId}`.
#[utoipa::path(get, path = "/v1/cron/jobs/{jobId}", operation_id = "getCronJob", tag = "cron",
    params(("jobId" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 200, description = "The job", body = JobView)))]
pub(crate) async fn get(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    Path(raw): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(raw)?;
    let job = state
        .cron
        .get_job(&tenant, &id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(JobView::from(&job)))
}

/// `DELETE /v1/cron/jobs/{jobId}` → 204. Fires in flight run to their end; no new ones.
#[utoipa::path(delete, path = "/v1/cron/jobs/{jobId}", operation_id = "deleteCronJob", tag = "cron",
    params(("jobId" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 204, description = "Deleted")))]
pub(crate) async fn delete(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    Path(raw): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = job_id(raw)?;
    if state.cron.delete_job(&tenant, &id).await? {
        tracing::info!(job_id = %id, "cron job deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found())
    }
}

/// `PATCH /v1/cron/jobs/{jobId}`: any field. A new schedule counts from now; re-enabling does
/// not replay the slots missed while disabled.
#[utoipa::path(patch, path = "/v1/cron/jobs/{jobId}", operation_id = "updateCronJob", tag = "cron",
    params(("jobId" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    request_body = JobPatchBody,
    responses((status = 200, description = "The job", body = JobView)))]
pub(crate) async fn patch(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(raw)?;
    let body: JobPatchBody = read_body(&state, &headers, body).await?;
    if let Some(name) = &body.name {
        check_name(name)?;
    }
    if let Some(message) = &body.message {
        check_message(message, &state)?;
    }
    body.check_settings(&state, &tenant)?;
    let schedule = body.schedule.as_ref().map(parse_schedule).transpose()?;
    for _ in 0..=PATCH_RETRIES {
        let now = state.clock.now_ms();
        let job = state
            .cron
            .get_job(&tenant, &id)
            .await?
            .ok_or_else(not_found)?;
        let next = apply_patch(&job, &body, schedule.as_ref(), now)?;
        match state.cron.replace_job(&next, job.version).await {
            Ok(()) => return Ok(Json(JobView::from(&next))),
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(store_error(e)),
        }
    }
    Err(ApiError::Conflict(
        "the job kept changing while it was being updated; try again".into(),
    ))
}

/// A job body: JSON, within the body limit, not empty.
async fn read_body<T: DeserializeOwned>(
    state: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    read_json(
        headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await
}

/// The job after `patch` at `now`.
fn apply_patch(
    job: &CronJob,
    patch: &JobPatchBody,
    schedule: Option<&Schedule>,
    now: u64,
) -> Result<CronJob, ApiError> {
    let mut next = job.clone();
    if let Some(name) = &patch.name {
        next.name = name.clone();
    }
    if let Some(message) = &patch.message {
        next.message = message.clone();
    }
    if let Some(model) = &patch.model {
        next.model = Some(model.clone());
    }
    if let Some(budget) = patch.budget {
        next.budget = Some(budget).filter(|b| !b.is_unlimited());
    }
    if let Some(agent) = &patch.agent_id {
        next.agent_id = Some(agent.clone()).filter(|a| a != agentlane_core::MAIN_AGENT);
    }
    if let Some(t) = patch.timeout_seconds {
        next.timeout_seconds = Some(t);
    }
    if let Some(d) = patch.delete_after_run {
        next.delete_after_run = d;
    }
    if let Some(d) = &patch.delivery {
        next.delivery = Some(d.clone());
    }
    let rescheduled = match schedule {
        Some(s) => {
            next.schedule = s.clone();
            next.anchor_at = now;
            true
        }
        None => false,
    };
    let enabling = patch.enabled == Some(true) && !job.enabled;
    if let Some(enabled) = patch.enabled {
        next.enabled = enabled;
    }
    if enabling {
        next.consecutive_errors = 0;
        next.disabled_reason = None;
    }
    if rescheduled || enabling {
        let compiled = if rescheduled {
            check_schedule(&next.schedule, now)?
        } else {
            CompiledSchedule::compile(&next.schedule)
                .map_err(|e| invalid(format!("schedule: {e}")))?
        };
        next.next_run_at = compiled.next_after(next.anchor_at, now);
    }
    if !next.enabled {
        next.next_run_at = None;
    } else if enabling && next.next_run_at.is_none() {
        return Err(invalid(
            "the job has no time left to fire (a one-shot whose `at` passed): give it a new schedule",
        ));
    }
    next.updated_at = now;
    next.version = job.version + 1;
    Ok(next)
}

/// `POST /v1/cron/jobs/{jobId}/run` → 202 `{runId}`: one fire now, listed in `lastRuns` at once.
#[utoipa::path(post, path = "/v1/cron/jobs/{jobId}/run", operation_id = "runCronJob", tag = "cron",
    params(("jobId" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 202, description = "Fired now", body = FiredView)))]
pub(crate) async fn run_now(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    Path(raw): Path<String>,
) -> Result<(StatusCode, Json<FiredView>), ApiError> {
    let id = job_id(raw)?;
    let fired = agentlane_scheduler::fire_now(
        state.cron.as_ref(),
        state.store.as_ref(),
        state.queue.as_ref(),
        &tenant,
        &id,
        state.clock.now_ms(),
    )
    .await
    .map_err(|e| match e {
        agentlane_scheduler::SubmitError::Store(e) => store_error(e),
        agentlane_scheduler::SubmitError::Queue(e) => e.into(),
        agentlane_scheduler::SubmitError::NoRun => ApiError::Internal("fire without a run".into()),
    })?
    .ok_or_else(not_found)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(FiredView {
            job_id: id,
            run_id: fired.run_id,
            session_key: fired.session_key,
            fired_at: fired.fired_at,
        }),
    ))
}

/// A store error, a missing job answering [`not_found`].
fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound(_) => not_found(),
        other => other.into(),
    }
}
