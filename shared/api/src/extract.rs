//! Request extraction that answers in the API's error shape: JSON bodies read under a byte
//! limit, path and query parameters with 400s instead of axum's plain-text rejections.

use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

/// What to do with an empty body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyBody {
    /// An empty body is a 400.
    Reject,
    /// An empty body reads as `{}`.
    AsEmptyObject,
}

/// Reads a JSON body of at most `limit` bytes (413 beyond) and decodes it (400 on any syntax or
/// shape error, unknown fields included when `T` denies them).
pub async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    empty: EmptyBody,
) -> Result<T, ApiError> {
    check_content_type(headers)?;
    let bytes = read_limited(headers, body, limit).await?;
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        match empty {
            EmptyBody::Reject => {
                return Err(ApiError::InvalidRequest(
                    "the request body is empty; expected a JSON object".into(),
                ));
            }
            EmptyBody::AsEmptyObject => b"{}",
        }
    } else {
        &bytes
    };
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::InvalidRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(body_error)?;
    deserializer
        .end()
        .map_err(|e| ApiError::InvalidRequest(format!("malformed JSON: {e}")))?;
    Ok(value)
}

/// A decode failure as a 400 that names the offending field when there is one.
fn body_error(error: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = error.path().to_string();
    let inner = error.into_inner();
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::InvalidRequest(format!("malformed JSON: {inner}"))
        }
        Category::Data
            if path == "." || path.is_empty() || inner.to_string().starts_with("unknown field") =>
        {
            ApiError::InvalidRequest(format!("invalid request body: {inner}"))
        }
        Category::Data => {
            ApiError::InvalidRequest(format!("invalid request body: field {path}: {inner}"))
        }
    }
}

/// A body with a `Content-Type` must say JSON (`application/json` or `application/*+json`).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let mime = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let is_json =
        mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"));
    if is_json {
        Ok(())
    } else {
        Err(ApiError::InvalidRequest(format!(
            "unsupported Content-Type {mime:?}; send the body as application/json"
        )))
    }
}

async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large =
        || ApiError::PayloadTooLarge(format!("the request body is larger than {limit} bytes"));
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut buffer = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            let inner = e.into_inner();
            if is_body_timeout(inner.as_ref()) {
                return ApiError::Timeout(
                    "the request body did not arrive in time; send it at once".into(),
                );
            }
            tracing::debug!(error = %inner, "request body could not be read");
            ApiError::InvalidRequest("the request body could not be read".into())
        })?;
        if buffer.len() + chunk.len() > limit {
            return Err(too_large());
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer)
}

/// Whether a body error (or one of its sources) is the request-body timeout firing.
fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// `Path<T>` whose rejection is a 400 in the API's shape.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| ApiPath(value))
            .map_err(|e| ApiError::InvalidRequest(e.body_text()))
    }
}

/// `Query<T>` whose rejection is a 400 in the API's shape.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|e| ApiError::InvalidRequest(e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn json_content_types_pass_and_others_do_not() {
        let check = |value: Option<&'static str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            }
            check_content_type(&headers).is_ok()
        };
        assert!(check(None));
        assert!(check(Some("application/json")));
        assert!(check(Some("Application/JSON; charset=utf-8")));
        assert!(check(Some("application/merge-patch+json")));
        assert!(!check(Some("text/plain")));
        assert!(!check(Some("application/x-www-form-urlencoded")));
        assert!(!check(Some("multipart/form-data; boundary=x")));
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_refused_even_without_a_length() {
        let headers = HeaderMap::new();
        let body = Body::from(vec![b' '; 11]);
        let error = read_limited(&headers, body, 10).await.unwrap_err();
        assert_eq!(error.code(), "payload_too_large");
        let fits = read_limited(&headers, Body::from(vec![b' '; 10]), 10).await;
        assert_eq!(fits.unwrap().len(), 10);
    }
}
