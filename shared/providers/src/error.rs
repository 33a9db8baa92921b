//! Provider errors and their failover classification (SPEC §5, §6).

use std::time::Duration;

/// Why a model call failed, as the retry loop sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailoverReason {
    /// 429 or a rate-limit body.
    RateLimit,
    /// 503 / 529 or an overloaded body.
    Overloaded,
    /// 401 / 403: the credential is bad.
    Auth,
    /// 402 or a billing/quota body.
    Billing,
    /// The prompt is larger than the model's context window (413 or a context-length body).
    ContextOverflow,
    /// 408, a connect/read timeout, or the idle watchdog.
    Timeout,
    /// Other 5xx.
    Server,
    /// The provider did not understand the request (400 that is none of the above).
    Format,
    /// 404 / unknown model.
    ModelNotFound,
    /// The connection broke or the stream was malformed.
    Network,
}

impl FailoverReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverReason::RateLimit => "rate_limit",
            FailoverReason::Overloaded => "overloaded",
            FailoverReason::Auth => "auth",
            FailoverReason::Billing => "billing",
            FailoverReason::ContextOverflow => "context_overflow",
            FailoverReason::Timeout => "timeout",
            FailoverReason::Server => "server",
            FailoverReason::Format => "format",
            FailoverReason::ModelNotFound => "model_not_found",
            FailoverReason::Network => "network",
        }
    }
}

/// A failed model call. `message` is safe to show and log: never a key, never a raw body longer
/// than a short excerpt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason:?}: {message}")]
pub struct ProviderError {
    pub reason: FailoverReason,
    pub status: Option<u16>,
    pub message: String,
    /// The server's suggested delay (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    pub fn new(reason: FailoverReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Classifies an HTTP error answer from its status and body text.
    pub fn from_http(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let lower = body.to_ascii_lowercase();
        let reason = if lower.contains("context_length")
            || lower.contains("context length")
            || lower.contains("maximum context")
            || lower.contains("exceed_context")
            || lower.contains("prompt is too long")
            || lower.contains("too many tokens")
            || status == 413
        {
            FailoverReason::ContextOverflow
        } else {
            match status {
                429 => FailoverReason::RateLimit,
                503 | 529 => FailoverReason::Overloaded,
                401 | 403 => FailoverReason::Auth,
                402 => FailoverReason::Billing,
                408 => FailoverReason::Timeout,
                404 => FailoverReason::ModelNotFound,
                500..=599 => {
                    if lower.contains("overloaded") {
                        FailoverReason::Overloaded
                    } else {
                        FailoverReason::Server
                    }
                }
                _ if lower.contains("rate limit") || lower.contains("rate_limit") => {
                    FailoverReason::RateLimit
                }
                _ if lower.contains("insufficient_quota") || lower.contains("billing") => {
                    FailoverReason::Billing
                }
                _ => FailoverReason::Format,
            }
        };
        Self {
            reason,
            status: Some(status),
            message: format!("HTTP {status}: {}", excerpt(body)),
            retry_after,
        }
    }
}

/// The provider's own error message if the body is `{"error": {"message": ...}}`, else a short
/// prefix of the body.
fn excerpt(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let cases: &[(u16, &str, FailoverReason)] = &[
            (
                429,
                r#"{"error":{"message":"Rate limit exceeded"}}"#,
                FailoverReason::RateLimit,
            ),
            (
                529,
                r#"{"error":{"message":"Overloaded"}}"#,
                FailoverReason::Overloaded,
            ),
            (503, "", FailoverReason::Overloaded),
            (401, "bad key", FailoverReason::Auth),
            (402, "", FailoverReason::Billing),
            (
                400,
                r#"{"error":{"code":"context_length_exceeded"}}"#,
                FailoverReason::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"type":"exceed_context_size_error"}}"#,
                FailoverReason::ContextOverflow,
            ),
            (413, "", FailoverReason::ContextOverflow),
            (408, "", FailoverReason::Timeout),
            (404, "no such model", FailoverReason::ModelNotFound),
            (500, "boom", FailoverReason::Server),
            (500, "upstream overloaded", FailoverReason::Overloaded),
            (400, "bad role", FailoverReason::Format),
        ];
        for (status, body, want) in cases {
            assert_eq!(
                ProviderError::from_http(*status, body, None).reason,
                *want,
                "{status} {body}"
            );
        }
    }

    #[test]
    fn message_uses_provider_message() {
        let e = ProviderError::from_http(429, r#"{"error":{"message":"slow down"}}"#, None);
        assert_eq!(e.message, "HTTP 429: slow down");
    }
}
