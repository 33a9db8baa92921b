//! HTTP tools: an agent's own tools (its `tools.http` entries), each a POST of the call's
//! arguments to the agent's endpoint, whose answer is the tool's result.
//!
//! A call is checked against the tool's JSON Schema before anything is sent, then POSTed as
//! JSON with `X-Agentlane-Run`, `X-Agentlane-Tool-Call` (the receiver's idempotency key), the
//! configured headers and, with a signing secret, `X-Agentlane-Signature` (see [`signature`]).
//! The endpoint is reached behind the same SSRF guard as `http_fetch` ([`net`](crate::net)):
//! resolved and checked at every attempt, the connection pinned to the checked addresses (a
//! client, and its open connections, is kept while they stay the same), redirects not followed.
//! Answers are read with a byte cap. Only an `idempotent` tool is retried, and only on connect
//! errors and 5xx answers.
//!
//! Header values and the signing secret are secrets: they never appear in errors, `Debug`
//! output or logs.

use crate::net::{self, Resolve, SystemResolver};
use crate::oauth::{AccessToken, ClientCredentials, TokenCache};
use crate::ssrf::SsrfPolicy;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The time limit of one attempt when the definition names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest time limit a definition may set.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Bytes of a 2xx answer kept as the result; the rest is cut, with a marker.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// Bytes of a non-2xx answer quoted in the error.
pub const MAX_ERROR_BODY_BYTES: usize = 2 * 1024;
/// The longest description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4 * 1024;
/// Retries of an idempotent tool after a connect error or a 5xx answer.
pub const MAX_RETRIES: u32 = 2;

/// The run making the call.
pub const HEADER_RUN: &str = "x-agentlane-run";
/// The model's id of the call, unique within the run.
pub const HEADER_TOOL_CALL: &str = "x-agentlane-tool-call";
/// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, with a signing secret.
pub const HEADER_SIGNATURE: &str = "x-agentlane-signature";

/// Configured headers may not set these: agentlane sets them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// Whether a configured header named `name` (any case) is one agentlane sets itself, so a
/// definition may not configure it (`Host`, `Content-Type`, …, `X-Agentlane-*`).
pub fn is_reserved_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-agentlane-")
}

/// Secrets shorter than this are not searched for in error texts (they would match anywhere).
const MIN_REDACTED_LEN: usize = 4;
const REDACTED: &str = "[redacted]";
const MAX_LISTED_VIOLATIONS: usize = 20;
const MAX_VIOLATION_CHARS: usize = 300;

/// One HTTP tool as an agent defines it, with its secrets resolved.
#[derive(Clone, PartialEq)]
pub struct HttpToolConfig {
    /// The name the model calls it by: `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// What the model is told it does (non-empty, at most 4 KiB).
    pub description: String,
    /// A JSON Schema for an object: the call's arguments.
    pub parameters: serde_json::Value,
    /// The http(s) endpoint the arguments are POSTed to.
    pub url: String,
    /// Sent with every call, values resolved from their secret references. Secret: never in
    /// errors, `Debug` or logs.
    pub headers: Vec<(String, String)>,
    /// For one attempt: connecting, sending and reading the answer ([`DEFAULT_TIMEOUT`],
    /// at most [`MAX_TIMEOUT`]).
    pub timeout: Duration,
    /// Signs each request (`X-Agentlane-Signature`) when set. Secret.
    pub signing_secret: Option<String>,
    /// Safe to send twice: connect errors and 5xx answers are retried (twice at most).
    pub idempotent: bool,
    /// OAuth 2.0 client credentials: each call sends `Authorization: Bearer <token>` (from the
    /// tool's [`TokenCache`]); a `401` drops the token and the call is sent once more with a
    /// new one. No `Authorization` header may be configured beside it. Its secret never shows.
    pub auth: Option<ClientCredentials>,
}

impl std::fmt::Debug for HttpToolConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, _)| (name.as_str(), REDACTED))
            .collect();
        f.debug_struct("HttpToolConfig")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("parameters", &self.parameters)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field(
                "signing_secret",
                &self.signing_secret.as_ref().map(|_| REDACTED),
            )
            .field("idempotent", &self.idempotent)
            .field("auth", &self.auth)
            .finish()
    }
}

