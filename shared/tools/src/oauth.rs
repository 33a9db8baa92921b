//! OAuth 2.0 client credentials (RFC 6749 §4.4) for an agent's HTTP tools and MCP servers: the
//! runner fetches an access token from the tool's token endpoint and sends it as
//! `Authorization: Bearer <token>`.
//!
//! [`TokenCache`] is process-wide (clone-cheap, one shared state). A token is reused until
//! shortly before it expires ([`reuse_for`]), keyed by tenant, token URL, client id, scopes and
//! a SHA-256 of the client secret: a rotated secret gets a new token, and two tenants never
//! share one. Concurrent callers of one key make a single request to the token endpoint, and a
//! failure is shared by the callers that were waiting on it. [`TokenCache::invalidate`] drops a
//! token the resource server refused (a `401`), so that the next call fetches a new one.
//!
//! The request is made by the `oauth2` crate (client id and secret with HTTP Basic,
//! `grant_type=client_credentials`, the scopes space-separated) through our own reqwest client,
//! behind the same SSRF guard as the tools ([`net`](crate::net)): the token URL and every
//! address its host resolves to are checked, the connection is pinned to them, no redirect is
//! followed and no proxy used. The answer is read with a byte cap.
//!
//! The client secret and the tokens are secrets: they never appear in errors, `Debug` output or
//! logs.

use crate::ToolError;
use crate::net::{self, Resolve, SystemResolver};
use crate::ssrf::SsrfPolicy;
use oauth2::{ClientId, ClientSecret, RequestTokenError, Scope, TokenResponse, TokenUrl};
use reqwest::Url;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A token is dropped this long before the authorization server says it expires.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long a token is reused when the token endpoint gives no `expires_in`.
pub const DEFAULT_REUSE: Duration = Duration::from_secs(5 * 60);
/// Time limit of one token request (connecting, sending, reading the answer).
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of a token endpoint's answer read at most.
pub const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;
/// Keys kept before entries whose token has expired are dropped.
const PRUNE_ABOVE: usize = 256;
/// Secrets shorter than this are not searched for in error texts.
const MIN_REDACTED_LEN: usize = 4;
const REDACTED: &str = "[redacted]";
/// Characters of the token endpoint's own error text kept in an error.
const MAX_QUOTED_CHARS: usize = 300;

/// How one tool or server gets its tokens, its client secret resolved.
///
/// `Debug` shows everything but the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The tenant whose agent names the tool: tokens are never shared across tenants.
    pub tenant: String,
    /// The token endpoint (`http(s)://…`).
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The client secret, resolved from its reference. Secret.
    pub client_secret: String,
    /// Scopes asked for; none: the authorization server's default.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("tenant", &self.tenant)
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &REDACTED)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl ClientCredentials {
    /// Checks what a request needs: an http(s) token URL with a host and no credentials, and a
    /// client id. Messages carry no secret.
    pub fn check(&self) -> Result<(), String> {
        let url =
            Url::parse(&self.token_url).map_err(|e| format!("the token URL is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err("the token URL must be an http or https URL with a host".to_owned());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the token URL must not carry credentials (user:pass@)".to_owned());
        }
        if self.client_id.is_empty() {
            return Err("the client id must not be empty".to_owned());
        }
        Ok(())
    }

    /// `text` with the client secret replaced, and the HTTP Basic credential that carries it
    /// (an authorization server could echo the `Authorization` it got).
    pub fn redact(&self, text: &str) -> String {
        use base64::Engine;
        let encoded =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encoded(&self.client_id),
            encoded(&self.client_secret)
        ));
        redact(&redact(text, &self.client_secret), &basic)
    }

    /// What the cache keys its token by.
    pub(crate) fn key(&self) -> CacheKey {
        let mut scopes = self.scopes.clone();
        scopes.sort();
        scopes.dedup();
        CacheKey {
            tenant: self.tenant.clone(),
            token_url: self.token_url.clone(),
            client_id: self.client_id.clone(),
            scopes,
            secret_sha256: Sha256::digest(self.client_secret.as_bytes()).to_vec(),
        }
    }
}

/// A cache entry's identity: never the secret itself, a SHA-256 of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey {
    tenant: String,
    token_url: String,
    client_id: String,
    /// Sorted, without duplicates.
    scopes: Vec<String>,
    secret_sha256: Vec<u8>,
}

