//! Checks of `/v1/cron/jobs` requests: job ids, schedules and the fields of a job.

use crate::ApiState;
use crate::error::ApiError;
use crate::validate::{check_model_allowed, check_run_timeout, validate_model};
use agentlane_core::TenantId;
use agentlane_core::cron::{JobDelivery, JobId, Schedule};
use agentlane_scheduler::{CompiledSchedule, validate_new};
use serde_json::Value;

/// Longest job name.
const MAX_NAME_CHARS: usize = 200;

/// A `400 invalid_request` saying `message`.
pub(super) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

/// The `404` of an unknown job (or another tenant's).
pub(super) fn not_found() -> ApiError {
    ApiError::not_found("cron job")
}

/// A job id from a path; malformed ids are unknown ones.
pub(super) fn job_id(raw: String) -> Result<JobId, ApiError> {
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
pub(super) fn parse_schedule(value: &Value) -> Result<Schedule, ApiError> {
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

pub(super) fn check_schedule(schedule: &Schedule, now: u64) -> Result<CompiledSchedule, ApiError> {
    validate_new(schedule, now).map_err(|e| invalid(format!("schedule: {e}")))
}

pub(super) fn check_name(name: &str) -> Result<(), ApiError> {
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

pub(super) fn check_message(message: &str, state: &ApiState) -> Result<(), ApiError> {
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

/// Checks the settings both job bodies take: the model (well-formed, and allowed to `tenant`),
/// the timeout (the run limits of `POST /v1/agent`: each fire is a run) and the webhook, in
/// that order.
pub(super) fn check_settings(
    model: Option<&str>,
    timeout_seconds: Option<u64>,
    delivery: Option<&JobDelivery>,
    state: &ApiState,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    if let Some(model) = model {
        validate_model(model, &state.config)?;
        check_model_allowed(model, &state.config, tenant)?;
    }
    if let Some(seconds) = timeout_seconds {
        check_run_timeout(seconds, &state.config)?;
    }
    check_delivery(delivery)
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
