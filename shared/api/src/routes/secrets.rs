//! `/v1/secrets`: a tenant's secrets, the values its agents' tools send (`{"secret": "name"}`
//! in a header, a signing secret, an OAuth client secret). A value is written once and never
//! shown back: every answer carries the name, times and version only. Values are sealed at
//! rest (AES-256-GCM under a data key wrapped by KMS, or by the data directory's key file).
//! Another tenant's secrets do not exist for a caller (404).

use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery, EmptyBody, read_json};
use agentlane_core::tenant_secret::{
    MAX_SECRET_VALUE_BYTES, validate_secret_name, validate_secret_value,
};
use agentlane_core::{SecretMeta, StoreError};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Secrets per page unless `limit` says otherwise, and the most a page holds.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;
/// The largest body of a PUT: the value (escaped, at worst 6 bytes a byte) and the braces.
const MAX_PUT_BODY: usize = MAX_SECRET_VALUE_BYTES * 6 + 1024;

/// What the API shows of a secret: never its value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretView {
    /// `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// When it was first written (ms since the epoch).
    pub created_at: u64,
    /// When its value was last written.
    pub updated_at: u64,
    /// 1 at creation, one more at each replacement.
    pub version: u64,
}

impl From<SecretMeta> for SecretView {
    fn from(m: SecretMeta) -> Self {
        Self {
            name: m.name,
            created_at: m.created_at,
            updated_at: m.updated_at,
            version: m.version,
        }
    }
}

/// A page of secrets.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretList {
    pub secrets: Vec<SecretView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// The body of `PUT /v1/secrets/{name}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutSecretBody {
    /// The value, 1 byte to 16 KiB of UTF-8. Never shown back.
    #[schema(min_length = 1, max_length = 16384)]
    pub value: String,
}

/// `GET /v1/secrets` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// 1-100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// The `nextCursor` of the previous page.
    #[param(max_length = 64)]
    pub cursor: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

fn not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("secret {name:?} does not exist"))
}

/// A name from the path: a malformed one is a 400 on PUT (it could never be created), a 404
/// elsewhere (it cannot exist).
fn path_name(raw: &str, on_put: bool) -> Result<&str, ApiError> {
    match validate_secret_name(raw) {
        Ok(()) => Ok(raw),
        Err(why) if on_put => Err(invalid(format!("name: {why}"))),
        Err(_) => Err(not_found(raw)),
    }
}

/// `PUT /v1/secrets/{name}` → 201 new, 200 replaced.
#[utoipa::path(put, path = "/v1/secrets/{name}", operation_id = "putSecret", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name", min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-]{1,64}$")),
    request_body = PutSecretBody,
    responses(
        (status = 201, description = "Created (version 1)", body = SecretView),
        (status = 200, description = "Replaced: runs that start from now on (on every process within a minute) send the new value", body = SecretView),
        (status = 400, description = "`invalid_request`: a bad name, an empty or oversized value", body = ErrorBody),
        (status = 409, description = "`conflict`: the tenant has as many secrets as allowed", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is too large", body = ErrorBody),
    ))]
pub(crate) async fn put(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<SecretView>), ApiError> {
    let name = path_name(&raw, true)?;
    let body: PutSecretBody = read_json(&headers, body, MAX_PUT_BODY, EmptyBody::Reject).await?;
    validate_secret_value(&body.value).map_err(invalid)?;
    let now = state.clock.now_ms();
    let put = state
        .secrets
        .put(&tenant, name, &body.value, now, state.config.max_secrets)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(why) => ApiError::Conflict(why),
            other => other.into(),
        })?;
    tracing::info!(secret = %name, version = put.meta.version, created = put.created, "secret written");
    let status = if put.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(put.meta.into())))
}

/// `GET /v1/secrets`: the tenant's secrets by name, a page at a time (never values).
#[utoipa::path(get, path = "/v1/secrets", operation_id = "listSecrets", tag = "secrets",
    params(ListQuery),
    responses((status = 200, description = "A page of the tenant's secrets", body = SecretList),
        (status = 400, description = "`invalid_request`: a bad limit or cursor", body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<SecretList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(invalid(format!("limit must be 1-{MAX_PAGE}")));
    }
    let cursor = query.cursor.filter(|c| !c.is_empty());
    if let Some(c) = &cursor {
        validate_secret_name(c).map_err(|_| invalid("cursor is not one this API gave"))?;
    }
    let page = state
        .secrets
        .list(&tenant, cursor.as_deref(), limit)
        .await?;
    let next_cursor = (page.len() == limit)
        .then(|| page.last().map(|m| m.name.clone()))
        .flatten();
    Ok(Json(SecretList {
        secrets: page.into_iter().map(SecretView::from).collect(),
        next_cursor,
    }))
}

/// `GET /v1/secrets/{name}`: its name, times and version (never the value).
#[utoipa::path(get, path = "/v1/secrets/{name}", operation_id = "getSecret", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name", min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-]{1,64}$")),
    responses((status = 200, description = "The secret, without its value", body = SecretView),
        (status = 404, description = "`not_found`: no such secret", body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<SecretView>, ApiError> {
    let name = path_name(&raw, false)?;
    let meta = state
        .secrets
        .meta(&tenant, name)
        .await?
        .ok_or_else(|| not_found(name))?;
    Ok(Json(meta.into()))
}

/// `DELETE /v1/secrets/{name}` → 204. Runs that start afterwards no longer send it (on every
/// process within a minute); an agent that references it leaves that tool out, with a warning.
#[utoipa::path(delete, path = "/v1/secrets/{name}", operation_id = "deleteSecret", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name", min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-]{1,64}$")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such secret", body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let name = path_name(&raw, false)?;
    if state.secrets.delete(&tenant, name).await? {
        tracing::info!(secret = %name, "secret deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(name))
    }
}
