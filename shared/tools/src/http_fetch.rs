//! `http_fetch`: GET a URL and return its status, content type and (text) body, behind the
//! [`ssrf`](crate::ssrf) guard.
//!
//! The host is resolved here, every resolved address is checked, and the connection is pinned to
//! the checked addresses (so a second, rebinding DNS answer is never used; see [`net`](crate::net)).
//! Redirects are followed by hand, each hop checked again. Time and size are bounded.

use crate::net;
use crate::ssrf::SsrfPolicy;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use futures::StreamExt;
use reqwest::{Url, header};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

pub use crate::net::{Resolve, SystemResolver};

/// The tool's name.
pub const NAME: &str = "http_fetch";

/// Limits and the SSRF policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFetchConfig {
    /// What may be reached (allow list, redirect cap).
    pub policy: SsrfPolicy,
    /// For the whole fetch: resolution, every redirect hop and the body.
    pub timeout: Duration,
    /// Body bytes read at most; the model may ask for fewer (`maxBytes`), never more.
    pub max_bytes: usize,
    /// Sent as `User-Agent`.
    pub user_agent: String,
}

impl Default for HttpFetchConfig {
    fn default() -> Self {
        Self {
            policy: SsrfPolicy::default(),
            timeout: Duration::from_secs(10),
            max_bytes: 256 * 1024,
            user_agent: concat!("agentlane/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// What one fetch returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// After redirects.
    pub url: Url,
    /// The final answer's HTTP status.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body as text (lossy UTF-8), or a note when it is binary.
    pub body: String,
    /// The body was longer than the limit and was cut.
    pub truncated: bool,
}

impl Fetched {
    /// The text the model sees.
    pub fn render(&self, limit: usize) -> String {
        let reason = reqwest::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut out = format!(
            "URL: {}\nStatus: {} {reason}\nContent-Type: {}\n\n{}",
            self.url,
            self.status,
            self.content_type.as_deref().unwrap_or("(none)"),
            self.body
        );
        if self.truncated {
            out.push_str(&format!(
                "\n[truncated: the body is longer than {limit} bytes]"
            ));
        }
        out
    }
}

/// The `http_fetch` tool.
#[derive(Clone)]
pub struct HttpFetch {
    config: HttpFetchConfig,
    resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for HttpFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFetch")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for HttpFetch {
    fn default() -> Self {
        Self::new(HttpFetchConfig::default())
    }
}

#[derive(Debug, Deserialize)]
struct Args {
    url: String,
    #[serde(default, rename = "maxBytes", alias = "max_bytes")]
    max_bytes: Option<u64>,
}

fn blocked_hop(url: &Url, err: ToolError) -> ToolError {
    match err {
        ToolError::Blocked(why) => ToolError::Blocked(format!("redirect to {url} refused: {why}")),
        other => other,
    }
}

fn request_error(err: &reqwest::Error, timeout: Duration) -> ToolError {
    if err.is_timeout() {
        return ToolError::Timeout(timeout.as_millis() as u64);
    }
    ToolError::Failed(net::error_chain(err))
}

/// Whether a content type is text the model can read (an absent one is treated as text).
fn is_text(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return true };
    let ct = ct.to_ascii_lowercase();
    ct.starts_with("text/")
        || [
            "json",
            "xml",
            "javascript",
            "ecmascript",
            "x-www-form-urlencoded",
            "yaml",
            "csv",
        ]
        .iter()
        .any(|t| ct.contains(t))
}

impl HttpFetch {
    /// Resolves host names with the system resolver.
    pub fn new(config: HttpFetchConfig) -> Self {
        Self::with_resolver(config, Arc::new(SystemResolver))
    }

    /// Resolves host names with `resolver` (tests, custom DNS).
    pub fn with_resolver(config: HttpFetchConfig, resolver: Arc<dyn Resolve>) -> Self {
        Self { config, resolver }
    }

    /// Its limits and policy.
    pub fn config(&self) -> &HttpFetchConfig {
        &self.config
    }

    /// Checks `url` and builds a client that can only connect to its checked addresses.
    async fn pinned_client(&self, url: &Url) -> Result<reqwest::Client, ToolError> {
        let builder = reqwest::Client::builder()
            .user_agent(self.config.user_agent.as_str())
            .connect_timeout(self.config.timeout);
        net::pinned_client(&self.config.policy, self.resolver.as_ref(), url, builder).await
    }

    /// GETs `url`, following at most `policy.max_redirects` checked redirects, and reads at most
    /// `max_bytes` of the body. No time limit of its own: [`Tool::call`] applies it.
    pub async fn fetch(&self, url: &str, max_bytes: usize) -> Result<Fetched, ToolError> {
        let mut url = Url::parse(url)
            .map_err(|e| ToolError::InvalidArguments(format!("invalid URL {url:?}: {e}")))?;
        let mut hops = 0;
        loop {
            let client = self.pinned_client(&url).await.map_err(|e| match hops {
                0 => e,
                _ => blocked_hop(&url, e),
            })?;
            let response = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| request_error(&e, self.config.timeout))?;
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let (true, Some(location)) = (response.status().is_redirection(), location) {
                if hops == self.config.policy.max_redirects {
                    return Err(ToolError::Failed(format!(
                        "too many redirects (more than {})",
                        self.config.policy.max_redirects
                    )));
                }
                url = url.join(&location).map_err(|e| {
                    ToolError::Failed(format!("invalid redirect location {location:?}: {e}"))
                })?;
                hops += 1;
                continue;
            }
            return self.read(url, response, max_bytes).await;
        }
    }

    async fn read(
        &self,
        url: Url,
        response: reqwest::Response,
        max_bytes: usize,
    ) -> Result<Fetched, ToolError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut truncated = false;
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| request_error(&e, self.config.timeout))?;
            body.extend_from_slice(&chunk);
            if body.len() > max_bytes {
                body.truncate(max_bytes);
                truncated = true;
                break;
            }
        }
        let body = if is_text(content_type.as_deref()) {
            String::from_utf8_lossy(&body).into_owned()
        } else {
            format!("[binary body omitted: {} bytes read]", body.len())
        };
        Ok(Fetched {
            url,
            status,
            content_type,
            body,
            truncated,
        })
    }
}

