//! Handlers, one module per resource.

pub mod agent;
pub mod cron;
pub mod runs;
pub mod sessions;

use crate::error::ApiError;
use agentlane_core::RunId;
use axum::Json;
use serde_json::{Value, json};

/// `GET /healthz`, no auth.
#[utoipa::path(get, path = "/healthz", operation_id = "health", tag = "health", security(()),
    responses((status = 200, description = "The server is up", body = Object, example = json!({"ok": true}))))]
pub async fn health() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// `GET /metrics`: this process's metrics (turns, attempts, breaker trips, lock takeovers,
/// queue age, stuck sessions, cron fires, poisoned runs) in the Prometheus text format, behind
/// the same API-key auth as `/v1/...` (scrape with `authorization: Bearer <key>`). The counts
/// are the process's, across tenants. `404` where [`crate::ApiConfig::expose_metrics`] is off
/// (the ingress Lambda: its metrics go to CloudWatch as EMF instead).
pub async fn metrics(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::Shared>>,
    _tenant: crate::auth::Tenant,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    if !state.config.expose_metrics {
        return Err(ApiError::NotFound("no such route".into()));
    }
    let text = agentlane_core::metrics::global().render_prometheus();
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

/// A known route with the wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Longest run id worth a store lookup; longer ones cannot exist.
const MAX_RUN_ID_LEN: usize = 128;

/// A run id from a path or body; malformed ids are unknown ones (404 like any other).
pub(crate) fn run_id(raw: String) -> Result<RunId, ApiError> {
    if raw.is_empty() || raw.len() > MAX_RUN_ID_LEN || raw.chars().any(char::is_control) {
        return Err(ApiError::not_found("run"));
    }
    Ok(RunId::new(raw))
}