/// A definition field that is not acceptable, and why. The API answers 400 naming `field`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DefinitionError {
    /// The definition's field, as the API spells it: `name`, `description`, `parameters`,
    /// `url`, `timeoutMs`; from [`HttpTool::new`] also `headers` and `signingSecret`.
    pub field: &'static str,
    /// What is wrong with it (never a header value or secret).
    pub message: String,
}

impl DefinitionError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// Checks a definition at create time: `name` matches `^[a-zA-Z0-9_-]{1,64}$`, `description`
/// is not blank and at most 4 KiB, `parameters` is a valid JSON Schema (it compiles, against its
/// meta-schema too) for an object, `url` is http(s) with a host and no credentials, and
/// `timeout_ms` is between 1 and 300 000.
pub fn check_definition(
    name: &str,
    description: &str,
    parameters: &serde_json::Value,
    url: &str,
    timeout_ms: Option<u64>,
) -> Result<(), DefinitionError> {
    check_name(name)?;
    check_description(description)?;
    compile_parameters(parameters)?;
    check_endpoint(url)?;
    if let Some(ms) = timeout_ms {
        check_timeout(Duration::from_millis(ms))?;
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), DefinitionError> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(DefinitionError::new(
            "name",
            "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
        ))
    }
}

fn check_description(description: &str) -> Result<(), DefinitionError> {
    if description.trim().is_empty() {
        return Err(DefinitionError::new("description", "must not be empty"));
    }
    if description.len() > MAX_DESCRIPTION_BYTES {
        return Err(DefinitionError::new(
            "description",
            format!(
                "is {} bytes; at most {MAX_DESCRIPTION_BYTES} are allowed",
                description.len()
            ),
        ));
    }
    Ok(())
}

/// Compiles the parameters schema (without fetching any remote or file `$ref`).
fn compile_parameters(
    parameters: &serde_json::Value,
) -> Result<jsonschema::Validator, DefinitionError> {
    let is_object_schema = parameters
        .as_object()
        .and_then(|o| o.get("type"))
        .and_then(serde_json::Value::as_str)
        == Some("object");
    if !is_object_schema {
        return Err(DefinitionError::new(
            "parameters",
            "must be a JSON Schema for an object: {\"type\": \"object\", ...}",
        ));
    }
    jsonschema::validator_for(parameters).map_err(|e| {
        DefinitionError::new(
            "parameters",
            format!(
                "is not a valid JSON Schema: {} (at {})",
                clip(&e.to_string(), MAX_VIOLATION_CHARS),
                pointer(e.schema_path().as_str())
            ),
        )
    })
}

fn check_endpoint(url: &str) -> Result<Url, DefinitionError> {
    let parsed =
        Url::parse(url).map_err(|e| DefinitionError::new("url", format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(DefinitionError::new("url", "must be an http or https URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(DefinitionError::new("url", "must have a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(DefinitionError::new(
            "url",
            "must not carry credentials (user:pass@); send them in headers",
        ));
    }
    Ok(parsed)
}

fn check_timeout(timeout: Duration) -> Result<(), DefinitionError> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(DefinitionError::new(
            "timeoutMs",
            format!("must be between 1 and {} ms", MAX_TIMEOUT.as_millis()),
        ));
    }
    Ok(())
}

/// The configured headers, checked, their values marked sensitive (redacted by `http`'s Debug).
fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, DefinitionError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            DefinitionError::new("headers", format!("{name:?} is not a valid header name"))
        })?;
        let lower = parsed.as_str();
        if RESERVED_HEADERS.contains(&lower) || lower.starts_with("x-agentlane-") {
            return Err(DefinitionError::new(
                "headers",
                format!("{name:?} is set by agentlane and may not be configured"),
            ));
        }
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            DefinitionError::new(
                "headers",
                format!("the value of {name:?} is not a valid header value"),
            )
        })?;
        value.set_sensitive(true);
        map.append(parsed, value);
    }
    Ok(map)
}

