//! Handlers, one module per resource, and [`table`]: every route the API serves.

pub(crate) mod actions;
pub(crate) mod agent;
pub(crate) mod agents;
pub(crate) mod catalog;
pub(crate) mod cron;
pub(crate) mod openai;
pub(crate) mod runs;
pub(crate) mod secrets;
pub(crate) mod sessions;
pub(crate) mod usage;

use crate::Shared;
use crate::error::ApiError;
use agentlane_core::RunId;
use axum::Json;
use axum::routing::get;
use serde_json::{Value, json};
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;

/// `routes!(DOC; handler, ...)`: each handler under the method and path of its
/// `#[utoipa::path]`. With `DOC` (building the OpenAPI document) it is `utoipa_axum::routes!`,
/// which also builds each operation and its schemas; without (serving), only the router: the
/// functions never reach the document's code, so fat LTO drops it (~0.8 MiB of the ingress).
macro_rules! routes {
    ($doc:expr; $($handler:path),+ $(,)?) => {{
        if $doc {
            utoipa_axum::routes!($($handler),+)
        } else {
            #[allow(unused_imports)]
            use utoipa::Path as _;
            use utoipa_axum::PathItemExt as _;
            let mut paths = utoipa::openapi::path::Paths::new();
            let mut router = axum::routing::MethodRouter::new();
            $(
                // `paste!` turns the `path` fragment back into tokens, as
                // `utoipa_axum::routes!` does, so that its `@path` rule finds the handler's
                // `__path_` type.
                let (path, methods) = utoipa_axum::paste! {(
                    utoipa_axum::routes!(@path [path()] of $handler),
                    utoipa_axum::routes!(@path [methods()] of $handler),
                )};
                router = methods.iter().fold(router, |router, method| {
                    router.on(method.to_method_filter(), $handler)
                });
                paths.paths.insert(path, utoipa::openapi::path::PathItem::default());
            )+
            (Vec::new(), paths, router)
        }
    }};
}

/// The routes served but left out of the OpenAPI document, as `(method, path)`: the metrics
/// scrape (Prometheus text, per process; off in the ingress Lambda).
pub const UNDOCUMENTED: &[(&str, &str)] = &[("get", METRICS)];

/// The path of [`metrics`].
const METRICS: &str = "/metrics";

/// Every route of the API, split by the timeout it runs under, without state or layers.
pub(crate) struct Table {
    /// The routes that wait for a run ([`waiting_routes`]): their timeout is the longest wait plus the
    /// request timeout.
    pub waits: OpenApiRouter<Arc<Shared>>,
    /// Every other route, under the request timeout. The timeout ends at the response head:
    /// an SSE body streams on past it.
    pub rest: OpenApiRouter<Arc<Shared>>,
}

/// The routes. A documented route is registered with `routes!`, which takes its method and
/// path from the handler's `#[utoipa::path]` and, with `DOC`, adds that operation to the
/// router's document: serving a route and documenting it are one list. [`UNDOCUMENTED`] lists
/// the only others. `DOC` is false when serving (see `routes!`).
pub(crate) fn table<const DOC: bool>() -> Table {
    let rest = OpenApiRouter::default()
        .routes(routes!(DOC; health))
        .routes(routes!(DOC; ready))
        .routes(routes!(DOC; crate::openapi::serve_document))
        .route(METRICS, get(metrics))
        .routes(routes!(DOC; agent::submit))
        .routes(routes!(DOC; runs::get_run))
        .routes(routes!(DOC; runs::events))
        .routes(routes!(DOC; runs::abort))
        .routes(routes!(DOC; actions::answer))
        .routes(routes!(DOC; catalog::list_runs))
        .routes(routes!(DOC; catalog::list_sessions))
        .routes(routes!(DOC; sessions::get_session,
            sessions::patch_session,
            catalog::delete_session
        ))
        .routes(routes!(DOC; sessions::transcript))
        .routes(routes!(DOC; sessions::reset))
        .routes(routes!(DOC; cron::list, cron::create))
        .routes(routes!(DOC; cron::get, cron::patch, cron::delete))
        .routes(routes!(DOC; cron::run_now))
        .routes(routes!(DOC; agents::list, agents::create))
        .routes(routes!(DOC; agents::get, agents::patch, agents::delete))
        .routes(routes!(DOC; secrets::list))
        .routes(routes!(DOC; secrets::get, secrets::put, secrets::delete))
        .routes(routes!(DOC; usage::get_usage))
        .routes(routes!(DOC; openai::list_models));
    Table {
        waits: waiting_routes::<DOC>(),
        rest,
    }
}

