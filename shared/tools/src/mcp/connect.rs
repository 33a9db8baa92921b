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
use crate::oauth::{AccessToken, ClientCredentials, TokenCache, TokenError};
use crate::ssrf::SsrfPolicy;
use futures::stream::BoxStream;
use rmcp::model::{ClientCapabilities, ClientConfig, ClientJsonRpcMessage, Implementation};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A live MCP client session.
pub(crate) type Session = RunningService<RoleClient, ClientConfig>;

type Headers = HashMap<http::HeaderName, http::HeaderValue>;
type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// The transport's HTTP client: the guarded reqwest client, and with OAuth a bearer token on
/// every request, fresh from the cache (so a long-lived session never sends an expired one).
/// A request answered `401` drops the token and is sent once more with a new one.
#[derive(Clone)]
pub(crate) struct BearerClient {
    inner: reqwest::Client,
    auth: Option<Arc<(ClientCredentials, TokenCache)>>,
}

/// Whether the server refused the request's credentials (rmcp keeps the status only in text
/// when the 401 has no `WWW-Authenticate`).
fn unauthorized(err: &StreamableHttpError<reqwest::Error>) -> bool {
    match err {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::UnexpectedServerResponse(text) => text.starts_with("HTTP 401"),
        StreamableHttpError::Client(e) => e.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        _ => false,
    }
}

impl BearerClient {
    /// The token to send, as rmcp's `auth_header` (it adds `Bearer `); `None` without OAuth.
    async fn token(&self) -> HttpResult<Option<AccessToken>> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        auth.1.token(&auth.0).await.map(Some).map_err(|e| {
            StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "no OAuth token: {e}"
            )))
        })
    }

    /// Drops `stale` after a 401, and whether there is a new token to try (OAuth only).
    fn refresh(&self, stale: &Option<AccessToken>) -> bool {
        match (&self.auth, stale) {
            (Some(auth), Some(stale)) => {
                tracing::debug!("MCP server answered 401 to an OAuth token; refreshing it");
                auth.1.invalidate(&auth.0, stale);
                true
            }
            _ => false,
        }
    }
}

fn secret(token: &Option<AccessToken>, fallback: Option<String>) -> Option<String> {
    token.as_ref().map(|t| t.secret().to_owned()).or(fallback)
}

impl StreamableHttpClient for BearerClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let token = self.token().await?;
        let first = self
            .inner
            .post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                secret(&token, auth_header.clone()),
                custom_headers.clone(),
                limits,
            )
            .await;
        match first {
            Err(err) if unauthorized(&err) && self.refresh(&token) => {
                let token = self.token().await?;
                self.inner
                    .post_message_with_response_limits(
                        uri,
                        message,
                        session_id,
                        secret(&token, auth_header),
                        custom_headers,
                        limits,
                    )
                    .await
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<()> {
        let token = self.token().await?;
        self.inner
            .delete_session(uri, session_id, secret(&token, auth_header), custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        let token = self.token().await?;
        let first = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                secret(&token, auth_header.clone()),
                custom_headers.clone(),
                max_sse_event_size,
            )
            .await;
        match first {
            Err(err) if unauthorized(&err) && self.refresh(&token) => {
                let token = self.token().await?;
                self.inner
                    .get_stream_with_max_sse_event_size(
                        uri,
                        session_id,
                        last_event_id,
                        secret(&token, auth_header),
                        custom_headers,
                        max_sse_event_size,
                    )
                    .await
            }
            other => other,
        }
    }
}

/// The resolver's refusal, found again in the error chain to report it as blocked.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// reqwest's resolver: resolves with `inner`, then refuses the whole answer if any address is
/// refused by the policy. The client it serves reaches one server URL, so `port` is the port
/// connected to: an allow-list entry naming it admits, as it does for HTTP tools.
struct GuardedResolver {
    policy: SsrfPolicy,
    inner: Arc<dyn Resolve>,
    port: Option<u16>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let inner = self.inner.clone();
        let host = name.as_str().to_owned();
        let port = self.port;
        Box::pin(async move {
            let addrs = inner.resolve(&host, 0).await?;
            if addrs.is_empty() {
                return Err(format!("{host} has no address").into());
            }
            for addr in &addrs {
                let checked = match port {
                    Some(port) => policy.check_address_on(&host, addr.ip(), port),
                    None => policy.check_address(&host, addr.ip()),
                };
                if let Err(err) = checked {
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
    /// OAuth client credentials and the cache their tokens come from.
    pub(crate) auth: Option<(ClientCredentials, TokenCache)>,
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
    /// Scrubs header values and the OAuth client secret from `text`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let text = super::config::redact(&self.headers, text);
        match &self.auth {
            Some((creds, _)) => creds.redact(&text),
            None => text,
        }
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

    fn http_client(&self, server: &str) -> Result<BearerClient, McpError> {
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
                port: url.port_or_known_default(),
            }))
            .build()
            .map(|inner| BearerClient {
                inner,
                auth: self.auth.clone().map(Arc::new),
            })
            .map_err(|e| self.failure(server, &e))
    }

    /// With OAuth, a token in the cache before the session opens, so that a refused or
    /// unreachable token endpoint is reported as such (blocked, or unavailable).
    async fn prefetch_token(&self, server: &str) -> Result<(), McpError> {
        let Some((creds, tokens)) = &self.auth else {
            return Ok(());
        };
        match tokens.token(creds).await {
            Ok(_) => Ok(()),
            Err(TokenError::Blocked(reason)) => Err(McpError::Blocked {
                server: server.to_owned(),
                reason: self.redact(&reason),
            }),
            Err(TokenError::Failed(message)) => Err(McpError::Unavailable {
                server: server.to_owned(),
                message: self.redact(&message),
            }),
        }
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
        match tokio::time::timeout(timeout, self.prefetch_token(server)).await {
            Ok(fetched) => fetched?,
            Err(_) => {
                return Err(McpError::Timeout {
                    server: server.to_owned(),
                    ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
        }
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