/// An access token and until when it is reused. `Debug` hides the token.
#[derive(Clone)]
pub struct AccessToken {
    value: Arc<str>,
    reuse_until: Instant,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("value", &REDACTED)
            .field("reuse_until", &self.reuse_until)
            .finish()
    }
}

impl AccessToken {
    /// The token itself. Secret.
    pub fn secret(&self) -> &str {
        &self.value
    }

    /// Whether it is still reused.
    pub fn is_fresh(&self) -> bool {
        Instant::now() < self.reuse_until
    }

    /// `Bearer <token>` as a header value, marked sensitive (`Debug` of the HTTP stack hides it).
    pub fn header_value(&self) -> Result<http::HeaderValue, TokenError> {
        let mut value =
            http::HeaderValue::from_str(&format!("Bearer {}", self.value)).map_err(|_| {
                TokenError::Failed("the access token is not a valid header value".to_owned())
            })?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// `text` with the token replaced.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &self.value)
    }
}

/// Why no token could be had. Never carries the client secret or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The SSRF guard refused the token endpoint.
    #[error("{0}")]
    Blocked(String),
    /// It could not be reached, refused the client, or did not answer with a token.
    #[error("{0}")]
    Failed(String),
}

impl From<TokenError> for ToolError {
    fn from(err: TokenError) -> Self {
        match err {
            TokenError::Blocked(why) => ToolError::Blocked(why),
            TokenError::Failed(why) => ToolError::Failed(why),
        }
    }
}

/// How long a token is reused: `expires_in` less [`EXPIRY_MARGIN`]; half its lifetime when
/// that is under twice the margin (a short-lived token is still reused a little);
/// [`DEFAULT_REUSE`] when the token endpoint gives no lifetime.
pub fn reuse_for(expires_in: Option<Duration>) -> Duration {
    match expires_in {
        None => DEFAULT_REUSE,
        Some(lifetime) if lifetime >= EXPIRY_MARGIN * 2 => lifetime - EXPIRY_MARGIN,
        Some(lifetime) => lifetime / 2,
    }
}

/// `text` with every occurrence of `secret` replaced (a secret too short to search is left).
fn redact(text: &str, secret: &str) -> String {
    if secret.len() >= MIN_REDACTED_LEN && text.contains(secret) {
        text.replace(secret, REDACTED)
    } else {
        text.to_owned()
    }
}

/// One key's token, and the request under way.
#[derive(Default)]
struct Slot {
    /// Held while a request is under way: concurrent callers wait for its answer.
    fetching: tokio::sync::Mutex<()>,
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    token: Option<AccessToken>,
    /// The last failure and when it happened: callers that were waiting share it.
    failure: Option<(Instant, TokenError)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slot {
    fn fresh(&self) -> Option<AccessToken> {
        lock(&self.state)
            .token
            .as_ref()
            .filter(|t| t.is_fresh())
            .cloned()
    }
}

struct Inner {
    policy: SsrfPolicy,
    resolver: Arc<dyn Resolve>,
    slots: Mutex<HashMap<CacheKey, Arc<Slot>>>,
}

/// Access tokens for every run of the process (see the module docs). Clone-cheap.
#[derive(Clone)]
pub struct TokenCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("policy", &self.inner.policy)
            .field("keys", &lock(&self.inner.slots).len())
            .finish()
    }
}

impl TokenCache {
    /// Reaches token endpoints only where `ssrf` allows (the tools' own policy), resolving
    /// names with the system resolver.
    pub fn new(ssrf: SsrfPolicy) -> Self {
        Self::with_resolver(ssrf, Arc::new(SystemResolver))
    }

