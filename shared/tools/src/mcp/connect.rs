//! Connecting to an MCP server: an HTTP client behind the SSRF guard, and an rmcp client session
//! (initialize, protocol version negotiation, `mcp-session-id`) over Streamable HTTP.
//!
//! The guard runs twice: on the URL before anything (scheme, credentials, local names, address
//! literals) and in the HTTP client's DNS resolver, on every address every connection uses, so a
//! host name that resolves (or later re-resolves) to a refused address is never reached.
//! Redirects and proxies are off.

use super::McpError;
use crate::ToolError;
use crate::http_fetch::Resolve;
use crate::ssrf::SsrfPolicy;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A live MCP client session.
pub(crate) type Session = RunningService<RoleClient, ClientConfig>;

/// The resolver's refusal, found again in the error chain to report it as blocked.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// reqwest's resolver: resolves with `inner`, then refuses the whole answer if any address is
/// refused by the policy.
struct GuardedResolver {
    policy: SsrfPolicy,
    inner: Arc<dyn Resolve>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let inner = self.inner.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = inner.resolve(&host, 0).await?;
            if addrs.is_empty() {
                return Err(format!("{host} has no address").into());
            }
            for addr in &addrs {
                if let Err(err) = policy.check_address(&host, addr.ip()) {
                    let why = match err {
                        ToolError::Blocked(why) => why,
                        other => other.to_string(),
                    };
                    return Err(Box::new(Refused(format!("{host} resolves to {why}"))) as _);
                }
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The error below `err`: its source, or for rmcp errors that do not name their source (the
/// initialize failure, the HTTP client error) the error inside.
fn below<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(ClientInitializeError::TransportError { error, .. }) =
        err.downcast_ref::<ClientInitializeError>()
    {
        return Some(error);
    }
    if let Some(StreamableHttpError::Client(inner)) =
        err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    err.source()
}

/// The error chain of `err` as one line (without rmcp's wrapper levels), and the SSRF guard's
/// refusal if that is why the connection failed.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> (String, Option<String>) {
    let mut parts: Vec<String> = Vec::new();
    let mut refused = None;
    let mut level = Some(err);
    while let Some(current) = level {
        if let Some(why) = current.downcast_ref::<Refused>() {
            refused = Some(why.0.clone());
        }
        let wrapper = match current.downcast_ref::<ClientInitializeError>() {
            Some(ClientInitializeError::TransportError { context, .. }) => {
                parts.push(context.to_string());
                true
            }
            _ => {
                current.is::<rmcp::transport::DynamicTransportError>()
                    || matches!(
                        current.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
                        Some(StreamableHttpError::Client(_))
                    )
            }
        };
        if !wrapper {
            let text = current.to_string();
            if !parts.iter().any(|p| p.contains(&text)) {
                parts.push(text);
            }
        }
        level = below(current);
    }
    (parts.join(": "), refused)
}

/// How to reach one server (its URL and header values: never printed).
pub(crate) struct Connector {
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) policy: SsrfPolicy,
    pub(crate) resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// Scrubs header values from `text`.
    pub(crate) fn redact(&self, text: &str) -> String {
        super::config::redact(&self.headers, text)
    }

    /// A failure to reach the server, as an [`McpError`] without secrets.
    pub(crate) fn failure(
        &self,
        server: &str,
        err: &(dyn std::error::Error + 'static),
    ) -> McpError {
        match chain(err) {
            (_, Some(reason)) => McpError::Blocked {
                server: server.to_owned(),
                reason: self.redact(&reason),
            },
            (text, None) => McpError::Unavailable {
                server: server.to_owned(),
                message: self.redact(&text),
            },
        }
    }

    fn http_client(&self, server: &str) -> Result<reqwest::Client, McpError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| {
            McpError::InvalidConfig(format!("MCP server {server:?}: invalid url: {e}"))
        })?;
        self.policy
            .check_url(&url)
            .map_err(|err| McpError::Blocked {
                server: server.to_owned(),
                reason: match err {
                    ToolError::Blocked(why) => why,
                    other => other.to_string(),
                },
            })?;
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("agentlane/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(GuardedResolver {
                policy: self.policy.clone(),
                inner: self.resolver.clone(),
            }))
            .build()
            .map_err(|e| self.failure(server, &e))
    }

    fn headers(
        &self,
        server: &str,
    ) -> Result<HashMap<http::HeaderName, http::HeaderValue>, McpError> {
        let mut out = HashMap::new();
        for (name, value) in &self.headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                McpError::InvalidConfig(format!(
                    "MCP server {server:?}: invalid header name {name:?}"
                ))
            })?;
            let mut value = http::HeaderValue::from_str(value).map_err(|_| {
                McpError::InvalidConfig(format!(
                    "MCP server {server:?}: the value of header {name:?} is not a valid header value"
                ))
            })?;
            // Keeps it out of `Debug` output (hyper, reqwest, rmcp logs).
            value.set_sensitive(true);
            out.insert(name, value);
        }
        Ok(out)
    }

    /// Opens a session: the `initialize` handshake (rmcp negotiates the protocol version and
    /// keeps the `mcp-session-id`), within `timeout`. An expired session (HTTP 404) is
    /// re-initialized by the transport once and the request retried once.
    pub(crate) async fn connect(
        &self,
        server: &str,
        timeout: Duration,
    ) -> Result<Session, McpError> {
        let client = self.http_client(server)?;
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .custom_headers(self.headers(server)?)
            .reinit_on_expired_session(true);
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agentlane", env!("CARGO_PKG_VERSION")),
        );
        match tokio::time::timeout(timeout, rmcp::serve_client(info, transport)).await {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(err)) => Err(self.failure(server, &err)),
            Err(_) => Err(McpError::Timeout {
                server: server.to_owned(),
                ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}
