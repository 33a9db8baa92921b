//! The request bodies of `/v1/cron/jobs` and the schedule forms they accept.

use super::validate::check_settings;
#[cfg(doc)]
use super::validate::parse_schedule;
use crate::ApiState;
use crate::error::ApiError;
use agentlane_core::TenantId;
use agentlane_core::cron::JobDelivery;
use serde::Deserialize;
use serde_json::Value;

/// Declares a job body: its own fields, then the settings both bodies take, each optional (in
/// a `PATCH`, absent = unchanged). `deny_unknown_fields` rules out `#[serde(flatten)]`.
macro_rules! job_body {
    ($(#[$attr:meta])* $vis:vis struct $name:ident { $($own:tt)* }) => {
        $(#[$attr])*
        $vis struct $name {
            $($own)*
            /// `provider/model`, one the tenant may use (the agent's when absent).
            #[serde(default)]
            #[schema(max_length = 256, pattern = r"^[A-Za-z0-9_.-]+/[^\s\x00-\x1f\x7f-\x9f]+$")]
            pub model: Option<String>,
            /// Each fire's run timeout, checked like a turn's: at most
            /// `max_run_timeout_seconds` (7 days by default); 0 = none, only where unlimited
            /// runs are allowed; 60 min when absent.
            #[serde(default)]
            #[schema(maximum = 604800)]
            pub timeout_seconds: Option<u64>,
            /// The agent each fire runs (`main` when absent).
            #[serde(default)]
            #[schema(min_length = 1, max_length = 64, pattern = r"^[a-z0-9][a-z0-9-]{0,63}$")]
            pub agent_id: Option<String>,
            /// Each fire's spend limits over all its model calls (the agent's fill what is
            /// unset).
            #[serde(default)]
            pub budget: Option<agentlane_core::spend::RunBudget>,
            #[serde(default)]
            pub enabled: Option<bool>,
            #[serde(default)]
            pub delete_after_run: Option<bool>,
            #[serde(default)]
            pub delivery: Option<JobDelivery>,
        }

        impl $name {
            /// Checks the settings both bodies take ([`check_settings`]).
            pub(super) fn check_settings(
                &self,
                state: &ApiState,
                tenant: &TenantId,
            ) -> Result<(), ApiError> {
                if let Some(id) = &self.agent_id {
                    agentlane_core::agent::validate_agent_id(id)
                        .map_err(ApiError::InvalidRequest)?;
                }
                if let Some(problem) = self.budget.as_ref().and_then(|b| b.problem("budget")) {
                    return Err(ApiError::InvalidRequest(problem));
                }
                check_settings(
                    self.model.as_deref(),
                    self.timeout_seconds,
                    self.delivery.as_ref(),
                    state,
                    tenant,
                )
            }
        }
    };
}

job_body! {
    /// The body of `POST /v1/cron/jobs`.
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub(super) struct NewJobBody {
        #[schema(min_length = 1, max_length = 200)]
        pub name: String,
        #[schema(value_type = ScheduleInput)]
        pub schedule: Value,
        #[schema(min_length = 1)]
        pub message: String,
    }
}

job_body! {
    /// The body of `PATCH /v1/cron/jobs/{jobId}`: any field of a job.
    #[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub(super) struct JobPatchBody {
        #[serde(default)]
        #[schema(min_length = 1, max_length = 200)]
        pub name: Option<String>,
        #[serde(default)]
        #[schema(value_type = Option<ScheduleInput>)]
        pub schedule: Option<Value>,
        #[serde(default)]
        #[schema(min_length = 1)]
        pub message: Option<String>,
    }
}

/// A schedule as a request sends it: exactly one kind, nothing else (what [`parse_schedule`]
/// accepts; documentation only).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(super) enum ScheduleInput {
    Cron(CronScheduleInput),
    Every(EveryScheduleInput),
    At(AtScheduleInput),
}

/// A cron expression: 5 fields (minute precision) or 6 (seconds first), in `tz` (an IANA
/// zone; UTC when absent).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(super) struct CronScheduleInput {
    #[schema(min_length = 1)]
    cron: String,
    #[serde(default)]
    tz: Option<String>,
}

/// Every `everySeconds` seconds (1 to 315,360,000: ten years), from the job's creation or
/// last schedule change.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct EveryScheduleInput {
    #[schema(minimum = 1, maximum = 315360000)]
    every_seconds: u64,
}

/// Once, at an RFC 3339 time.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(super) struct AtScheduleInput {
    #[schema(format = DateTime)]
    at: String,
}
