//! Jobs as `/v1/cron/jobs` answers them.

use agentlane_core::cron::{CronJob, JobId, JobRun, JobRunStatus, Schedule};
use agentlane_core::{RunId, SessionKey};
use serde::Serialize;
use serde_json::Value;

/// A job as the API shows it (the webhook token is never shown).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobView {
    pub job_id: JobId,
    pub name: String,
    pub schedule: Schedule,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The agent each fire runs.
    pub agent_id: String,
    /// Each fire's spend limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<agentlane_core::spend::RunBudget>,
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
pub(crate) struct JobRunView {
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
            agent_id: j
                .agent_id
                .clone()
                .unwrap_or_else(|| agentlane_core::MAIN_AGENT.to_owned()),
            budget: j.budget,
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
pub(super) struct DeliveryView {
    pub webhook: WebhookView,
}

/// A webhook target as shown: whether it has a token, never the token.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct WebhookView {
    pub url: String,
    pub has_token: bool,
}

/// `GET /v1/cron/jobs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct JobList {
    pub jobs: Vec<JobView>,
}

/// The answer of `POST /v1/cron/jobs/{jobId}/run`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FiredView {
    pub job_id: JobId,
    pub run_id: Option<RunId>,
    pub session_key: Option<SessionKey>,
    pub fired_at: u64,
}
