//! `/v1/cron/jobs`: scheduled, isolated agent turns (SPEC §9). Create, list, read, change,
//! delete, and fire now. Jobs belong to the caller's tenant: another tenant's ids answer 404.

use crate::ApiState;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{EmptyBody, read_json};
use crate::validate::{check_model_allowed, validate_model};
use agentlane_core::cron::{CronJob, JobDelivery, JobId, JobRun, JobRunStatus, Schedule};
use agentlane_core::{RunId, SessionKey, StoreError};
use agentlane_scheduler::{CompiledSchedule, validate_new};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Longest job name.
const MAX_NAME_CHARS: usize = 200;
/// Largest `timeoutSeconds` (7 days).
const MAX_TIMEOUT_SECONDS: u64 = 7 * 24 * 3600;
/// Writes of a PATCH retried when the scheduler changed the job in between.
const PATCH_RETRIES: u32 = 4;

/// The body of `POST /v1/cron/jobs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewJobBody {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    #[schema(value_type = ScheduleInput)]
    pub schedule: Value,
    #[schema(min_length = 1)]
    pub message: String,
    #[serde(default)]
    pub model: Option<String>,
    /// Each fire's run timeout, at most 7 days; 0 = none.
    #[serde(default)]
    #[schema(maximum = 604800)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub delete_after_run: Option<bool>,
    #[serde(default)]
    pub delivery: Option<JobDelivery>,
}

/// The body of `PATCH /v1/cron/jobs/{jobId}`: any field of a job.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobPatchBody {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<ScheduleInput>)]
    pub schedule: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// Each fire's run timeout, at most 7 days; 0 = none.
    #[serde(default)]
    #[schema(maximum = 604800)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub delete_after_run: Option<bool>,
    #[serde(default)]
    pub delivery: Option<JobDelivery>,
}

/// A schedule as a request sends it: exactly one kind, nothing else (what [`parse_schedule`]
/// accepts; documentation only).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ScheduleInput {
    Cron(CronScheduleInput),
    Every(EveryScheduleInput),
    At(AtScheduleInput),
}

/// A cron expression: 5 fields (minute precision) or 6 (seconds first), in `tz` (an IANA
/// zone; UTC when absent).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CronScheduleInput {
    #[schema(min_length = 1)]
    cron: String,
    #[serde(default)]
    tz: Option<String>,
}

/// Every `everySeconds` seconds (≥ 1), from the job's creation or last schedule change.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct EveryScheduleInput {
    #[schema(minimum = 1)]
    every_seconds: u64,
}

/// Once, at an RFC 3339 time.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AtScheduleInput {
    #[schema(format = DateTime)]
    at: String,
}

/// A job as the API shows it (the webhook token is never shown).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub job_id: JobId,
    pub name: String,
    pub schedule: Schedule,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    pub enabled: bool,
    pub delete_after_run: bool,
    /// `{webhook: {url, hasToken}}`: the token itself is never shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<DeliveryView>)]
    pub delivery: Option<Value>,
    pub next_run_at: Option<u64>,
    pub last_runs: Vec<JobRunView>,
    pub consecutive_errors: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    pub created_at: u64,
    pub updated_at: u64,
}

/// One entry of `lastRuns`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRunView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<SessionKey>,
    #[schema(value_type = JobRunStatus)]
    pub status: &'static str,
    pub fired_at: u64,
    pub due_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
}

impl From<&JobRun> for JobRunView {
    fn from(r: &JobRun) -> Self {
        Self {
            run_id: r.run_id.clone(),
            session_key: r.session_key.clone(),
            status: r.status.as_str(),
            fired_at: r.fired_at,
            due_at: r.due_at,
            started_at: r.started_at,
            ended_at: r.ended_at,
            error: r.error.clone(),
            manual: r.manual,
        }
    }
}

