//! OpenAI's error shape and status codes, for the OpenAI-compatible routes:
//! `{"error": {"message", "type", "param", "code"}}` with 400 `invalid_request_error`, 401
//! `invalid_api_key`, 404 `model_not_found`, 429 `rate_limit_exceeded` (with `Retry-After`),
//! 5xx `server_error`. Every [`ApiError`] of the shared machinery (auth, body reading,
//! validation, the store) maps to one. Answers given after a turn was accepted say
//! `x-should-retry: false`: the official SDKs retry 5xx answers, and a retry would send the
//! message again as a new turn.

use crate::Shared;
use crate::auth::Tenant;
use crate::error::ApiError;
use agentlane_core::{Run, TenantId};
use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The `type` of a request the client must change.
pub(crate) const INVALID_REQUEST: &str = "invalid_request_error";
/// The `type` of a 429.
pub(crate) const RATE_LIMIT: &str = "rate_limit_error";
/// The `type` of a failure on our side (or of the turn).
pub(crate) const SERVER_ERROR: &str = "server_error";

/// The header the official SDKs obey over their own retry rules.
const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// An error answer of an OpenAI-compatible route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenAiError {
    pub status: StatusCode,
    /// OpenAI's `type`.
    pub kind: &'static str,
    pub code: Option<String>,
    /// The request field at fault, when there is one (`messages[2].content`).
    pub param: Option<String>,
    pub message: String,
    /// `Retry-After`, on 429s.
    pub retry_after: Option<Duration>,
    /// `x-should-retry: false`: retrying would not help (or would repeat a turn).
    pub no_retry: bool,
}

impl OpenAiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
            retry_after: None,
            no_retry: false,
        }
    }

    /// 400 `invalid_request_error` about `param`.
    pub(crate) fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message).param(param)
    }

    /// 400 for a parameter this endpoint does not serve (`code`: what is unsupported).
    pub(crate) fn unsupported(param: &str, code: &str, message: impl Into<String>) -> Self {
        Self::invalid(param, message).code(code)
    }

    /// 404 `model_not_found`: `model` names no agent of the tenant.
    pub(crate) fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            INVALID_REQUEST,
            format!(
                "The model {model:?} does not exist: models are `agentlane` (the agent main) and \
                 `agentlane/<agentId>` for the agents of this API key (GET /v1/models lists them)"
            ),
        )
        .param("model")
        .code("model_not_found")
    }

    /// The request field at fault.
    pub(crate) fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    /// OpenAI's `code`.
    pub(crate) fn code(mut self, code: &str) -> Self {
        self.code = Some(code.to_owned());
        self
    }

    /// Tells the SDKs not to retry.
    pub(crate) fn no_retry(mut self) -> Self {
        self.no_retry = true;
        self
    }

    /// A `server_error` given after the turn was accepted (the SDKs are told not to retry: a
    /// retry would send the message again).
    pub(crate) fn after_accept(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self::new(status, SERVER_ERROR, message)
            .code(code)
            .no_retry()
    }

    /// 500 `server_error`: the accepted turn ended without an answer (`error`, `aborted` or
    /// `timeout`); the code is the run's error code, the message names the run. A turn a
    /// budget stopped is 429 `insufficient_quota` (OpenAI's answer to a spent quota).
    pub(crate) fn turn_failed(run: &Run) -> Self {
        let (code, why) = match &run.error {
            Some(error) => (error.code.clone(), error.message.clone()),
            None => (run.status.as_str().to_owned(), "no reply".to_owned()),
        };
        if code == agentlane_core::spend::OverBudget::CODE {
            return Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                RATE_LIMIT,
                format!(
                    "the turn was stopped by a budget: {why} (run {})",
                    run.run_id
                ),
            )
            .code("insufficient_quota")
            .no_retry();
        }
        Self::after_accept(
            StatusCode::INTERNAL_SERVER_ERROR,
            &code,
            format!(
                "the turn ended with status {} and no reply: {why} (run {}; GET /v1/runs/{} \
                 has its attempts)",
                run.status.as_str(),
                run.run_id,
                run.run_id
            ),
        )
    }

    /// 409 `requires_approval`: the turn paused for the agent's own gated calls, which a person
    /// approves through `POST /v1/runs/{id}/actions` (OpenAI's protocol has no approvals).
    pub(crate) fn awaiting_approval(run: &Run) -> Self {
        let names: Vec<&str> = run
            .required_action
            .iter()
            .flat_map(|a| a.tool_calls.iter())
            .filter(|c| c.kind == agentlane_core::PendingKind::Approval)
            .map(|c| c.name.as_str())
            .collect();
        Self::after_accept(
            StatusCode::CONFLICT,
            "requires_approval",
            format!(
                "the turn paused: the agent's calls of {} need approval; approve or deny them                  with POST /v1/runs/{}/actions (agentlane runs approve {}), then wait for the                  run with POST /v1/agent.wait",
                names.join(", "),
                run.run_id,
                run.run_id
            ),
        )
    }

    /// 504: the wait for the accepted turn ended before it did. The turn goes on.
    pub(crate) fn still_running(run: &Run, waited: Duration) -> Self {
        Self::after_accept(
            StatusCode::GATEWAY_TIMEOUT,
            "turn_still_running",
            format!(
                "the turn is still {} after {} s, the longest this endpoint waits; it goes on as \
                 run {}: wait for it with POST /v1/agent.wait, or ask with \"stream\": true",
                run.status.as_str(),
                waited.as_secs(),
                run.run_id
            ),
        )
    }

    /// The body sent.
    pub(crate) fn body(&self) -> OpenAiErrorBody {
        OpenAiErrorBody {
            error: OpenAiErrorDetail {
                message: self.message.clone(),
                kind: self.kind.to_owned(),
                param: self.param.clone(),
                code: self.code.clone(),
            },
        }
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let status = error.status();
        let message = error.public_message();
        let (kind, code) = match &error {
            ApiError::InvalidRequest(_) => (INVALID_REQUEST, None),
            ApiError::Unauthorized => (INVALID_REQUEST, Some("invalid_api_key")),
            ApiError::Forbidden(_) => (INVALID_REQUEST, Some("forbidden")),
            ApiError::NotFound(_) => (INVALID_REQUEST, Some("not_found")),
            ApiError::MethodNotAllowed => (INVALID_REQUEST, Some("method_not_allowed")),
            ApiError::Conflict(_) => (INVALID_REQUEST, Some("conflict")),
            ApiError::SessionBusy(_) => (INVALID_REQUEST, Some("session_busy")),
            ApiError::PayloadTooLarge(_) => (INVALID_REQUEST, Some("payload_too_large")),
            ApiError::RateLimited(_) | ApiError::LimitReached { .. } => {
                (RATE_LIMIT, Some("rate_limit_exceeded"))
            }
            // OpenAI's own code for a spent quota.
            ApiError::BudgetExceeded { .. } => (RATE_LIMIT, Some("insufficient_quota")),
            ApiError::Timeout(_) => (INVALID_REQUEST, Some("timeout")),
            ApiError::UriTooLong(_) => (INVALID_REQUEST, Some("uri_too_long")),
            ApiError::Internal(_) => (SERVER_ERROR, Some("internal")),
            ApiError::Unavailable(_) => (SERVER_ERROR, Some("unavailable")),
        };
        let mut mapped = Self::new(status, kind, message);
        mapped.code = code.map(str::to_owned);
        mapped.retry_after = error.retry_after();
        // A conflict (an idempotency key reused, a session of another agent) stays one.
        mapped.no_retry = matches!(error, ApiError::Conflict(_));
        match &error {
            // Logged here, never sent: the client gets a constant message.
            ApiError::Internal(detail) => tracing::error!(detail = %detail, "internal error"),
            ApiError::Unavailable(detail) => {
                tracing::warn!(detail = %detail, "backend unavailable")
            }
            _ => {}
        }
        mapped
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(wait) = self.retry_after {
            // Whole seconds, rounded up, at least 1.
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        }
        if self.no_retry {
            headers.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        }
        response
    }
}

