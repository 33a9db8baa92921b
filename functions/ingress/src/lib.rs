//! The ingress Lambda: wiring only. The handler is `agentlane_api::app`, the same router the
//! local server runs, in one of two modes (`AGENTLANE_INGRESS_MODE`):
//!
//! - `buffered` (default): behind the API Gateway HTTP API, `lambda_http::run` (the whole
//!   response at once, 29 s at most, so `agent.wait` is capped at 25 s).
//! - `streaming`: behind a Lambda Function URL with `InvokeMode: RESPONSE_STREAM`,
//!   `lambda_http::run_with_streaming_response`: SSE event streams reach the client as events
//!   happen and last as long as the run, up to the function's timeout; `agent.wait` may wait
//!   as long. Every request carries a [`ResponseDeadline`] a margin before the invocation's
//!   deadline (from the Runtime API): a stream still open then ends with a `reconnect` event
//!   and a `retry:` hint, and the client resumes with `Last-Event-ID`. It serves only the
//!   answers that may last ([`agentlane_api::streaming_app`]: run reads, events, `agent.wait`,
//!   and the OpenAI-compatible completions and responses, which accept turns, with the model
//!   list); the rest answers `404 not_found` pointing at the HTTP API, so its role writes
//!   turns and nothing else.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use agentlane_api::{ApiState, ClientAddr, ResponseDeadline};
use agentlane_host as host;
use anyhow::Context as _;
use lambda_http::{RequestExt, tower};
use std::time::{Duration, SystemTime};

/// What [`run`] fails with.
pub use lambda_http::Error;

/// Selects the mode: `buffered` (default) or `streaming`.
pub const MODE_ENV: &str = "AGENTLANE_INGRESS_MODE";
/// Streaming mode: how long before the invocation's deadline a response must be complete
/// (ms, default [`DEFAULT_DEADLINE_MARGIN`]).
pub const MARGIN_ENV: &str = "AGENTLANE_STREAM_DEADLINE_MARGIN_MS";
/// Streaming mode: longest pause between two store polls of an event stream (ms, default
/// [`DEFAULT_STREAM_POLL`]). Across processes there is no wake-up: the stream polls from 2 ms,
/// doubling up to this.
pub const POLL_ENV: &str = "AGENTLANE_SSE_POLL_MS";

/// Streaming mode: interval of the SSE `: keep-alive` comments (ms, default 15 000), which keep
/// idle connections (and the proxies between) open while a run is quiet.
pub const KEEP_ALIVE_ENV: &str = "AGENTLANE_SSE_KEEP_ALIVE_MS";

/// Default margin before the invocation's deadline: time to flush the last frames.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(2);
/// Default poll cap of a streaming event stream (two reads per poll on DynamoDB).
pub const DEFAULT_STREAM_POLL: Duration = Duration::from_millis(500);
/// `agent.wait` cap in buffered mode: API Gateway ends requests at 30 s.
pub const BUFFERED_MAX_WAIT: Duration = Duration::from_secs(25);
/// `agent.wait` cap in streaming mode: the longest Lambda invocation (the deadline of the
/// invocation itself ends a wait earlier).
pub const STREAMING_MAX_WAIT: Duration = Duration::from_secs(15 * 60);

/// How the function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// API Gateway HTTP API, whole responses.
    Buffered,
    /// Function URL with response streaming.
    Streaming,
}

impl Mode {
    /// Reads [`MODE_ENV`].
    pub fn from_env() -> anyhow::Result<Self> {
        match std::env::var(MODE_ENV).ok().as_deref().map(str::trim) {
            None | Some("" | "buffered") => Ok(Mode::Buffered),
            Some("streaming") => Ok(Mode::Streaming),
            Some(other) => anyhow::bail!("{MODE_ENV}={other}: expected buffered or streaming"),
        }
    }
}