impl From<&CronJob> for JobView {
    fn from(j: &CronJob) -> Self {
        Self {
            job_id: j.job_id.clone(),
            name: j.name.clone(),
            schedule: j.schedule.clone(),
            message: j.message.clone(),
            model: j.model.clone(),
            timeout_seconds: j.timeout_seconds,
            enabled: j.enabled,
            delete_after_run: j.delete_after_run,
            delivery: j.delivery.as_ref().map(|d| {
                serde_json::json!(DeliveryView {
                    webhook: WebhookView {
                        url: d.webhook.url.clone(),
                        has_token: d.webhook.token.is_some(),
                    },
                })
            }),
            next_run_at: if j.enabled { j.next_run_at } else { None },
            last_runs: j.last_runs.iter().map(JobRunView::from).collect(),
            consecutive_errors: j.consecutive_errors,
            disabled_reason: j.disabled_reason.clone(),
            created_at: j.created_at,
            updated_at: j.updated_at,
        }
    }
}

/// How a job's delivery is shown (documentation of [`JobView::delivery`]).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    pub webhook: WebhookView,
}

/// A webhook target as shown: whether it has a token, never the token.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookView {
    pub url: String,
    pub has_token: bool,
}

/// `GET /v1/cron/jobs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

/// The answer of `POST /v1/cron/jobs/{jobId}/run`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FiredView {
    pub job_id: JobId,
    pub run_id: Option<RunId>,
    pub session_key: Option<SessionKey>,
    pub fired_at: u64,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

fn not_found() -> ApiError {
    ApiError::not_found("cron job")
}

/// A job id from a path; malformed ids are unknown ones.
fn job_id(raw: String) -> Result<JobId, ApiError> {
    if raw.is_empty()
        || raw.len() > 128
        || !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(not_found());
    }
    Ok(JobId::new(raw))
}

/// `{cron, tz?}` | `{everySeconds}` | `{at}`, with a 400 naming what is wrong.
pub fn parse_schedule(value: &Value) -> Result<Schedule, ApiError> {
    let Some(object) = value.as_object() else {
        return Err(invalid(
            "schedule must be an object: {cron, tz?}, {everySeconds} or {at}",
        ));
    };
    let kinds: Vec<&str> = ["cron", "everySeconds", "at"]
        .into_iter()
        .filter(|k| object.contains_key(*k))
        .collect();
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "cron" | "tz" | "everySeconds" | "at"))
    {
        return Err(invalid(format!(
            "schedule: unknown field `{unknown}`, expected one of `cron` (+ `tz`), `everySeconds`, `at`"
        )));
    }
    let text = |name: &str| -> Result<String, ApiError> {
        object
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| invalid(format!("schedule.{name} must be a string")))
    };
    match kinds.as_slice() {
        ["cron"] => Ok(Schedule::Cron {
            cron: text("cron")?,
            tz: match object.get("tz") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text("tz")?),
            },
        }),
        [kind] if object.contains_key("tz") => Err(invalid(format!(
            "schedule.tz only goes with `cron`, not with `{kind}`"
        ))),
        ["everySeconds"] => {
            let raw = &object["everySeconds"];
            match raw.as_u64() {
                Some(n) => Ok(Schedule::Every { every_seconds: n }),
                None if raw.as_i64().is_some() || raw.as_f64().is_some() => {
                    Err(invalid("schedule.everySeconds must be a whole number ≥ 1"))
                }
                None => Err(invalid("schedule.everySeconds must be a number")),
            }
        }
        ["at"] => Ok(Schedule::At { at: text("at")? }),
        [] => Err(invalid(
            "schedule needs one of `cron` (+ `tz`), `everySeconds` or `at`",
        )),
        _ => Err(invalid(format!(
            "schedule has more than one kind ({}); give exactly one",
            kinds.join(", ")
        ))),
    }
}

fn check_schedule(schedule: &Schedule, now: u64) -> Result<CompiledSchedule, ApiError> {
    validate_new(schedule, now).map_err(|e| invalid(format!("schedule: {e}")))
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() {
        return Err(invalid("name must not be empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(invalid(format!(
            "name is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("name must not contain control characters"));
    }
    Ok(())
}

fn check_message(message: &str, state: &ApiState) -> Result<(), ApiError> {
    if message.is_empty() {
        return Err(invalid("message must not be empty"));
    }
    let max = state.config.max_message_bytes;
    if message.len() > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "message is {} bytes; the limit is {max}",
            message.len()
        )));
    }
    Ok(())
}