    /// As [`TokenCache::new`], resolving host names with `resolver` (tests, custom DNS).
    pub fn with_resolver(ssrf: SsrfPolicy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            inner: Arc::new(Inner {
                policy: ssrf,
                resolver,
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn slot(&self, key: CacheKey) -> Arc<Slot> {
        let mut slots = lock(&self.inner.slots);
        if slots.len() > PRUNE_ABOVE && !slots.contains_key(&key) {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.fresh().is_some());
        }
        slots.entry(key).or_default().clone()
    }

    /// A token for `cfg`: the cached one while it is fresh, else one fetched now (once for all
    /// the callers asking at the same time).
    pub async fn token(&self, cfg: &ClientCredentials) -> Result<AccessToken, TokenError> {
        let slot = self.slot(cfg.key());
        if let Some(token) = slot.fresh() {
            return Ok(token);
        }
        let asked = Instant::now();
        let _fetching = slot.fetching.lock().await;
        {
            let state = lock(&slot.state);
            if let Some(token) = state.token.as_ref().filter(|t| t.is_fresh()) {
                return Ok(token.clone());
            }
            if let Some((at, err)) = &state.failure
                && *at >= asked
            {
                return Err(err.clone());
            }
        }
        let started = Instant::now();
        let fetched = self.fetch(cfg).await;
        tracing::debug!(
            token_url = %shown_url(&cfg.token_url),
            client_id = %cfg.client_id,
            ok = fetched.is_ok(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "OAuth token request"
        );
        let mut state = lock(&slot.state);
        match fetched {
            Ok(token) => {
                state.token = Some(token.clone());
                state.failure = None;
                Ok(token)
            }
            Err(err) => {
                state.failure = Some((Instant::now(), err.clone()));
                Err(err)
            }
        }
    }

    /// Drops `stale`, a token of `cfg` the resource server refused, so that the next
    /// [`token`](Self::token) fetches a new one. A newer token (another caller refreshed
    /// already) is kept.
    pub fn invalidate(&self, cfg: &ClientCredentials, stale: &AccessToken) {
        let slot = self.slot(cfg.key());
        let mut state = lock(&slot.state);
        if state
            .token
            .as_ref()
            .is_some_and(|t| t.secret() == stale.secret())
        {
            state.token = None;
        }
    }

    /// One client-credentials request.
    async fn fetch(&self, cfg: &ClientCredentials) -> Result<AccessToken, TokenError> {
        let shown = shown_url(&cfg.token_url);
        let failed = |why: &str| {
            TokenError::Failed(cfg.redact(&format!(
                "OAuth token endpoint {shown} (client {:?}): {why}",
                cfg.client_id
            )))
        };
        cfg.check().map_err(|why| failed(&why))?;
        let url = Url::parse(&cfg.token_url).map_err(|e| failed(&e.to_string()))?;
        let client = net::pinned_client(
            &self.inner.policy,
            self.inner.resolver.as_ref(),
            &url,
            reqwest::Client::builder()
                .user_agent(concat!("agentlane/", env!("CARGO_PKG_VERSION")))
                .timeout(TOKEN_TIMEOUT),
        )
        .await
        .map_err(|e| match e {
            ToolError::Blocked(why) => {
                TokenError::Blocked(cfg.redact(&format!("OAuth token endpoint {shown}: {why}")))
            }
            other => failed(&other.to_string()),
        })?;
        let oauth = oauth2::basic::BasicClient::new(ClientId::new(cfg.client_id.clone()))
            .set_client_secret(ClientSecret::new(cfg.client_secret.clone()))
            .set_token_uri(TokenUrl::from_url(url));
        // Owned by the future (not borrowed): it must be `Send` for any lifetime.
        let status = Arc::new(Mutex::new(None));
        let send = {
            let status = status.clone();
            move |request: oauth2::HttpRequest| {
                let client = client.clone();
                let status = status.clone();
                async move {
                    let response = send(&client, request).await?;
                    *lock(&status) = Some(response.status());
                    Ok::<_, HttpFailure>(response)
                }
            }
        };
        let answer = oauth
            .exchange_client_credentials()
            .add_scopes(cfg.scopes.iter().cloned().map(Scope::new))
            .request_async(&send)
            .await;
        let answered = lock(&status).map(|s| match s.canonical_reason() {
            Some(reason) => format!("{} {reason}", s.as_u16()),
            None => s.as_u16().to_string(),
        });
        let answered = answered.as_deref().unwrap_or("?");
        let response = answer.map_err(|err| {
            failed(&match err {
                RequestTokenError::ServerResponse(e) => format!(
                    "answered {answered}: {}",
                    clip(&e.to_string(), MAX_QUOTED_CHARS)
                ),
                RequestTokenError::Request(e) => e.0,
                RequestTokenError::Parse(e, _) => format!(
                    "answered {answered} without a token response: {} (at {})",
                    clip(&e.inner().to_string(), MAX_QUOTED_CHARS),
                    e.path()
                ),
                RequestTokenError::Other(why) => format!("answered {answered}: {why}"),
            })
        })?;
        let value = response.access_token().secret();
        if value.is_empty() {
            return Err(failed("answered an empty access_token"));
        }
        Ok(AccessToken {
            value: Arc::from(value.as_str()),
            reuse_until: Instant::now() + reuse_for(response.expires_in()),
        })
    }
}

/// A failed token request, said without the URL's query.
#[derive(Debug)]
struct HttpFailure(String);

impl std::fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HttpFailure {}

/// The `oauth2` crate's request sent with our (guarded) client; the answer read with a cap.
async fn send(
    client: &reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpFailure> {
    let request = reqwest::Request::try_from(request)
        .map_err(|e| HttpFailure(format!("could not build the request: {e}")))?;
    let described = |e: reqwest::Error| {
        if e.is_timeout() {
            HttpFailure(format!("no answer within {} s", TOKEN_TIMEOUT.as_secs()))
        } else if e.is_connect() {
            HttpFailure(format!(
                "could not connect: {}",
                net::error_chain(&e.without_url())
            ))
        } else {
            HttpFailure(format!(
                "request failed: {}",
                net::error_chain(&e.without_url())
            ))
        }
    };
    let mut response = client.execute(request).await.map_err(described)?;
    let mut answer = http::Response::builder().status(response.status());
    if let Some(headers) = answer.headers_mut() {
        *headers = response.headers().clone();
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(described)? {
        if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
            return Err(HttpFailure(format!(
                "the answer is over {MAX_TOKEN_RESPONSE_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    answer
        .body(body)
        .map_err(|e| HttpFailure(format!("could not read the answer: {e}")))
}

/// The token URL as errors and logs show it: without query or fragment.
fn shown_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut url) => {
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "(invalid URL)".to_owned(),
    }
}

fn clip(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(tenant: &str, secret: &str, scopes: &[&str]) -> ClientCredentials {
        ClientCredentials {
            tenant: tenant.into(),
            token_url: "https://auth.example/token".into(),
            client_id: "app".into(),
            client_secret: secret.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn tokens_are_reused_until_shortly_before_they_expire() {
        let s = Duration::from_secs;
        for (expires_in, reused) in [
            (None, s(300)),
            (Some(s(3600)), s(3570)),
            (Some(s(60)), s(30)),
            (Some(s(59)), Duration::from_millis(29_500)),
            (Some(s(2)), s(1)),
            (Some(s(0)), s(0)),
        ] {
            assert_eq!(reuse_for(expires_in), reused, "{expires_in:?}");
        }
    }

    #[test]
    fn the_key_separates_tenants_secrets_and_scopes_but_not_scope_order() {
        let base = creds("t1", "secret-1", &["a", "b"]);
        assert_eq!(base.key(), creds("t1", "secret-1", &["b", "a", "a"]).key());
        for other in [
            creds("t2", "secret-1", &["a", "b"]),
            creds("t1", "secret-2", &["a", "b"]),
            creds("t1", "secret-1", &["a"]),
            ClientCredentials {
                client_id: "other".into(),
                ..base.clone()
            },
            ClientCredentials {
                token_url: "https://auth.example/other".into(),
                ..base.clone()
            },
        ] {
            assert_ne!(base.key(), other.key(), "{other:?}");
        }
        assert!(!format!("{:?}", base.key()).contains("secret-1"));
    }

    #[test]
    fn debug_hides_the_secret_and_the_token() {
        let cfg = creds("t1", "hunter2-secret", &[]);
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("app"), "{shown}");
        let token = AccessToken {
            value: Arc::from("tok-abcdef"),
            reuse_until: Instant::now(),
        };
        assert!(!format!("{token:?}").contains("tok-abcdef"));
        assert_eq!(token.redact("x tok-abcdef y"), "x [redacted] y");
        assert_eq!(cfg.redact("hunter2-secret!"), "[redacted]!");
    }

    #[test]
    fn credentials_check() {
        assert_eq!(creds("t", "s", &[]).check(), Ok(()));
        for (url, id) in [
            ("ftp://auth.example/t", "app"),
            ("https://u:p@auth.example/t", "app"),
            ("nope", "app"),
            ("https://auth.example/t", ""),
        ] {
            let cfg = ClientCredentials {
                token_url: url.into(),
                client_id: id.into(),
                ..creds("t", "s", &[])
            };
            assert!(cfg.check().is_err(), "{url} {id}");
        }
    }
}
