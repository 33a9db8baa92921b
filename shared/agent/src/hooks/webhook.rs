//! [`WebhookHook`]: a hook answered by an operator's HTTP endpoint. The event is POSTed as
//! `{"hook": "<point>", "context": {...}, "event": {...}}`; the answer is JSON of the point's
//! outcome shape (camelCase, e.g. `{"block": true, "blockReason": "..."}`). A non-2xx status,
//! a redirect, an unreadable or oversized answer, or a timeout is an error (which blocks at
//! policy points). The URL is operator configuration, so the SSRF guard does not apply.

use super::event::{HookContext, HookEvent};
use super::outcome::HookOutcome;
use super::point::HookPoint;
use super::wire::{parse_response, request_body};
use super::{Hook, HookError};
use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// One webhook, as a deployment configures it.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfig {
    /// Names the hook in logs and block reasons; unique per deployment.
    pub name: String,
    /// `http://` or `https://`.
    pub url: String,
    /// The points the webhook is called at; must not be empty.
    pub points: Vec<HookPoint>,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// Per call; `timeoutMs` on the wire, 15 s by default.
    #[serde(
        rename = "timeoutMs",
        default = "default_timeout",
        deserialize_with = "millis"
    )]
    pub timeout: Duration,
    /// A header sent with every call (name, value), e.g. a shared secret. Never logged.
    #[serde(default)]
    pub secret_header: Option<(String, String)>,
}

fn default_timeout() -> Duration {
    Duration::from_secs(15)
}

fn millis<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("points", &self.points)
            .field("priority", &self.priority)
            .field("timeout", &self.timeout)
            .field(
                "secret_header",
                &self.secret_header.as_ref().map(|(n, _)| (n, "<redacted>")),
            )
            .finish_non_exhaustive()
    }
}

/// A webhook configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The URL is not an `http://` or `https://` URL.
    #[error("webhook {name:?}: the URL is not an http(s) URL")]
    Url {
        /// The webhook's name.
        name: String,
    },
    /// The webhook lists no hook point.
    #[error("webhook {name:?}: listens at no hook point")]
    NoPoints {
        /// The webhook's name.
        name: String,
    },
    /// `timeoutMs` is zero.
    #[error("webhook {name:?}: the timeout must be above zero")]
    ZeroTimeout {
        /// The webhook's name.
        name: String,
    },
    /// The secret header's name or value is not a valid HTTP header.
    #[error("webhook {name:?}: invalid secret header")]
    Header {
        /// The webhook's name.
        name: String,
    },
    /// The HTTP client could not be built.
    #[error("webhook {name:?}: HTTP client: {reason}")]
    Client {
        /// The webhook's name.
        name: String,
        /// What the client library reported.
        reason: String,
    },
}

/// A hook answered over HTTP.
pub struct WebhookHook {
    config: WebhookConfig,
    url: reqwest::Url,
    header: Option<(HeaderName, HeaderValue)>,
    client: reqwest::Client,
}

impl fmt::Debug for WebhookHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WebhookHook {
    /// The largest answer read; a longer one is an error.
    pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

    /// Checks `config` and builds the HTTP client (no redirects, no proxy).
    pub fn new(config: WebhookConfig) -> Result<Self, WebhookError> {
        let name = config.name.clone();
        let url = reqwest::Url::parse(&config.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| WebhookError::Url { name: name.clone() })?;
        if config.points.is_empty() {
            return Err(WebhookError::NoPoints { name });
        }
        if config.timeout.is_zero() {
            return Err(WebhookError::ZeroTimeout { name });
        }
        let header = match &config.secret_header {
            None => None,
            Some((n, v)) => {
                let n = HeaderName::from_bytes(n.as_bytes())
                    .map_err(|_| WebhookError::Header { name: name.clone() })?;
                let mut v = HeaderValue::from_str(v)
                    .map_err(|_| WebhookError::Header { name: name.clone() })?;
                v.set_sensitive(true);
                Some((n, v))
            }
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .build()
            .map_err(|e| WebhookError::Client {
                name,
                reason: e.without_url().to_string(),
            })?;
        Ok(Self {
            config,
            url,
            header,
            client,
        })
    }

    async fn post(&self, ctx: &HookContext, event: &HookEvent) -> Result<Vec<u8>, HookError> {
        let mut request = self
            .client
            .post(self.url.clone())
            .json(&request_body(ctx, event));
        if let Some((n, v)) = &self.header {
            request = request.header(n.clone(), v.clone());
        }
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(HookError::Status(status.as_u16()));
        }
        let cap = Self::MAX_RESPONSE_BYTES;
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Err(HookError::TooLarge(cap));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + chunk.len() > cap {
                return Err(HookError::TooLarge(cap));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// A transport failure, described without the URL.
    fn transport(&self, e: reqwest::Error) -> HookError {
        if e.is_timeout() {
            return HookError::Timeout(self.config.timeout);
        }
        let e = e.without_url();
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        HookError::Transport(text)
    }
}

#[async_trait]
impl Hook for WebhookHook {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn priority(&self) -> i32 {
        self.config.priority
    }

    fn points(&self) -> &[HookPoint] {
        &self.config.points
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.config.timeout)
    }

    async fn call(&self, ctx: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
        let body = self.post(ctx, event).await?;
        parse_response(event.point(), &body)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn config(url: &str) -> WebhookConfig {
        serde_json::from_value(serde_json::json!({
            "name": "audit",
            "url": url,
            "points": ["before_tool_call"],
            "secretHeader": ["x-hook-secret", "s3cret"],
        }))
        .unwrap()
    }

    #[test]
    fn config_defaults_and_debug_redacts_the_secret() {
        let c = config("http://127.0.0.1:9/hook");
        assert_eq!(c.timeout, Duration::from_secs(15));
        assert_eq!(c.priority, 0);
        let shown = format!("{c:?}");
        assert!(shown.contains("x-hook-secret"));
        assert!(!shown.contains("s3cret"));
        let hook = WebhookHook::new(c).unwrap();
        assert!(!format!("{hook:?}").contains("s3cret"));
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(matches!(
            WebhookHook::new(config("ftp://127.0.0.1/x")),
            Err(WebhookError::Url { .. })
        ));
        assert!(matches!(
            WebhookHook::new(config("not a url")),
            Err(WebhookError::Url { .. })
        ));
        let mut c = config("http://127.0.0.1:9/");
        c.points.clear();
        assert!(matches!(
            WebhookHook::new(c),
            Err(WebhookError::NoPoints { .. })
        ));
        let mut c = config("http://127.0.0.1:9/");
        c.timeout = Duration::ZERO;
        assert!(matches!(
            WebhookHook::new(c),
            Err(WebhookError::ZeroTimeout { .. })
        ));
        let mut c = config("http://127.0.0.1:9/");
        c.secret_header = Some(("bad header".into(), "v".into()));
        assert!(matches!(
            WebhookHook::new(c),
            Err(WebhookError::Header { .. })
        ));
    }
}
