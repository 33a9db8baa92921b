//! Cron jobs (SPEC §9): scheduled, isolated agent turns, and the [`CronStore`] seam that keeps
//! them.
//!
//! A job belongs to a tenant. Every write of a job is conditional on the version read before it
//! ([`CronStore::replace_job`]), so two schedulers that both see a slot due cannot both claim it:
//! the second write finds a newer version and answers `Conflict`. The schedule math and the
//! ticker live in `agentlane-scheduler`; this module holds only the records and the seam.

use crate::ids::{RunId, SessionKey, TenantId};
use crate::store::StoreResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Default per-tenant cap on jobs.
pub const DEFAULT_MAX_JOBS_PER_TENANT: u32 = 1_000;
/// Runs kept in a job's history (`lastRuns`), newest first.
pub const MAX_LAST_RUNS: usize = 20;
/// Default job timeout when the job names none (60 min); `timeoutSeconds: 0` means none.
pub const DEFAULT_JOB_TIMEOUT_SECONDS: u64 = 3_600;

/// A job's id (`job_…`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct JobId(String);

impl JobId {
    /// Wraps an id.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// A fresh, time-ordered job id.
    pub fn generate() -> Self {
        Self(format!("job_{}", uuid::Uuid::now_v7().simple()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The session key of one fire of this job: `cron:<jobId>:<runId>` (a fresh session each
    /// fire).
    pub fn session_key(&self, run_id: &RunId) -> SessionKey {
        SessionKey::new(format!("cron:{}:{}", self.0, run_id.as_str()))
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// When a job fires. Serialised as the API writes it: `{cron, tz?}`, `{everySeconds}` or
/// `{at}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum Schedule {
    /// A cron expression: 5 fields (minute precision) or 6 (with seconds first), in `tz` (an
    /// IANA zone, UTC when absent).
    Cron {
        /// The expression, e.g. `0 9 * * 1-5`.
        cron: String,
        /// The IANA time zone it is read in (`Europe/Paris`); `None`: UTC.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tz: Option<String>,
    },
    /// Every `everySeconds`, counted from the job's anchor (its creation or last schedule
    /// change).
    Every {
        /// The interval in seconds (at least 1).
        #[serde(rename = "everySeconds")]
        every_seconds: u64,
    },
    /// Once, at an RFC 3339 time.
    At {
        /// The time to fire, RFC 3339 (`2026-12-24T18:00:00Z`).
        at: String,
    },
}

impl Schedule {
    /// A one-shot schedule (`at`).
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Schedule::At { .. })
    }
}

/// Where a job's final payloads are POSTed after each run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct JobDelivery {
    /// The webhook each run's final payloads are POSTed to.
    pub webhook: WebhookTarget,
}

/// A webhook endpoint and its optional bearer token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WebhookTarget {
    /// An http(s) URL (at most 2048 characters, no whitespace).
    #[cfg_attr(
        feature = "utoipa",
        schema(max_length = 2048, pattern = r"^https?://\S+$")
    )]
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The state of one entry of a job's run history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum JobRunStatus {
    /// Claimed and accepted; not picked up yet.
    Queued,
    /// Its run was picked up and is running.
    Running,
    /// The fired run waits for a client tool's output or an approval.
    RequiresAction,
    /// Its run ended `ok`.
    Ok,
    /// Its run ended `error`.
    Error,
    /// Its run ended `aborted`.
    Aborted,
    /// The job's timeout passed (counted from the fire).
    Timeout,
    /// The slot came due while the previous fire still ran: nothing was fired.
    Skipped,
}

impl JobRunStatus {
    /// Whether the entry will not change any more.
    pub fn is_final(self) -> bool {
        match self {
            JobRunStatus::Queued | JobRunStatus::Running | JobRunStatus::RequiresAction => false,
            JobRunStatus::Ok
            | JobRunStatus::Error
            | JobRunStatus::Aborted
            | JobRunStatus::Timeout
            | JobRunStatus::Skipped => true,
        }
    }

    /// The status as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobRunStatus::Queued => "queued",
            JobRunStatus::Running => "running",
            JobRunStatus::RequiresAction => "requires_action",
            JobRunStatus::Ok => "ok",
            JobRunStatus::Error => "error",
            JobRunStatus::Aborted => "aborted",
            JobRunStatus::Timeout => "timeout",
            JobRunStatus::Skipped => "skipped",
        }
    }
}