/// Starts the function: opens the AWS backends, builds the API and serves invocations from
/// the Lambda Runtime API (`AWS_LAMBDA_RUNTIME_API`) until the process is stopped.
pub async fn run() -> Result<(), lambda_http::Error> {
    host::init_tracing(true);
    let mode = Mode::from_env()?;
    let backends = host::open_aws().await?;
    // Provider keys come from Secrets Manager / SSM (the ingress checks model names against
    // the configured providers), never from plaintext variables.
    let settings = host::load_deployed().await?;
    // Store-backed keys (`agentlane keys create`); `AGENTLANE_API_KEYS` is optional.
    let keys = host::api_keys_with_store(&backends, host::api_keys_from_env()?)?;
    let max_wait = match mode {
        Mode::Buffered => BUFFERED_MAX_WAIT,
        Mode::Streaming => STREAMING_MAX_WAIT,
    };
    let mut config = settings.api_config(max_wait);
    config.max_cron_jobs = host::cron::CronSettings::from_env()?.max_jobs;
    config.max_agents = host::settings::max_agents_from_env()?;
    config.max_secrets = host::settings::max_secrets_from_env()?;
    // Metrics go to CloudWatch (EMF from the runner and cron functions), not to a route.
    config.expose_metrics = false;
    if mode == Mode::Streaming {
        config.sse_poll_ms = millis_env(POLL_ENV, DEFAULT_STREAM_POLL)?.as_millis() as u64;
        let keep_alive = Duration::from_millis(config.sse_keep_alive_ms);
        config.sse_keep_alive_ms = millis_env(KEEP_ALIVE_ENV, keep_alive)?.as_millis() as u64;
    }
    let state = ApiState {
        shared_slots: Some(backends.slots.clone()),
        spend: Some(backends.spend.clone()),
        store: host::api_store(&backends, &settings)?,
        queue: backends.queue,
        clock: backends.clock,
        cron: backends.cron,
        catalog: backends.catalog,
        agents: backends.agents,
        secrets: backends.secrets,
        keys,
        config,
    };
    match mode {
        Mode::Buffered => {
            let app = tower::ServiceBuilder::new()
                .map_request(with_client_addr)
                .service(agentlane_api::app(state));
            lambda_http::run(app).await
        }
        Mode::Streaming => {
            let app = agentlane_api::streaming_app(state);
            let margin = millis_env(MARGIN_ENV, DEFAULT_DEADLINE_MARGIN)?;
            tracing::info!(
                margin_ms = margin.as_millis() as u64,
                "ingress streams responses"
            );
            let app = tower::ServiceBuilder::new()
                .map_request(move |request| with_deadline(with_client_addr(request), margin))
                .service(app);
            lambda_http::run_with_streaming_response(app).await
        }
    }
}

/// Adds the [`ResponseDeadline`]: `margin` before the invocation's deadline. A request without
/// a Lambda context (not from the Runtime API) gets none.
pub fn with_deadline(mut request: lambda_http::Request, margin: Duration) -> lambda_http::Request {
    if let Some(context) = request.lambda_context_ref() {
        let end = SystemTime::UNIX_EPOCH + Duration::from_millis(context.deadline);
        let deadline = end.checked_sub(margin).unwrap_or(SystemTime::UNIX_EPOCH);
        request.extensions_mut().insert(ResponseDeadline(deadline));
    }
    request
}

/// Adds the [`ClientAddr`]: the source IP that API Gateway or the function URL saw (both send
/// the HTTP API's payload 2.0), for the per-address limits. None without a request context.
pub fn with_client_addr(mut request: lambda_http::Request) -> lambda_http::Request {
    let source = request
        .request_context_ref()
        .and_then(|context| match context {
            lambda_http::request::RequestContext::ApiGatewayV2(context) => context
                .http
                .source_ip
                .as_deref()
                .and_then(|ip| ip.parse::<std::net::IpAddr>().ok()),
            _ => None,
        });
    if let Some(address) = source {
        request.extensions_mut().insert(ClientAddr(address));
    }
    request
}

fn millis_env(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .with_context(|| format!("{name}={text}: expected milliseconds")),
        _ => Ok(default),
    }
}