/// The routes that wait for a run to end (`agent.wait`, the OpenAI-compatible completions and
/// responses), in both tables.
fn waiting_routes<const DOC: bool>() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::default()
        .routes(routes!(DOC; agent::wait))
        .routes(routes!(DOC; openai::chat_completions))
        .routes(routes!(DOC; openai::create_response))
}

/// The routes of the streaming ingress (a Lambda Function URL with response streaming, see
/// [`crate::streaming_app`]): the answers that may last (a run, its events as SSE,
/// `agent.wait`, the OpenAI-compatible completions and responses, streamed or not), the model
/// list (so that one OpenAI `base_url` serves a client) and the health check. Everything else
/// is served by the HTTP API only.
pub(crate) fn streaming_table<const DOC: bool>() -> Table {
    let rest = OpenApiRouter::default()
        .routes(routes!(DOC; health))
        .routes(routes!(DOC; runs::get_run))
        .routes(routes!(DOC; runs::events))
        .routes(routes!(DOC; openai::list_models));
    Table {
        waits: waiting_routes::<DOC>(),
        rest,
    }
}

/// `GET /healthz`, no auth.
#[utoipa::path(get, path = "/healthz", operation_id = "health", tag = "health", security(()),
    responses((status = 200, description = "The server is up", body = Object, example = json!({"ok": true}))))]
pub(crate) async fn health() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// How long `GET /readyz` waits for the store's answer.
const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /readyz`, no auth: whether this process can serve requests — the store answers a point
/// read (of a run no tenant has) within 3 s. `503 unavailable` with `Retry-After` otherwise.
/// `/healthz` stays a liveness probe: it answers while the process runs, whatever the store.
#[utoipa::path(get, path = "/readyz", operation_id = "ready", tag = "health", security(()),
    responses(
        (status = 200, description = "The store answers", body = Object, example = json!({"ok": true})),
        (status = 503, description = "`unavailable`: the store does not answer; see `Retry-After`",
            body = crate::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before retrying"))),
    ))]
pub(crate) async fn ready(
    axum::extract::State(state): axum::extract::State<Arc<Shared>>,
) -> Result<Json<Value>, ApiError> {
    let (tenant, run) = (
        agentlane_core::TenantId::new("_readyz"),
        RunId::new("run_readyz_probe"),
    );
    let probe = state.store.get_run(&tenant, &run);
    match tokio::time::timeout(READY_PROBE_TIMEOUT, probe).await {
        Ok(Ok(_)) => Ok(Json(json!({"ok": true}))),
        Ok(Err(e)) => Err(ApiError::Unavailable(format!("readyz: store: {e}"))),
        Err(_) => Err(ApiError::Unavailable(format!(
            "readyz: the store did not answer within {READY_PROBE_TIMEOUT:?}"
        ))),
    }
}

/// `GET /metrics`: this process's metrics (turns, attempts, breaker trips, lock takeovers,
/// queue age, stuck sessions, cron fires, poisoned runs) in the Prometheus text format. The
/// counts are the process's, across tenants, so only the operator's key
/// ([`crate::ApiConfig::metrics_key`]) reads them (scrape with `authorization: Bearer <key>`):
/// no key or an unknown one is `401`, a tenant's key `403` (and every key while none is
/// configured). `404` where [`crate::ApiConfig::expose_metrics`] is off (the ingress Lambda:
/// its metrics go to CloudWatch as EMF instead).
pub(crate) async fn metrics(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::Shared>>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    if !state.config.expose_metrics {
        return Err(ApiError::NotFound("no such route".into()));
    }
    let token = crate::auth::bearer_in(&headers).ok_or(ApiError::Unauthorized)?;
    let operator = state
        .config
        .metrics_key
        .as_ref()
        .is_some_and(|k| k.accepts(token));
    if !operator {
        return Err(match state.keys.authenticate(token).await? {
            Some(_) if state.config.metrics_key.is_none() => ApiError::Forbidden(
                "GET /metrics answers only to the operator's metrics key, and none is \
                 configured (AGENTLANE_METRICS_KEY or [api] metrics_key)"
                    .into(),
            ),
            Some(_) => ApiError::Forbidden(
                "GET /metrics answers only to the operator's metrics key, not a tenant's".into(),
            ),
            None => ApiError::Unauthorized,
        });
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
pub(crate) async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

/// Any route the streaming ingress does not serve: it names the HTTP API.
pub(crate) async fn not_streamed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!(
        "{method} {} is not served by the streaming endpoint (runs, events, agent.wait and the \
         OpenAI-compatible routes only): use the HTTP API",
        uri.path()
    ))
}

/// A known route with the wrong method.
pub(crate) async fn method_not_allowed() -> ApiError {
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