/// One fire of a job (or one skipped slot), as listed in `lastRuns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRun {
    /// The run fired (absent for a skipped slot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The fresh session of the fire, `cron:<jobId>:<runId>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<SessionKey>,
    /// Where the fire stands; mirrors its run's status.
    pub status: JobRunStatus,
    /// When the fire was claimed (ms since epoch).
    pub fired_at: u64,
    /// The slot the fire was for (ms since epoch); the fire time for a manual run.
    pub due_at: u64,
    /// When its run started (ms since the epoch); `None` until picked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// When its run ended (ms since the epoch); `None` until it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// Why the run did not end `ok` (`<code>: <message>`); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Fired by `POST /v1/cron/jobs/{id}/run` rather than by the schedule.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
    /// When the scheduler asked the run to abort at its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_requested_at: Option<u64>,
}

/// A scheduled job and its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJob {
    /// The tenant that owns the job; another tenant never sees it.
    pub tenant: TenantId,
    /// The job's id (`job_…`).
    pub job_id: JobId,
    /// A label for people (not unique); not used by the scheduler.
    pub name: String,
    /// When the job fires.
    pub schedule: Schedule,
    /// The message each fire sends.
    pub message: String,
    /// `provider/model`; the deployment default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Run timeout counted from the fire; `None` = [`DEFAULT_JOB_TIMEOUT_SECONDS`], 0 = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The agent each fire runs (`None`: `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Each fire's spend limits (its agent's fill what is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::spend::RunBudget>,
    /// Whether the job fires; disabled jobs keep their history but never replay missed fires.
    pub enabled: bool,
    /// A one-shot job is deleted after its run succeeds (else disabled).
    #[serde(default)]
    pub delete_after_run: bool,
    /// Where each run's final payloads are POSTed; `None`: nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<JobDelivery>,
    /// The next slot (ms since epoch); `None` while disabled or when nothing is left to fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<u64>,
    /// Newest first, at most [`MAX_LAST_RUNS`] (fires still in flight are never dropped).
    #[serde(default)]
    pub last_runs: Vec<JobRun>,
    /// Failed runs in a row (`error`, `timeout`); reset by an `ok`. At 10 the job is disabled.
    #[serde(default)]
    pub consecutive_errors: u32,
    /// Why the job was disabled by the scheduler (failures in a row, a failed one-shot, a schedule
    /// error); `None` when enabled or disabled by the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// When the job was created (ms since the epoch).
    pub created_at: u64,
    /// When the job last changed (ms since the epoch).
    pub updated_at: u64,
    /// Where `everySeconds` counts from (creation, or the last schedule change).
    pub anchor_at: u64,
    /// Grows by one with every write; each write is conditional on the version read.
    pub version: u64,
}

impl CronJob {
    /// The timeout of each fire in seconds (`None` = none).
    pub fn effective_timeout_seconds(&self) -> Option<u64> {
        match self.timeout_seconds {
            Some(0) => None,
            Some(s) => Some(s),
            None => Some(DEFAULT_JOB_TIMEOUT_SECONDS),
        }
    }

    /// Fires still queued or running.
    pub fn in_flight(&self) -> impl Iterator<Item = &JobRun> {
        self.last_runs.iter().filter(|r| !r.status.is_final())
    }

