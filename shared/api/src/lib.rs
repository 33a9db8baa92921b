//! The HTTP contract of agentlane (SPEC §2) as one axum [`Router`].
//!
//! [`app`] builds the router over an [`ApiState`]. It opens no socket: the local server runs it
//! under `axum::serve`, the ingress Lambda under `lambda_http`, and tests drive it with
//! `tower::ServiceExt::oneshot`.

pub mod auth;
pub mod error;
pub mod extract;
mod request_context;
mod routes;
mod sse;
pub mod validate;
pub mod views;
mod wait;

pub use auth::{ApiKeys, Tenant};
pub use error::ApiError;

use agentlane_core::cron::CronStore;
use agentlane_core::{Clock, HistoryReader, LaneQueue, Store, TurnIntake};
use axum::Router;
use axum::routing::{get, post};
use std::sync::Arc;

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
    /// Bearer keys → tenant.
    pub keys: ApiKeys,
    pub config: ApiConfig,
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
    /// How often an SSE event stream polls the store. Default 100 ms.
    pub sse_poll_ms: u64,
    /// Interval of SSE keep-alive comments. Default 15 s.
    pub sse_keep_alive_ms: u64,
    /// How long a reset waits for a running turn to release the session lock before it
    /// answers `session_busy` (capped by `max_wait_ms`). Default 60 s, the runner's lock
    /// acquire timeout.
    pub reset_wait_ms: u64,
    /// Cron jobs one tenant may have. Default 1,000.
    pub max_cron_jobs: u32,
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
        }
    }
}

/// The whole API: `/v1/...` routes behind bearer auth, `GET /healthz` without, JSON 404 and 405
/// fallbacks, and a request-id + tracing span around every request.
pub fn app(state: ApiState) -> Router {
    let state = Arc::new(state);
    Router::new()
        .route("/healthz", get(routes::health))
        .route("/v1/agent", post(routes::agent::submit))
        .route("/v1/agent.wait", post(routes::agent::wait))
        .route("/v1/runs/{run_id}", get(routes::runs::get_run))
        .route("/v1/runs/{run_id}/events", get(routes::runs::events))
        .route("/v1/runs/{run_id}/abort", post(routes::runs::abort))
        .route(
            "/v1/sessions/{session_key}",
            get(routes::sessions::get_session),
        )
        .route(
            "/v1/sessions/{session_key}/transcript",
            get(routes::sessions::transcript),
        )
        .route(
            "/v1/sessions/{session_key}/reset",
            post(routes::sessions::reset),
        )
        .route(
            "/v1/cron/jobs",
            get(routes::cron::list).post(routes::cron::create),
        )
        .route(
            "/v1/cron/jobs/{job_id}",
            get(routes::cron::get)
                .patch(routes::cron::patch)
                .delete(routes::cron::delete),
        )
        .route("/v1/cron/jobs/{job_id}/run", post(routes::cron::run_now))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn(request_context::request_context))
        .with_state(state)
}
