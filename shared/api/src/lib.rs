//! The HTTP contract of agentlane (SPEC §2) as one axum [`Router`].
//!
//! [`app`] builds the router over an [`ApiState`]. It opens no socket: the local server runs it
//! under [`serve`] (hyper with the edge's [`Limits`]), the ingress Lambda under `lambda_http`,
//! and tests drive it with `tower::ServiceExt::oneshot`. [`app_with`] also takes the process's
//! [`Notifier`], so that commits made through a [`NotifyingStore`] wake waiters at once.
//!
//! Wiring a local server (the runner and the API share the wrapped store):
//!
//! ```ignore
//! let notifier = agentlane_api::Notifier::new();
//! backends.store = Arc::new(agentlane_api::NotifyingStore::new(backends.store, notifier.clone()));
//! let runner = runtime::runner_with(&backends, &settings)?; // built on the wrapped store
//! let mut config = settings.api_config(max_wait);
//! config.limits = file_limits;                   // TOML `[limits]` (serde: `Limits`)
//! config.configured_models = default_and_fallbacks; // the default allow-list
//! let limits = config.limits.clone();
//! let app = agentlane_api::app_with(ApiState { store: backends.store.clone(), config, .. }, notifier);
//! agentlane_api::serve(listener, app, &limits, shutdown.cancelled()).await?;
//! ```
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod admission;
pub mod auth;
pub mod deadline;
#[cfg(test)]
mod edge_tests;
pub mod error;
pub mod extract;
mod follow;
pub mod limits;
pub mod notify;
mod openai;
pub mod openapi;
mod openapi_shapes;
mod page;
mod request_context;
mod routes;
pub mod server;
mod sse;
#[cfg(test)]
mod testkit;
pub mod validate;
pub mod views;
mod wait;

pub use admission::{Admission, ClientAddr, SharedSlots};
pub use auth::{ApiKeys, OperatorKey, Tenant};
pub use deadline::ResponseDeadline;
pub use error::ApiError;
pub use limits::{Limits, TenantLimits, TenantOverride};
pub use notify::{Notifier, NotifyingStore};
pub use openapi::openapi_json;
pub use routes::UNDOCUMENTED;
pub use server::serve;

use agentlane_core::cron::CronStore;
use agentlane_core::{Clock, HistoryReader, LaneQueue, SlotStore, Store, TurnIntake};
use axum::Router;
use axum::error_handling::HandleErrorLayer;
use std::sync::Arc;
use std::time::Duration;

/// Everything the handlers need. Cheap to clone (shared parts sit behind `Arc`s).
#[derive(Clone)]
pub struct ApiState {
    /// Sessions, runs, transcripts, events, idempotency records. Handlers use two of its roles
    /// only, through [`intake`](Self::intake) and [`history`](Self::history): the API never
    /// takes a session lock nor makes a fenced write.
    pub store: Arc<dyn Store>,
    /// Where accepted turns go, one lane per session.
    pub queue: Arc<dyn LaneQueue>,
    /// Timestamps (`acceptedAt`, lock-lease checks, idempotency expiry).
    pub clock: Arc<dyn Clock>,
    /// Cron jobs (`/v1/cron/jobs`).
    pub cron: Arc<dyn CronStore>,
    /// The tenant's sessions and a session's runs as lists, a session's deletion
    /// (`GET /v1/sessions`, `GET /v1/runs`, `DELETE /v1/sessions/{sessionKey}`).
    pub catalog: Arc<dyn agentlane_core::SessionCatalog>,
    /// Agents (`/v1/agents`).
    pub agents: Arc<dyn agentlane_core::AgentStore>,
    /// The tenants' secrets (`/v1/secrets`; an agent's `{"secret": …}` must name one).
    pub secrets: Arc<agentlane_secrets::Vault>,
    /// Bearer keys → tenant.
    pub keys: ApiKeys,
    /// Limits and defaults of the HTTP edge (body size, timeouts, per-tenant caps).
    pub config: ApiConfig,
    /// Where the per-tenant stream and wait caps are kept when many processes serve the API
    /// (the ingress Lambda: one request per instance); `None`: in this process only (`serve`).
    pub shared_slots: Option<Arc<dyn SlotStore>>,
    /// Tenants' spend per period: a turn of a tenant whose period budget is spent answers
    /// `429 budget_exceeded` (`None`: no check at accept; the runner still enforces budgets).
    pub spend: Option<Arc<dyn agentlane_core::SpendLedger>>,
}