    /// When a scheduler must look at the job next: its next slot, or now-ish while a fire is in
    /// flight (its end must be recorded). `None` = never (disabled, nothing running). This is
    /// the key of the due index.
    pub fn due_at(&self) -> Option<u64> {
        let watch = self.in_flight().map(|r| r.fired_at).min();
        let next = if self.enabled { self.next_run_at } else { None };
        match (watch, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Puts `run` first and trims the history to [`MAX_LAST_RUNS`], dropping the oldest final
    /// entries first (in-flight fires stay so their end can be recorded).
    pub fn push_run(&mut self, run: JobRun) {
        self.last_runs.insert(0, run);
        while self.last_runs.len() > MAX_LAST_RUNS {
            match self.last_runs.iter().rposition(|r| r.status.is_final()) {
                Some(i) => {
                    self.last_runs.remove(i);
                }
                None => break,
            }
        }
    }
}

/// Persistent cron jobs. Keys start with the tenant, like every other record; only
/// [`CronStore::due_jobs`] reads across tenants (through the due index, never a scan).
#[async_trait]
pub trait CronStore: Send + Sync + 'static {
    /// Creates `job` (version as given) unless the tenant already has `max_jobs` jobs
    /// (`Conflict` naming the cap) or the id is taken (`Conflict`).
    async fn create_job(&self, job: &CronJob, max_jobs: u32) -> StoreResult<()>;

    /// One job of a tenant.
    async fn get_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<Option<CronJob>>;

    /// Every job of a tenant, by id.
    async fn list_jobs(&self, tenant: &TenantId) -> StoreResult<Vec<CronJob>>;

    /// Replaces the job if its stored version is still `expected_version` (`Conflict`
    /// otherwise, `NotFound` when it is gone). `job.version` is what gets stored: callers set it
    /// to `expected_version + 1`. This is how a fire is claimed.
    async fn replace_job(&self, job: &CronJob, expected_version: u64) -> StoreResult<()>;

    /// Deletes the job; `false` when there was none.
    async fn delete_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<bool>;

    /// Jobs of every tenant whose [`CronJob::due_at`] is at or before `until`, earliest first,
    /// at most `limit`.
    async fn due_jobs(&self, until: u64, limit: usize) -> StoreResult<Vec<CronJob>>;

    /// A finished fire's session (its record and transcript) may go after `keep_until` (ms
    /// since epoch); the run record stays, so `lastRuns` ids still resolve. DynamoDB: TTL on the
    /// items; SQLite: remembered and deleted by [`CronStore::prune_fires`].
    async fn retire_fire(
        &self,
        tenant: &TenantId,
        session_key: &SessionKey,
        keep_until: u64,
    ) -> StoreResult<()>;

    /// Deletes the sessions of retired fires whose time has come; how many. Backends whose
    /// storage expires items by itself (DynamoDB TTL) do nothing.
    async fn prune_fires(&self, _now: u64) -> StoreResult<u64> {
        Ok(0)
    }
}

/// How long a finished fire's session is kept (24 h).
pub const FIRE_SESSION_RETENTION_MS: u64 = 24 * 3600 * 1000;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn job() -> CronJob {
        CronJob {
            tenant: TenantId::new("t"),
            job_id: JobId::new("job_1"),
            name: "n".into(),
            schedule: Schedule::Every { every_seconds: 5 },
            message: "m".into(),
            model: None,
            timeout_seconds: None,
            agent_id: None,
            budget: None,
            enabled: true,
            delete_after_run: false,
            delivery: None,
            next_run_at: Some(1_000),
            last_runs: Vec::new(),
            consecutive_errors: 0,
            disabled_reason: None,
            created_at: 0,
            updated_at: 0,
            anchor_at: 0,
            version: 1,
        }
    }

    fn entry(status: JobRunStatus, fired_at: u64) -> JobRun {
        JobRun {
            run_id: Some(RunId::new(format!("run_{fired_at}"))),
            session_key: None,
            status,
            fired_at,
            due_at: fired_at,
            started_at: None,
            ended_at: None,
            error: None,
            manual: false,
            abort_requested_at: None,
        }
    }

    #[test]
    fn schedules_serialise_as_the_api_writes_them() {
        let cases = [
            (
                serde_json::json!({"cron": "*/5 * * * *", "tz": "Europe/Paris"}),
                Schedule::Cron {
                    cron: "*/5 * * * *".into(),
                    tz: Some("Europe/Paris".into()),
                },
            ),
            (
                serde_json::json!({"everySeconds": 2}),
                Schedule::Every { every_seconds: 2 },
            ),
            (
                serde_json::json!({"at": "2030-01-01T00:00:00Z"}),
                Schedule::At {
                    at: "2030-01-01T00:00:00Z".into(),
                },
            ),
        ];
        for (json, schedule) in cases {
            assert_eq!(
                serde_json::from_value::<Schedule>(json.clone()).unwrap(),
                schedule
            );
            assert_eq!(serde_json::to_value(&schedule).unwrap(), json);
        }
    }

    #[test]
    fn due_at_watches_in_flight_fires_even_when_disabled() {
        let mut j = job();
        assert_eq!(j.due_at(), Some(1_000));
        j.push_run(entry(JobRunStatus::Running, 400));
        assert_eq!(j.due_at(), Some(400));
        j.enabled = false;
        assert_eq!(j.due_at(), Some(400));
        j.last_runs[0].status = JobRunStatus::Ok;
        assert_eq!(j.due_at(), None);
    }

    #[test]
    fn history_keeps_twenty_and_never_drops_a_fire_in_flight() {
        let mut j = job();
        j.push_run(entry(JobRunStatus::Running, 0));
        for t in 1..=30 {
            j.push_run(entry(JobRunStatus::Skipped, t));
        }
        assert_eq!(j.last_runs.len(), MAX_LAST_RUNS);
        assert_eq!(j.last_runs[0].fired_at, 30, "newest first");
        assert_eq!(
            j.last_runs.last().map(|r| r.status),
            Some(JobRunStatus::Running),
            "the running fire is kept"
        );
        assert_eq!(j.last_runs[MAX_LAST_RUNS - 2].fired_at, 12);
    }

    #[test]
    fn timeouts_default_to_an_hour_and_zero_means_none() {
        let mut j = job();
        assert_eq!(j.effective_timeout_seconds(), Some(3_600));
        j.timeout_seconds = Some(0);
        assert_eq!(j.effective_timeout_seconds(), None);
        j.timeout_seconds = Some(5);
        assert_eq!(j.effective_timeout_seconds(), Some(5));
    }
}
