//! The one error type of the HTTP edge. Every failure answers
//! `{"error": {"code": "...", "message": "..."}}`; internal details are logged, never sent.

use agentlane_core::{QueueError, StoreError};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// What went wrong, in the terms a client can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or breaks a rule; the message says which.
    #[error("{0}")]
    InvalidRequest(String),
    /// 401: missing, malformed or unknown API key. The message is constant.
    #[error("missing or invalid API key")]
    Unauthorized,
    /// 403: the key is valid but may not do this (a tenant's key on an operator route).
    #[error("{0}")]
    Forbidden(String),
    /// 404: unknown route, or a resource this tenant does not have.
    #[error("{0}")]
    NotFound(String),
    /// 405: the route exists, the method does not.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 409: the resource is in a state that forbids the change.
    #[error("{0}")]
    Conflict(String),
    /// 413: the body or a field of it is too large.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 409: the session's write lock is held by a live writer.
    #[error("{0}")]
    SessionBusy(String),
    /// 429: the backend asked us to slow down.
    #[error("{0}")]
    RateLimited(String),
    /// 429: a limit of this tenant (request rate, open streams or waits, queued runs) is
    /// reached; `Retry-After` says when to try again.
    #[error("{message}")]
    LimitReached {
        /// Says which limit was reached.
        message: String,
        /// When to try again; sent as the `Retry-After` header.
        retry_after: std::time::Duration,
    },
    /// 429: the tenant's spend budget for the current period is spent; `Retry-After` is the
    /// period's end.
    #[error("{message}")]
    BudgetExceeded {
        /// Says which budget is spent.
        message: String,
        /// Time left until the budget period ends; sent as the `Retry-After` header.
        retry_after: std::time::Duration,
    },
    /// 408: the request (or its body) did not complete in time.
    #[error("{0}")]
    Timeout(String),
    /// 414: the path and query are longer than the server accepts.
    #[error("{0}")]
    UriTooLong(String),
    /// 500: the detail is logged; the client gets a constant message.
    #[error("internal error: {0}")]
    Internal(String),
    /// 503: the store or the queue cannot be reached (an outage, not a bug); `Retry-After`
    /// says when to try again. The detail is logged; the client gets a constant message.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// How long a client is asked to wait after a `503 unavailable`.
pub const UNAVAILABLE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

impl ApiError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest(_) => "invalid_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::SessionBusy(_) => "session_busy",
            ApiError::RateLimited(_) | ApiError::LimitReached { .. } => "rate_limited",
            ApiError::BudgetExceeded { .. } => "budget_exceeded",
            ApiError::Timeout(_) => "timeout",
            ApiError::UriTooLong(_) => "uri_too_long",
            ApiError::Internal(_) => "internal",
            ApiError::Unavailable(_) => "unavailable",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) | ApiError::SessionBusy(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited(_)
            | ApiError::LimitReached { .. }
            | ApiError::BudgetExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The message sent to the client (never internals).
    pub fn public_message(&self) -> String {
        match self {
            ApiError::Internal(_) => "internal error; see the server logs".to_owned(),
            ApiError::Unavailable(_) => {
                "the service's storage is unavailable; retry after the Retry-After delay".to_owned()
            }
            other => other.to_string(),
        }
    }

    /// A 429 for a tenant limit, to retry after `wait`.
    pub fn rate_limited(message: impl Into<String>, wait: std::time::Duration) -> Self {
        ApiError::LimitReached {
            message: message.into(),
            retry_after: wait,
        }
    }

    /// How long the client should wait before retrying (429 and 503 answers only).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ApiError::RateLimited(_) => Some(std::time::Duration::from_secs(1)),
            ApiError::Unavailable(_) => Some(UNAVAILABLE_RETRY_AFTER),
            ApiError::LimitReached { retry_after, .. }
            | ApiError::BudgetExceeded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// A 404 naming what was not found.
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        ApiError::NotFound(format!("{what} not found"))
    }
}

/// Every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The error's code and message.
    pub error: ErrorDetail,
}

