//! The one place that decides whether a failed model call is retried or ends the run.
//!
//! This is the foundation's policy: transient failures (rate limit, overload, server errors,
//! network breaks, timeouts) are retried a bounded number of times with exponential backoff that
//! honours `Retry-After`; everything else ends the run. The full OpenClaw budget set (SPEC §5)
//! replaces [`RetryPolicy`] without changing the loop that calls [`RetryPolicy::decide`].

use agentlane_core::RunError;
use agentlane_providers::{FailoverReason, ProviderError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Try the same model again after this pause.
    RetryAfter(Duration),
    /// Stop: the run ends with this error.
    Fail(RunError),
}

/// Retry budgets and counters; persisted with the run's checkpoint so a resumed run keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    pub max_transient_retries: u32,
    pub transient_retries: u32,
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_transient_retries: 3,
            transient_retries: 0,
            base_backoff_ms: 500,
            max_backoff_ms: 60_000,
        }
    }
}

impl RetryPolicy {
    /// Decides, and counts the retry when it allows one.
    pub fn decide(&mut self, error: &ProviderError) -> Decision {
        let transient = match error.reason {
            FailoverReason::RateLimit
            | FailoverReason::Overloaded
            | FailoverReason::Server
            | FailoverReason::Network
            | FailoverReason::Timeout => true,
            FailoverReason::Auth
            | FailoverReason::Billing
            | FailoverReason::ContextOverflow
            | FailoverReason::Format
            | FailoverReason::ModelNotFound => false,
        };
        if !transient || self.transient_retries >= self.max_transient_retries {
            let exhausted = if transient {
                format!(" (gave up after {} retries)", self.transient_retries)
            } else {
                String::new()
            };
            return Decision::Fail(RunError::new(
                error.reason.as_str(),
                format!("model call failed: {}{exhausted}", error.message),
            ));
        }
        let backoff = self
            .base_backoff_ms
            .saturating_mul(1 << self.transient_retries.min(16));
        self.transient_retries += 1;
        let suggested = error.retry_after.map(|d| d.as_millis() as u64).unwrap_or(0);
        Decision::RetryAfter(Duration::from_millis(
            backoff.max(suggested).min(self.max_backoff_ms),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(reason: FailoverReason, retry_after: Option<u64>) -> ProviderError {
        ProviderError {
            reason,
            status: None,
            message: "x".into(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn decision_table() {
        let ms = |v| Decision::RetryAfter(Duration::from_millis(v));
        let cases = [
            (FailoverReason::RateLimit, None, ms(500)),
            (FailoverReason::RateLimit, Some(3), ms(3000)),
            (FailoverReason::Overloaded, None, ms(500)),
            (FailoverReason::Network, None, ms(500)),
            (FailoverReason::Timeout, None, ms(500)),
            (FailoverReason::Server, Some(600), ms(60_000)),
        ];
        for (reason, after, want) in cases {
            assert_eq!(
                RetryPolicy::default().decide(&err(reason, after)),
                want,
                "{reason:?}"
            );
        }
        for reason in [
            FailoverReason::Auth,
            FailoverReason::Billing,
            FailoverReason::ContextOverflow,
            FailoverReason::Format,
            FailoverReason::ModelNotFound,
        ] {
            match RetryPolicy::default().decide(&err(reason, None)) {
                Decision::Fail(e) => assert_eq!(e.code, reason.as_str()),
                other => panic!("{reason:?} should fail, got {other:?}"),
            }
        }
    }

    #[test]
    fn budget_is_bounded_and_backoff_grows() {
        let mut p = RetryPolicy::default();
        let e = err(FailoverReason::Network, None);
        let pauses: Vec<Decision> = (0..4).map(|_| p.decide(&e)).collect();
        assert_eq!(pauses[0], Decision::RetryAfter(Duration::from_millis(500)));
        assert_eq!(pauses[1], Decision::RetryAfter(Duration::from_millis(1000)));
        assert_eq!(pauses[2], Decision::RetryAfter(Duration::from_millis(2000)));
        match &pauses[3] {
            Decision::Fail(e) => assert!(e.message.contains("gave up after 3 retries")),
            other => panic!("expected Fail, got {other:?}"),
        }
    }
}