#[async_trait]
impl Tool for HttpFetch {
    /// The fetch's own timeout bounds the whole call (redirects and body included).
    fn timeout(&self) -> Option<Duration> {
        Some(self.config.timeout)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: format!(
                "Fetches a public http(s) URL with GET and returns the status, content type and \
                 text body (at most {} bytes). Private and local addresses are refused.",
                self.config.max_bytes
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "An absolute http or https URL"},
                    "maxBytes": {"type": "integer", "minimum": 1, "description": "Read at most this many body bytes"},
                },
                "required": ["url"],
            }),
        }
    }

    async fn call(&self, arguments: &str, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = serde_json::from_str(arguments).map_err(|e| {
            ToolError::InvalidArguments(format!(
                "expected {{\"url\": string, \"maxBytes\"?: integer}}: {e}"
            ))
        })?;
        let limit = args
            .max_bytes
            .map_or(self.config.max_bytes, |m| {
                usize::try_from(m)
                    .unwrap_or(usize::MAX)
                    .min(self.config.max_bytes)
            })
            .max(1);
        let timeout = self.config.timeout;
        let fetched = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            done = tokio::time::timeout(timeout, self.fetch(&args.url, limit)) => match done {
                Ok(result) => result?,
                Err(_) => return Err(ToolError::Timeout(timeout.as_millis() as u64)),
            },
        };
        tracing::debug!(
            tool = NAME,
            status = fetched.status,
            truncated = fetched.truncated,
            "fetched"
        );
        Ok(ToolOutput {
            content: fetched.render(limit),
        })
    }
}
