//! Provider errors and their failover classification (SPEC §5, §6).

mod window;

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
    /// The reason's stable snake_case name, as recorded on attempts and events (e.g. `rate_limit`).
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
    /// How the retry loop classifies the failure.
    pub reason: FailoverReason,
    /// The HTTP status the provider answered, if the failure came from one.
    pub status: Option<u16>,
    /// What went wrong, safe to show and log (no keys, at most a short excerpt of a body).
    pub message: String,
    /// The server's suggested delay (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// An error of `reason` with no HTTP status and no `Retry-After`.
    pub fn new(reason: FailoverReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Classifies an HTTP error answer from its status and body text. The body may be
    /// OpenAI-shaped (`{"error": {"message", "type", "code"}}`) or Anthropic-shaped
    /// (`{"type": "error", "error": {"type", "message"}}`); an Anthropic error *type* wins over
    /// the status (`overloaded_error` on a 500 is an overload).
    pub fn from_http(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let lower = body.to_ascii_lowercase();
        let json = serde_json::from_str::<serde_json::Value>(body).ok();
        let error_type = json
            .as_ref()
            .and_then(|v| v.pointer("/error/type"))
            .and_then(|t| t.as_str())
            .map(str::to_ascii_lowercase);
        let reason = classify(status, &lower, error_type.as_deref());
        Self {
            reason,
            status: Some(status),
            message: format!("HTTP {status}: {}", excerpt(body, json.as_ref())),
            retry_after,
        }
    }

    /// An error reported inside the stream of a `200` answer, which carries no HTTP status of
    /// its own: a numeric `code` in 400–599 (as llama-server sends) is taken as the status, else
    /// `stand_in` (the provider's pick from the error's type) classifies `body` without one. The
    /// message reads `error in stream: …`.
    pub(crate) fn in_stream(code: Option<&serde_json::Value>, stand_in: u16, body: &str) -> Self {
        let numeric = code
            .and_then(serde_json::Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (400..=599).contains(c));
        let mut classified = Self::from_http(numeric.unwrap_or(stand_in), body, None);
        classified.status = numeric;
        classified.message = match classified.message.split_once(": ") {
            Some((_, text)) => format!("error in stream: {text}"),
            None => "error in stream".to_owned(),
        };
        classified
    }

    /// The connection closed before the answer was complete.
    pub(crate) fn cut_off() -> Self {
        Self::new(
            FailoverReason::Network,
            "stream ended before the response was complete",
        )
    }

    /// How long the rate limit behind this error is likely to last (OpenClaw §1.9), read from
    /// the status, the message wording and `Retry-After`. Always [`RateLimitWindow::Unknown`]
    /// for errors that are not [`FailoverReason::RateLimit`].
    ///
    /// In order: long-window wording (daily/weekly/monthly, "per day", "usage limit",
    /// subscription, `insufficient_quota`, "quota exceeded"…) → `Long`; short-window wording
    /// (RPM/TPM, "per minute", `model_cooldown`, "try again in 20s"…) → `Short`; a `Retry-After`
    /// of at most 60 s → `Short`, a longer one → `Long`; an HTTP 429 with no window wording →
    /// `Short`; anything else (e.g. a generic "rate limit" error inside a stream) → `Unknown`.
    pub fn rate_limit_window(&self) -> RateLimitWindow {
        if self.reason != FailoverReason::RateLimit {
            return RateLimitWindow::Unknown;
        }
        let text = self.message.to_lowercase();
        if window::has_long_wording(&text) {
            RateLimitWindow::Long
        } else if window::has_short_wording(&text) {
            RateLimitWindow::Short
        } else if let Some(after) = self.retry_after {
            if after <= window::SHORT_MAX {
                RateLimitWindow::Short
            } else {
                RateLimitWindow::Long
            }
        } else if self.status == Some(429) {
            RateLimitWindow::Short
        } else {
            RateLimitWindow::Unknown
        }
    }
}

/// How long a rate limit is likely to last: the runner retries the same model after a short
/// pause only for a short window (OpenClaw §1.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateLimitWindow {
    /// Per-minute limits (RPM/TPM, a cooldown, `Retry-After` ≤ 60 s): waiting briefly helps.
    Short,
    /// Daily/monthly quotas, usage limits, exhausted credit: waiting briefly does not help.
    Long,
    /// The error says nothing about its window (or is not a rate limit).
    Unknown,
}