impl ApiState {
    /// The store's unfenced writes: accepting turns, abort requests, session resets.
    pub fn intake(&self) -> &dyn TurnIntake {
        self.store.as_ref()
    }

    /// The store's reads: runs, sessions, transcripts, events.
    pub fn history(&self) -> &dyn HistoryReader {
        self.store.as_ref()
    }
}

/// Limits and defaults of the HTTP edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// Largest `message` (and `extraSystemPrompt`), in bytes. Default 256 KiB.
    pub max_message_bytes: usize,
    /// Largest request body, in bytes. Default `max_message_bytes` + 64 KiB.
    pub max_body_bytes: usize,
    /// How long an idempotency key maps to its run. Default 24 h.
    pub idempotency_ttl_ms: u64,
    /// `agent.wait` timeout when the body names none. Default 30 s.
    pub default_wait_ms: u64,
    /// Cap on `agent.wait` timeouts. Default 15 min.
    pub max_wait_ms: u64,
    /// When non-empty, a request's `model` must name one of these providers.
    pub known_providers: Vec<String>,
    /// The offline demo model is active: `demo/...` models are accepted.
    pub demo_mode: bool,
    /// Longest pause of an SSE event stream polling a run that is not live in this process
    /// (polls start at 2 ms and back off). Default 100 ms.
    pub sse_poll_ms: u64,
    /// Interval of SSE keep-alive comments. Default 15 s.
    pub sse_keep_alive_ms: u64,
    /// How long a reset waits for a running turn to release the session lock before it
    /// answers `session_busy` (capped by `max_wait_ms` and by the request timeout, less a
    /// second). Default 60 s, the runner's lock acquire timeout.
    pub reset_wait_ms: u64,
    /// Cron jobs one tenant may have. Default 1,000.
    pub max_cron_jobs: u32,
    /// Limits of the edge (TOML `[limits]`).
    pub limits: Limits,
    /// The configured default model and its fallbacks (`provider/model`): what a tenant may
    /// ask for when `limits` names no allow-list. Empty: any model of a known provider.
    pub configured_models: Vec<String>,
    /// `GET /metrics` answers the process's metrics (Prometheus text). Default true; the
    /// ingress Lambda turns it off (per-instance counts mean nothing there; it writes EMF).
    pub expose_metrics: bool,
    /// The operator's key that `GET /metrics` answers to (`AGENTLANE_METRICS_KEY` / `[api]
    /// metrics_key`). `None`: no key does — the metrics are the process's, across tenants,
    /// so a tenant's key never reads them (`403`).
    pub metrics_key: Option<OperatorKey>,
    /// The mode of a turn that names none on a session without a default mode
    /// (`[queue] default_mode`); `None`: `followup`.
    pub default_queue_mode: Option<agentlane_core::QueueMode>,
    /// Agents one tenant may have. Default 100 (`AGENTLANE_MAX_AGENTS`).
    pub max_agents: u32,
    /// The built-in tools an agent may name in `tools.builtin` (the runner's registry).
    pub builtin_tools: Vec<String>,
    /// The prices of the models (a turn with a USD budget cannot name an unpriced one).
    pub prices: agentlane_core::spend::PriceTable,
    /// Secrets one tenant may have. Default 100 (`AGENTLANE_MAX_SECRETS`).
    pub max_secrets: u32,
    /// The environment variables an agent's `{"env": …}` may name (none by default).
    pub agent_env_allow: agentlane_core::EnvGrants,
}

/// Default largest message: 256 KiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_body_bytes: DEFAULT_MAX_MESSAGE_BYTES + 64 * 1024,
            idempotency_ttl_ms: 24 * 3600 * 1000,
            default_wait_ms: 30_000,
            max_wait_ms: 15 * 60 * 1000,
            known_providers: Vec::new(),
            demo_mode: false,
            sse_poll_ms: 100,
            sse_keep_alive_ms: 15_000,
            reset_wait_ms: 60_000,
            max_cron_jobs: agentlane_core::cron::DEFAULT_MAX_JOBS_PER_TENANT,
            limits: Limits::default(),
            configured_models: Vec::new(),
            expose_metrics: true,
            metrics_key: None,
            default_queue_mode: None,
            max_agents: agentlane_core::agent::DEFAULT_MAX_AGENTS,
            builtin_tools: vec!["current_time".into(), "http_fetch".into()],
            prices: agentlane_core::spend::PriceTable::builtin(),
            max_secrets: agentlane_core::tenant_secret::DEFAULT_MAX_SECRETS,
            agent_env_allow: agentlane_core::EnvGrants::default(),
        }
    }
}