/// The `X-Agentlane-Signature` value for `body` sent at `unix_seconds`:
/// `t=<unix_seconds>,v1=<hex HMAC-SHA256(secret, "<unix_seconds>.<body>")>`. A receiver
/// recomputes it over the raw body it got and compares in constant time, and refuses an old `t`.
pub fn signature(secret: &str, unix_seconds: u64, body: &[u8]) -> String {
    let t = unix_seconds.to_string();
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let digest = match <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(t.as_bytes());
            mac.update(b".");
            mac.update(body);
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    };
    format!("t={t},v1={digest}")
}

/// How one attempt ended.
enum Attempt {
    /// The call's result, whatever it is.
    Done(Result<ToolOutput, ToolError>),
    /// Worth another attempt if the tool is idempotent: a connect error or a 5xx answer.
    Retry(ToolError),
}

/// An agent's HTTP tool.
#[derive(Clone)]
pub struct HttpTool {
    config: HttpToolConfig,
    url: Url,
    headers: HeaderMap,
    validator: Arc<jsonschema::Validator>,
    ssrf: SsrfPolicy,
    resolver: Arc<dyn Resolve>,
    /// Where the tool's OAuth tokens come from (when it has `auth`).
    tokens: TokenCache,
    /// The last client and the checked addresses it is pinned to: kept so that calls reuse
    /// its connections while the endpoint resolves to the same addresses.
    client: Arc<Mutex<Option<(net::Pin, reqwest::Client)>>>,
}

impl std::fmt::Debug for HttpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTool")
            .field("config", &self.config)
            .field("ssrf", &self.ssrf)
            .finish_non_exhaustive()
    }
}

impl HttpTool {
    /// A tool for `config`, reaching its endpoint as `ssrf` allows, resolving its host with the
    /// system resolver. Refuses a definition [`check_definition`] refuses, and invalid or
    /// reserved headers or an empty signing secret.
    pub fn new(config: HttpToolConfig, ssrf: SsrfPolicy) -> Result<Self, DefinitionError> {
        Self::with_resolver(config, ssrf, Arc::new(SystemResolver))
    }

    /// As [`HttpTool::new`], resolving host names with `resolver` (tests, custom DNS).
    pub fn with_resolver(
        config: HttpToolConfig,
        ssrf: SsrfPolicy,
        resolver: Arc<dyn Resolve>,
    ) -> Result<Self, DefinitionError> {
        check_name(&config.name)?;
        check_description(&config.description)?;
        let validator = compile_parameters(&config.parameters)?;
        let url = check_endpoint(&config.url)?;
        check_timeout(config.timeout)?;
        let headers = header_map(&config.headers)?;
        if config.signing_secret.as_deref() == Some("") {
            return Err(DefinitionError::new("signingSecret", "must not be empty"));
        }
        if let Some(auth) = &config.auth {
            auth.check()
                .map_err(|why| DefinitionError::new("auth", why))?;
            if headers.contains_key(header::AUTHORIZATION) {
                return Err(DefinitionError::new(
                    "auth",
                    "cannot be combined with an Authorization header",
                ));
            }
        }
        Ok(Self {
            config,
            url,
            headers,
            validator: Arc::new(validator),
            tokens: TokenCache::with_resolver(ssrf.clone(), resolver.clone()),
            ssrf,
            resolver,
            client: Arc::new(Mutex::new(None)),
        })
    }

