//! A request id (echoed from `x-request-id` when sane, generated otherwise) and a tracing span
//! per request. Bodies, queries and keys are never logged, and neither are raw paths (they
//! carry session keys): the span names the matched route (`/v1/sessions/{session_key}`).

use crate::error::ApiError;
use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use std::time::Instant;
use tracing::Instrument;

/// The request-id header, read and echoed.
pub(crate) const REQUEST_ID_HEADER: &str = "x-request-id";
const MAX_REQUEST_ID_LEN: usize = 128;

fn incoming_id(request: &Request) -> Option<String> {
    let value = request.headers().get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let sane = !value.is_empty()
        && value.len() <= MAX_REQUEST_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    sane.then(|| value.to_owned())
}

pub(crate) async fn request_context(request: Request, next: Next) -> Response {
    let request_id = incoming_id(&request).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("(no route)", MatchedPath::as_str)
        .to_owned();
    let span = tracing::info_span!(
        "http",
        request_id = %request_id,
        method = %request.method(),
        route = %route,
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_millis() as u64,
            "request finished"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// Refuses a path plus query longer than `max` bytes with `414 uri_too_long` in the JSON
/// error shape (before any extractor looks at it).
pub(crate) async fn limit_uri(State(max): State<usize>, request: Request, next: Next) -> Response {
    let uri = request.uri();
    let length = uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    if length > max {
        return ApiError::UriTooLong(format!(
            "the request path and query are {length} bytes; at most {max} are accepted"
        ))
        .into_response();
    }
    next.run(request).await
}

/// A session key's stand-in in logs (the one helper of `agentlane_core`).
pub(crate) use agentlane_core::fingerprint;