fn classify(status: u16, lower: &str, error_type: Option<&str>) -> FailoverReason {
    if lower.contains("context_length")
        || lower.contains("context length")
        || lower.contains("maximum context")
        || lower.contains("exceed_context")
        || lower.contains("prompt is too long")
        || lower.contains("too many tokens")
        || status == 413
    {
        return FailoverReason::ContextOverflow;
    }
    // Anthropic's error types (https://docs.anthropic.com/en/api/errors).
    match error_type {
        Some("overloaded_error") => return FailoverReason::Overloaded,
        Some("authentication_error" | "permission_error") => return FailoverReason::Auth,
        Some("not_found_error") => return FailoverReason::ModelNotFound,
        Some("billing_error") => return FailoverReason::Billing,
        Some("rate_limit_error") => return FailoverReason::RateLimit,
        Some("timeout_error") => return FailoverReason::Timeout,
        _ => {}
    }
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
        _ if lower.contains("insufficient_quota")
            || lower.contains("billing")
            || lower.contains("credit balance") =>
        {
            FailoverReason::Billing
        }
        _ => FailoverReason::Format,
    }
}

/// The provider's own error message if the body is `{"error": {"message": ...}}` (else the body,
/// cut to about 2 KiB), followed by the error's `type`/`code` when the message does not already
/// say them: they carry wording the classifiers need (`insufficient_quota`, `model_cooldown`).
fn excerpt(body: &str, json: Option<&serde_json::Value>) -> String {
    let error = json.and_then(|v| v.get("error"));
    let field = |name: &str| {
        error
            .and_then(|e| e.get(name))
            .and_then(|m| m.as_str())
            .filter(|m| !m.is_empty())
    };
    let text = match field("message") {
        Some(message) => message.to_owned(),
        None => body.trim().to_owned(),
    };
    // Cut before the labels are added, so they survive; never inside a word, so no key is
    // left half-shown (the endpoint's redactor removes whole ones).
    let mut text = crate::redact::cut(&text, crate::redact::TEXT_LIMIT - 64);
    let mut labels: Vec<&str> = Vec::new();
    for label in [field("type"), field("code")].into_iter().flatten() {
        if !text.contains(label) && !labels.contains(&label) {
            labels.push(label);
        }
    }
    if !labels.is_empty() {
        text.push_str(&format!(" ({})", labels.join(", ")));
    }
    text
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
            (
                400,
                "Your credit balance is too low to access the API.",
                FailoverReason::Billing,
            ),
        ];
        for (status, body, want) in cases {
            assert_eq!(
                ProviderError::from_http(*status, body, None).reason,
                *want,
                "{status} {body}"
            );
        }
    }

    /// Anthropic's error bodies: the error type decides, whatever the status.
    #[test]
    fn anthropic_error_types() {
        let body = |kind: &str, message: &str| {
            format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)
        };
        let cases: &[(u16, String, FailoverReason)] = &[
            (
                529,
                body("overloaded_error", "Overloaded"),
                FailoverReason::Overloaded,
            ),
            (
                500,
                body("overloaded_error", "Overloaded"),
                FailoverReason::Overloaded,
            ),
            (
                500,
                body("api_error", "Internal error"),
                FailoverReason::Server,
            ),
            (
                429,
                body(
                    "rate_limit_error",
                    "Number of requests has exceeded your rate limit",
                ),
                FailoverReason::RateLimit,
            ),
            (
                401,
                body("authentication_error", "invalid x-api-key"),
                FailoverReason::Auth,
            ),
            (
                403,
                body("permission_error", "Your API key does not have permission"),
                FailoverReason::Auth,
            ),
            (
                404,
                body("not_found_error", "model: claude-nope"),
                FailoverReason::ModelNotFound,
            ),
            (
                400,
                body(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum",
                ),
                FailoverReason::ContextOverflow,
            ),
            (
                413,
                body("request_too_large", "Request exceeds the maximum size"),
                FailoverReason::ContextOverflow,
            ),
            (
                402,
                body("billing_error", "Payment required"),
                FailoverReason::Billing,
            ),
            (
                400,
                body("billing_error", "Payment required"),
                FailoverReason::Billing,
            ),
            (
                504,
                body("timeout_error", "Request timed out"),
                FailoverReason::Timeout,
            ),
            (
                400,
                body("invalid_request_error", "messages: roles must alternate"),
                FailoverReason::Format,
            ),
        ];
        for (status, body, want) in cases {
            let e = ProviderError::from_http(*status, body, None);
            assert_eq!(e.reason, *want, "{status} {body}");
            assert_eq!(e.status, Some(*status));
        }
    }

    #[test]
    fn message_uses_provider_message() {
        let e = ProviderError::from_http(429, r#"{"error":{"message":"slow down"}}"#, None);
        assert_eq!(e.message, "HTTP 429: slow down");
    }

    #[test]
    fn message_keeps_error_type_and_code_it_does_not_already_say() {
        let cases = [
            (
                r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}}"#,
                "HTTP 429: You exceeded your current quota. (insufficient_quota)",
            ),
            (
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "HTTP 429: Overloaded (overloaded_error)",
            ),
            (
                r#"{"error":{"message":"model_cooldown: try later","code":"model_cooldown"}}"#,
                "HTTP 429: model_cooldown: try later",
            ),
            ("plain text", "HTTP 429: plain text"),
        ];
        for (body, want) in cases {
            assert_eq!(ProviderError::from_http(429, body, None).message, want);
        }
        let long = format!(
            r#"{{"error":{{"message":"{}","type":"tokens"}}}}"#,
            "xx ".repeat(1000)
        );
        let message = ProviderError::from_http(429, &long, None).message;
        assert!(message.ends_with("xx… (tokens)"), "{message}");
        assert!(
            message.len() <= crate::redact::TEXT_LIMIT,
            "{}",
            message.len()
        );
    }

    #[test]
    fn rate_limit_window_table() {
        use RateLimitWindow::{Long, Short, Unknown};
        let secs = |s| Some(Duration::from_secs(s));
        let http = |body: &str, after: Option<Duration>| ProviderError::from_http(429, body, after);
        let in_stream = |message: &str| ProviderError::new(FailoverReason::RateLimit, message);
        let cases: Vec<(ProviderError, RateLimitWindow)> = vec![
            // Short-window wording.
            (
                http(
                    r#"{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3. Please try again in 20s.","type":"requests","code":"rate_limit_exceeded"}}"#,
                    None,
                ),
                Short,
            ),
            (
                http(
                    r#"{"error":{"message":"Limit reached on tokens per min (TPM)"}}"#,
                    None,
                ),
                Short,
            ),
            (
                in_stream("This request would exceed 50,000 input tokens per minute"),
                Short,
            ),
            (in_stream("model_cooldown for this profile"), Short),
            (
                in_stream("Too many requests. Please try again in 1.5s"),
                Short,
            ),
            (in_stream("请求频率超过限制"), Short),
            // A delay in the text longer than a minute is no short-window signal.
            (
                in_stream("rate limited, please try again in 2 minutes"),
                Unknown,
            ),
            // Long-window wording wins over short wording and over Retry-After.
            (
                http(
                    r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#,
                    secs(1),
                ),
                Long,
            ),
            (
                http(
                    r#"{"error":{"message":"Rate limit reached on tokens per day (TPD). Please try again in 20s."}}"#,
                    None,
                ),
                Long,
            ),
            (http("daily request limit reached", None), Long),
            (
                in_stream("weekly usage limit reached for your subscription"),
                Long,
            ),
            (http(r#"{"error":{"code":"quota_exceeded"}}"#, None), Long),
            (in_stream("Quota exceeded for this project"), Long),
            (http("monthly spend cap", secs(5)), Long),
            // Retry-After alone.
            (in_stream("rate limited"), Unknown),
            (
                ProviderError {
                    retry_after: secs(60),
                    ..in_stream("rate limited")
                },
                Short,
            ),
            (http("slow down", secs(30)), Short),
            (http("slow down", secs(3600)), Long),
            // A bare status-prefixed 429 is short; generic text without a status is unknown.
            (
                http(r#"{"error":{"message":"Rate limit exceeded"}}"#, None),
                Short,
            ),
            (http("", None), Short),
            (in_stream("rate limit"), Unknown),
            // Not a rate limit.
            (
                ProviderError::from_http(529, "per minute", secs(1)),
                Unknown,
            ),
            (ProviderError::from_http(402, "daily", None), Unknown),
        ];
        for (error, want) in cases {
            assert_eq!(error.rate_limit_window(), want, "{error:?}");
        }
    }
}