    /// The same tool taking its OAuth tokens from `tokens`, the process-wide cache (by default
    /// a tool has a cache of its own, with its SSRF policy).
    pub fn with_token_cache(mut self, tokens: TokenCache) -> Self {
        self.tokens = tokens;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Parses the model's arguments and checks them against the schema.
    fn arguments(&self, arguments: &str) -> Result<serde_json::Value, ToolError> {
        let name = &self.config.name;
        // A model calling a tool without parameters may send nothing at all.
        let text = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            ToolError::InvalidArguments(format!("the arguments of {name} are not JSON: {e}"))
        })?;
        let mut violations = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(&value) {
            if violations.len() == MAX_LISTED_VIOLATIONS {
                more += 1;
                continue;
            }
            violations.push(format!(
                "- {}: {}",
                pointer(error.instance_path().as_str()),
                clip(&error.to_string(), MAX_VIOLATION_CHARS)
            ));
        }
        if violations.is_empty() {
            return Ok(value);
        }
        if more > 0 {
            violations.push(format!("- ... and {more} more"));
        }
        Err(ToolError::InvalidArguments(format!(
            "the arguments of {name} do not match its parameters schema:\n{}",
            violations.join("\n")
        )))
    }

    /// The URL as errors show it: without query or fragment.
    fn shown_url(&self) -> String {
        let mut url = self.url.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.to_string()
    }

    /// `text` with every configured header value and the signing secret replaced.
    fn redact(&self, text: &str) -> String {
        let secrets = self
            .config
            .headers
            .iter()
            .map(|(_, value)| value.as_str())
            .chain(self.config.signing_secret.as_deref())
            .chain(self.config.auth.as_ref().map(|a| a.client_secret.as_str()));
        let mut text = text.to_owned();
        for secret in secrets {
            if secret.len() >= MIN_REDACTED_LEN && text.contains(secret) {
                text = text.replace(secret, REDACTED);
            }
        }
        text
    }

    /// The longest secret, in bytes: a quoted body is read this much past its limit so that a
    /// secret across the cut is still found and redacted.
    fn longest_secret(&self) -> usize {
        self.config
            .headers
            .iter()
            .map(|(_, value)| value.len())
            .chain(self.config.signing_secret.as_ref().map(String::len))
            .chain(self.config.auth.as_ref().map(|a| a.client_secret.len()))
            .max()
            .unwrap_or(0)
    }

    fn failed(&self, what: &str) -> ToolError {
        ToolError::Failed(self.redact(&format!("HTTP tool {}: {what}", self.config.name)))
    }

    fn transport_error(&self, err: reqwest::Error) -> Attempt {
        if err.is_timeout() {
            return Attempt::Done(Err(self.timeout_error()));
        }
        let connect = err.is_connect();
        let text = net::error_chain(&err.without_url());
        let url = self.shown_url();
        if connect {
            Attempt::Retry(self.failed(&format!("could not connect to {url}: {text}")))
        } else {
            Attempt::Done(Err(self.failed(&format!("request to {url} failed: {text}"))))
        }
    }

    fn timeout_error(&self) -> ToolError {
        ToolError::Timeout(u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX))
    }

    fn request_headers(&self, body: &[u8], ctx: &ToolContext) -> Result<HeaderMap, ToolError> {
        let value = |what: &str, text: &str| {
            HeaderValue::from_str(text)
                .map_err(|_| self.failed(&format!("the {what} is not a valid header value")))
        };
        let mut headers = self.headers.clone();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            HeaderName::from_static(HEADER_RUN),
            value("run id", &ctx.run_id)?,
        );
        headers.insert(
            HeaderName::from_static(HEADER_TOOL_CALL),
            value("tool call id", &ctx.tool_call_id)?,
        );
        if let Some(secret) = &self.config.signing_secret {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut signed = value("signature", &signature(secret, now, body))?;
            signed.set_sensitive(true);
            headers.insert(HeaderName::from_static(HEADER_SIGNATURE), signed);
        }
        Ok(headers)
    }

    /// A client pinned to the endpoint's addresses as they resolve now, each checked: the last
    /// one (and its open connections) when they are the same, else a new one.
    async fn client(&self) -> Result<reqwest::Client, ToolError> {
        let pin = net::check(&self.ssrf, self.resolver.as_ref(), &self.url).await?;
        if let Ok(cached) = self.client.lock()
            && let Some((pinned, client)) = cached.as_ref()
            && pinned.same_addresses(&pin)
        {
            return Ok(client.clone());
        }
        let client = pin.client(
            reqwest::Client::builder()
                .user_agent(concat!("agentlane/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(self.config.timeout),
        )?;
        if let Ok(mut cached) = self.client.lock() {
            *cached = Some((pin, client.clone()));
        }
        Ok(client)
    }

    /// One POST, without a time limit of its own.
    async fn attempt(&self, body: &[u8], ctx: &ToolContext) -> Attempt {
        let client = match self.client().await {
            Ok(client) => client,
            Err(ToolError::Blocked(why)) => {
                return Attempt::Done(Err(ToolError::Blocked(
                    self.redact(&format!("HTTP tool {}: {why}", self.config.name)),
                )));
            }
            Err(other) => return Attempt::Done(Err(self.failed(&other.to_string()))),
        };
        let headers = match self.request_headers(body, ctx) {
            Ok(headers) => headers,
            Err(e) => return Attempt::Done(Err(e)),
        };
        // With OAuth, a 401 drops the token and the call goes once more with a new one (the
        // receiver refused it before acting on it).
        let mut refreshed = false;
        let (response, token) = loop {
            let mut headers = headers.clone();
            let token = match self.bearer(&mut headers).await {
                Ok(token) => token,
                Err(e) => return Attempt::Done(Err(e)),
            };
            let response = match client
                .post(self.url.clone())
                .headers(headers)
                .body(body.to_vec())
                .send()
                .await
            {
                Ok(response) => response,
                Err(e) => return self.transport_error(e),
            };
            if response.status() == StatusCode::UNAUTHORIZED
                && !refreshed
                && let (Some(auth), Some(stale)) = (&self.config.auth, &token)
            {
                tracing::debug!(tool = %self.config.name, "401 with an OAuth token; refreshing it");
                self.tokens.invalidate(auth, stale);
                refreshed = true;
                continue;
            }
            break (response, token);
        };
        let status = response.status();
        if status.is_success() {
            return match read_capped(response, MAX_RESULT_BYTES).await {
                Ok((bytes, truncated)) => {
                    // An endpoint echoing its `Authorization` must not hand the access token
                    // to the transcript (the configured values are the run's redactor's).
                    let text = result_text(status, bytes, truncated);
                    let content = match &token {
                        Some(token) => token.redact(&text),
                        None => text,
                    };
                    Attempt::Done(Ok(ToolOutput { content }))
                }
                Err(e) => match self.transport_error(e) {
                    // The request was answered: reading it again would send it again.
                    Attempt::Retry(e) => Attempt::Done(Err(e)),
                    done => done,
                },
            };
        }
        let token_len = token.as_ref().map_or(0, |t| t.secret().len());
        let cap = MAX_ERROR_BODY_BYTES + self.longest_secret().max(token_len);
        let quoted = match read_capped(response, cap).await {
            Ok((bytes, _)) => {
                let mut text = self.redact(&String::from_utf8_lossy(&bytes));
                if let Some(token) = &token {
                    text = token.redact(&text);
                }
                cut_at_char(&text, MAX_ERROR_BODY_BYTES).to_owned()
            }
            Err(_) => String::new(),
        };
        let error = self.failed(&format!(
            "{} answered {}: {quoted}",
            self.shown_url(),
            status_text(status)
        ));
        if status.is_server_error() {
            Attempt::Retry(error)
        } else {
            Attempt::Done(Err(error))
        }
    }

    /// With OAuth, a token (cached or fetched now) set as `Authorization: Bearer …` in
    /// `headers`; the token, to drop it on a 401.
    async fn bearer(&self, headers: &mut HeaderMap) -> Result<Option<AccessToken>, ToolError> {
        let Some(auth) = &self.config.auth else {
            return Ok(None);
        };
        let named = |why: String| self.redact(&format!("HTTP tool {}: {why}", self.config.name));
        let token = self.tokens.token(auth).await.map_err(|e| match e {
            crate::oauth::TokenError::Blocked(why) => ToolError::Blocked(named(why)),
            crate::oauth::TokenError::Failed(why) => ToolError::Failed(named(why)),
        })?;
        let value = token
            .header_value()
            .map_err(|e| ToolError::Failed(named(e.to_string())))?;
        headers.insert(header::AUTHORIZATION, value);
        Ok(Some(token))
    }

    /// Every attempt, each under the time limit, with backoff between them.
    async fn send(&self, body: &[u8], ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let attempts = if self.config.idempotent {
            1 + MAX_RETRIES
        } else {
            1
        };
        let mut attempt = 1;
        loop {
            let started = Instant::now();
            let outcome = tokio::time::timeout(self.config.timeout, self.attempt(body, ctx))
                .await
                .unwrap_or_else(|_| Attempt::Done(Err(self.timeout_error())));
            tracing::debug!(
                tool = %self.config.name,
                attempt,
                elapsed_ms = started.elapsed().as_millis() as u64,
                outcome = match &outcome {
                    Attempt::Done(Ok(_)) => "ok",
                    Attempt::Done(Err(_)) => "failed",
                    Attempt::Retry(_) => "retryable",
                },
                "http tool attempt"
            );
            match outcome {
                Attempt::Done(result) => return result,
                Attempt::Retry(_) if attempt < attempts => {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Attempt::Retry(ToolError::Failed(text)) if attempts > 1 => {
                    return Err(ToolError::Failed(format!(
                        "{text}\n[gave up after {attempts} attempts]"
                    )));
                }
                Attempt::Retry(error) => return Err(error),
            }
        }
    }
}

/// The wait before retry `n` (1-based): 200 ms, 400 ms, ... ±20 %.
fn backoff(n: u32) -> Duration {
    let base = 200.0 * f64::from(1u32 << n.saturating_sub(1).min(8));
    Duration::from_secs_f64(base * rand::random_range(0.8..=1.2) / 1000.0)
}

/// At most `cap` bytes of the body, and whether there was more.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The result of a 2xx answer: its body as text (cut on a character boundary, with a marker,
/// when it was longer than the limit), or a note when it is empty.
fn result_text(status: StatusCode, mut bytes: Vec<u8>, truncated: bool) -> String {
    if truncated {
        bytes.truncate(utf8_boundary(&bytes));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        text.push_str(&format!(
            "\n[truncated: response exceeded {MAX_RESULT_BYTES} bytes]"
        ));
    } else if text.is_empty() {
        text = format!("[no content: {}]", status_text(status));
    }
    text
}

/// The length of `bytes` without a last character cut short.
fn utf8_boundary(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // Back over at most 3 continuation bytes to the last lead byte.
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let width = match byte {
            b if b < 0x80 => 1,
            b if b >= 0xF0 => 4,
            b if b >= 0xE0 => 3,
            b if b >= 0xC0 => 2,
            _ => 1,
        };
        return if back < width { len - back } else { len };
    }
    len
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut_at_char(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn clip(text: &str, max: usize) -> String {
    let cut = cut_at_char(text, max);
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut.to_owned()
    }
}

/// A JSON pointer as shown in messages (`/` for the root).
fn pointer(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.config.name.clone(),
            description: self.config.description.clone(),
            parameters: self.config.parameters.clone(),
        }
    }

    /// Each attempt's timeout, times the attempts an idempotent tool may make (plus their
    /// backoffs).
    fn timeout(&self) -> Option<Duration> {
        let attempts = if self.config.idempotent { 3 } else { 1 };
        Some(self.config.timeout * attempts + Duration::from_secs(2))
    }

    async fn call(&self, arguments: &str, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let arguments = self.arguments(arguments)?;
        let body = serde_json::to_vec(&arguments)
            .map_err(|e| self.failed(&format!("could not encode the arguments: {e}")))?;
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            result = self.send(&body, &ctx) => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_never_splits_a_character() {
        let text = "aé€😀";
        let bytes = text.as_bytes();
        // Every prefix, cut back to the last whole character.
        let wanted = [0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10];
        for (len, want) in wanted.iter().enumerate() {
            assert_eq!(utf8_boundary(&bytes[..len]), *want, "prefix of {len} bytes");
        }
        assert_eq!(cut_at_char(text, 2), "a");
        assert_eq!(cut_at_char(text, 3), "aé");
    }

    #[test]
    fn signature_is_hmac_sha256_of_time_dot_body() {
        // RFC 4231-style check computed independently: HMAC-SHA256("key", "1.{}").
        let got = signature("key", 1, b"{}");
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"key").unwrap();
        mac.update(b"1.{}");
        assert_eq!(
            got,
            format!("t=1,v1={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert_ne!(signature("other", 1, b"{}"), got);
        assert_ne!(signature("key", 2, b"{}"), got);
    }

    #[test]
    fn backoff_is_jittered_around_doubling_steps() {
        for _ in 0..100 {
            let first = backoff(1);
            let second = backoff(2);
            assert!((160..=240).contains(&first.as_millis()), "{first:?}");
            assert!((320..=480).contains(&second.as_millis()), "{second:?}");
        }
    }
}