/// What went wrong: a stable code and a message that says what to fix.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid_request`, `unauthorized`, `forbidden`, `not_found`, `method_not_allowed`, `conflict`,
    /// `payload_too_large`, `session_busy`, `rate_limited`, `budget_exceeded`, `timeout`,
    /// `uri_too_long`, `internal` or `unavailable`.
    #[schema(example = "invalid_request")]
    pub code: String,
    /// What went wrong and what to fix; never internals or secrets.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(detail) => tracing::error!(detail = %detail, "internal error"),
            ApiError::Unavailable(detail) => {
                tracing::warn!(detail = %detail, "backend unavailable")
            }
            _ => {}
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.public_message(),
            },
        };
        let mut response = (self.status(), Json(body)).into_response();
        if let ApiError::Unauthorized = self {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(wait) = self.retry_after() {
            // Whole seconds, rounded up, at least 1: `Retry-After: 0` invites a hot loop.
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Throttled(_) => {
                ApiError::RateLimited("the store is throttling requests; retry shortly".into())
            }
            StoreError::BudgetSpent { period, ends_at } => budget_spent(&period, ends_at),
            StoreError::SessionFull { open, cap } => ApiError::RateLimited(format!(
                "this session already has {open} runs queued or running (at most {cap})"
            )),
            StoreError::Busy => ApiError::SessionBusy(
                "the session is locked by a running turn; retry when it is idle".into(),
            ),
            StoreError::NotFound(_) => ApiError::NotFound("not found".into()),
            // The store's size rule refused a record (e.g. a run whose request is too large
            // to store): the message names sizes, never contents.
            StoreError::TooLarge(detail) => ApiError::PayloadTooLarge(detail),
            // An outage: the client may retry, unlike a bug.
            StoreError::Unavailable(_) => ApiError::Unavailable(format!("store: {error}")),
            StoreError::FenceLost | StoreError::Conflict(_) | StoreError::Corrupt(_) => {
                ApiError::Internal(format!("store: {error}"))
            }
        }
    }
}

/// `429 budget_exceeded` for a spent `period` (`D2026-12-04`, `M2026-12`) ending at `ends_at`.
pub fn budget_spent(period: &str, ends_at: u64) -> ApiError {
    use agentlane_core::spend::{period_date, period_kind};
    let (what, when) = (period_kind(period), period_date(period));
    use agentlane_core::Clock;
    let now = agentlane_core::SystemClock.now_ms();
    ApiError::BudgetExceeded {
        message: format!(
            "this tenant's {what} budget for {when} (UTC) is spent; it resets when the period ends"
        ),
        retry_after: std::time::Duration::from_millis(ends_at.saturating_sub(now).max(1000)),
    }
}

impl From<QueueError> for ApiError {
    fn from(error: QueueError) -> Self {
        match error {
            QueueError::Throttled(_) => {
                ApiError::RateLimited("the queue is throttling requests; retry shortly".into())
            }
            QueueError::Unavailable(_) => ApiError::Unavailable(format!("queue: {error}")),
            QueueError::StaleReceipt | QueueError::Malformed(_) => {
                ApiError::Internal(format!("queue: {error}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_client_codes() {
        let cases = [
            (StoreError::Throttled("x".into()), "rate_limited", 429),
            (StoreError::Busy, "session_busy", 409),
            (StoreError::NotFound("x".into()), "not_found", 404),
            (StoreError::Unavailable("db".into()), "unavailable", 503),
            (StoreError::Corrupt("row".into()), "internal", 500),
            (StoreError::FenceLost, "internal", 500),
            (StoreError::TooLarge("run".into()), "payload_too_large", 413),
        ];
        for (store, code, status) in cases {
            let api = ApiError::from(store);
            assert_eq!((api.code(), api.status().as_u16()), (code, status));
        }
    }

    #[test]
    fn internal_details_stay_private() {
        for api in [
            ApiError::from(StoreError::Unavailable("disk /var/secret full".into())),
            ApiError::from(StoreError::Corrupt("row /var/secret".into())),
            ApiError::from(QueueError::Unavailable("queue /var/secret".into())),
        ] {
            assert!(!api.public_message().contains("secret"), "{api:?}");
        }
    }

    #[test]
    fn an_outage_asks_the_client_to_come_back() {
        let api = ApiError::from(QueueError::Unavailable("down".into()));
        assert_eq!((api.code(), api.status().as_u16()), ("unavailable", 503));
        assert_eq!(api.retry_after(), Some(UNAVAILABLE_RETRY_AFTER));
        let response = api.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
    }
}