/// The router's state: the caller's [`ApiState`] plus the process-wide edge state.
pub struct Shared {
    api: ApiState,
    /// Wake-ups from commits of this process.
    pub notifier: Notifier,
    /// Per-tenant rate and concurrency buckets.
    pub admission: Admission,
}

impl std::ops::Deref for Shared {
    type Target = ApiState;

    fn deref(&self) -> &ApiState {
        &self.api
    }
}

/// The whole API without in-process wake-ups: waits and event streams poll the store (from
/// 2 ms, backing off). Use [`app_with`] when the runner commits in this process.
pub fn app(state: ApiState) -> Router {
    app_with(state, Notifier::new())
}

/// The whole API: `/v1/...` routes behind bearer auth and per-tenant admission, `GET /healthz`
/// without, JSON 404/405/408/414 answers, request and body timeouts, and a request-id +
/// tracing span around every request. `notifier` must be the one the store given in `state`
/// signals (see [`NotifyingStore`]).
pub fn app_with(state: ApiState, notifier: Notifier) -> Router {
    build(state, notifier, routes::table::<false>(), routes::not_found)
}

/// The API of the streaming ingress Lambda (a Function URL with response streaming): only the
/// answers that may last longer than API Gateway allows — `GET /v1/runs/{id}`, its events as
/// SSE, `POST /v1/agent.wait`, the OpenAI-compatible `POST /v1/chat/completions` and
/// `POST /v1/responses` (which accept turns) with `GET /v1/models`, and `GET /healthz` — with
/// the edge of [`app`]. Every other route answers `404 not_found` naming the HTTP API.
pub fn streaming_app(state: ApiState) -> Router {
    build(
        state,
        Notifier::new(),
        routes::streaming_table::<false>(),
        routes::not_streamed,
    )
}

/// The router of `table` with the edge's layers; `fallback` answers unknown routes.
fn build<H, T>(state: ApiState, notifier: Notifier, table: routes::Table, fallback: H) -> Router
where
    H: axum::handler::Handler<T, Arc<Shared>>,
    T: 'static,
{
    let limits = state.config.limits.clone();
    let wait_budget = Duration::from_millis(state.config.max_wait_ms) + limits.request_timeout();
    let shared_slots = state
        .shared_slots
        .clone()
        .map(|store| admission::SharedSlots::new(store, state.clock.clone()));
    let shared = Arc::new(Shared {
        admission: Admission::new(limits.clone()).with_shared_slots(shared_slots),
        notifier,
        api: state,
    });
    let routes::Table { waits, rest } = table;
    let waits = with_timeout(waits.into(), wait_budget);
    let routes = Router::from(rest)
        .fallback(fallback)
        .method_not_allowed_fallback(routes::method_not_allowed);
    with_timeout(routes, limits.request_timeout())
        .merge(waits)
        .layer(
            tower::ServiceBuilder::new()
                .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
                    limits.request_body_timeout(),
                ))
                .layer(tower_http::map_request_body::MapRequestBodyLayer::new(
                    axum::body::Body::new,
                )),
        )
        .layer(axum::middleware::from_fn_with_state(
            limits.max_uri_bytes,
            request_context::limit_uri,
        ))
        .layer(axum::middleware::from_fn(request_context::request_context))
        .with_state(shared)
}

/// `router` answering `408 timeout` (JSON) when a request takes longer than `limit`.
fn with_timeout(router: Router<Arc<Shared>>, limit: Duration) -> Router<Arc<Shared>> {
    let millis = limit.as_millis();
    router.layer(
        tower::ServiceBuilder::new()
            .layer(HandleErrorLayer::new(
                move |error: axum::BoxError| async move {
                    if error.is::<tower::timeout::error::Elapsed>() {
                        ApiError::Timeout(format!("the request took longer than {millis} ms"))
                    } else {
                        ApiError::Internal(format!("middleware: {error}"))
                    }
                },
            ))
            .layer(tower::timeout::TimeoutLayer::new(limit)),
    )
}