fn check_timeout(timeout: Option<u64>) -> Result<(), ApiError> {
    match timeout {
        Some(t) if t > MAX_TIMEOUT_SECONDS => Err(invalid(format!(
            "timeoutSeconds must be at most {MAX_TIMEOUT_SECONDS} (7 days); 0 means none"
        ))),
        _ => Ok(()),
    }
}

fn check_delivery(delivery: Option<&JobDelivery>) -> Result<(), ApiError> {
    let Some(d) = delivery else { return Ok(()) };
    let url = &d.webhook.url;
    let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
    if !scheme_ok || url.len() > 2048 || url.chars().any(char::is_whitespace) {
        return Err(invalid(format!(
            "delivery.webhook.url must be an http(s) URL, got {url:?}"
        )));
    }
    Ok(())
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound(_) => not_found(),
        other => other.into(),
    }
}

/// `POST /v1/cron/jobs` → 201 the job.
#[utoipa::path(post, path = "/v1/cron/jobs", operation_id = "createCronJob", tag = "cron",
    request_body = NewJobBody,
    responses(
        (status = 201, description = "The job", body = JobView,
            links(
                ("GetJob" = (operation_id = "getCronJob", parameters(("job_id" = "$response.body#/jobId")))),
                ("UpdateJob" = (operation_id = "updateCronJob", parameters(("job_id" = "$response.body#/jobId")))),
                ("RunJob" = (operation_id = "runCronJob", parameters(("job_id" = "$response.body#/jobId")))),
                ("DeleteJob" = (operation_id = "deleteCronJob", parameters(("job_id" = "$response.body#/jobId")))),
            )),
        (status = 409, description = "`conflict`: the tenant has as many jobs as allowed", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<Arc<crate::Shared>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let body: NewJobBody = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let now = state.clock.now_ms();
    check_name(&body.name)?;
    check_message(&body.message, &state)?;
    if let Some(model) = &body.model {
        validate_model(model, &state.config)?;
        check_model_allowed(model, &state.config, &tenant)?;
    }
    check_timeout(body.timeout_seconds)?;
    check_delivery(body.delivery.as_ref())?;
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
pub async fn list(
    State(state): State<Arc<crate::Shared>>,
    Tenant(tenant): Tenant,
) -> Result<Json<JobList>, ApiError> {
    let jobs = state.cron.list_jobs(&tenant).await?;
    Ok(Json(JobList {
        jobs: jobs.iter().map(JobView::from).collect(),
    }))
}

/// `GET /v1/cron/jobs/{jobId}`.
#[utoipa::path(get, path = "/v1/cron/jobs/{job_id}", operation_id = "getCronJob", tag = "cron",
    params(("job_id" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 200, description = "The job", body = JobView)))]
pub async fn get(
    State(state): State<Arc<crate::Shared>>,
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
#[utoipa::path(delete, path = "/v1/cron/jobs/{job_id}", operation_id = "deleteCronJob", tag = "cron",
    params(("job_id" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 204, description = "Deleted")))]
pub async fn delete(
    State(state): State<Arc<crate::Shared>>,
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
#[utoipa::path(patch, path = "/v1/cron/jobs/{job_id}", operation_id = "updateCronJob", tag = "cron",
    params(("job_id" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    request_body = JobPatchBody,
    responses((status = 200, description = "The job", body = JobView)))]
pub async fn patch(
    State(state): State<Arc<crate::Shared>>,
    Tenant(tenant): Tenant,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(raw)?;
    let body: JobPatchBody = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    if let Some(name) = &body.name {
        check_name(name)?;
    }
    if let Some(message) = &body.message {
        check_message(message, &state)?;
    }
    if let Some(model) = &body.model {
        validate_model(model, &state.config)?;
        check_model_allowed(model, &state.config, &tenant)?;
    }
    check_timeout(body.timeout_seconds)?;
    check_delivery(body.delivery.as_ref())?;
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
#[utoipa::path(post, path = "/v1/cron/jobs/{job_id}/run", operation_id = "runCronJob", tag = "cron",
    params(("job_id" = String, Path, description = "A cron job id", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")),
    responses((status = 202, description = "Fired now", body = FiredView)))]
pub async fn run_now(
    State(state): State<Arc<crate::Shared>>,
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