/// Every error answer of the OpenAI-compatible routes, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiErrorBody {
    pub error: OpenAiErrorDetail,
}

/// What went wrong, as OpenAI says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiErrorDetail {
    pub message: String,
    /// `invalid_request_error`, `rate_limit_error` or `server_error`.
    #[serde(rename = "type")]
    #[schema(example = "invalid_request_error")]
    pub kind: String,
    /// The request field at fault, if any.
    pub param: Option<String>,
    /// e.g. `invalid_api_key`, `model_not_found`, `tools_not_supported`, `rate_limit_exceeded`.
    pub code: Option<String>,
}

/// The authenticated tenant of an OpenAI-compatible request (the same bearer API keys and
/// request-rate admission as [`Tenant`]), refusing in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenAiTenant(pub TenantId);

impl FromRequestParts<Arc<Shared>> for OpenAiTenant {
    type Rejection = OpenAiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Shared>,
    ) -> Result<Self, Self::Rejection> {
        match Tenant::from_request_parts(parts, state).await {
            Ok(Tenant(tenant)) => Ok(OpenAiTenant(tenant)),
            Err(error) => Err(OpenAiError::from(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_errors_map_to_openai_statuses_types_and_codes() {
        let cases = [
            (
                ApiError::InvalidRequest("x".into()),
                400,
                INVALID_REQUEST,
                None,
            ),
            (
                ApiError::Unauthorized,
                401,
                INVALID_REQUEST,
                Some("invalid_api_key"),
            ),
            (
                ApiError::NotFound("x".into()),
                404,
                INVALID_REQUEST,
                Some("not_found"),
            ),
            (
                ApiError::Conflict("x".into()),
                409,
                INVALID_REQUEST,
                Some("conflict"),
            ),
            (
                ApiError::PayloadTooLarge("x".into()),
                413,
                INVALID_REQUEST,
                Some("payload_too_large"),
            ),
            (
                ApiError::rate_limited("x", Duration::from_millis(1500)),
                429,
                RATE_LIMIT,
                Some("rate_limit_exceeded"),
            ),
            (
                ApiError::Internal("disk full".into()),
                500,
                SERVER_ERROR,
                Some("internal"),
            ),
        ];
        for (api, status, kind, code) in cases {
            let mapped = OpenAiError::from(api.clone());
            assert_eq!(
                (mapped.status.as_u16(), mapped.kind, mapped.code.as_deref()),
                (status, kind, code),
                "{api:?}"
            );
        }
    }

    #[test]
    fn answers_carry_the_sdk_headers_and_never_internals() {
        let limited = OpenAiError::from(ApiError::rate_limited(
            "slow down",
            Duration::from_millis(1500),
        ))
        .into_response();
        assert_eq!(limited.headers()[header::RETRY_AFTER], "2");
        let denied = OpenAiError::from(ApiError::Unauthorized).into_response();
        assert_eq!(denied.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert!(denied.headers().get(SHOULD_RETRY).is_none());
        let internal = OpenAiError::from(ApiError::Internal("disk /var/secret full".into()));
        assert!(!internal.body().error.message.contains("secret"));
        let conflict =
            OpenAiError::from(ApiError::Conflict("another agent".into())).into_response();
        assert_eq!(conflict.headers()[SHOULD_RETRY], "false");
    }
}
