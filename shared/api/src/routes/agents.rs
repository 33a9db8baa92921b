//! `/v1/agents`: the agents a tenant defines (instructions, model defaults, tools). Every change
//! makes a new version; older versions stay readable (`?version=N`). Another tenant's agents
//! answer 404. The agent `main` always exists for turns: the deployment's configuration, until
//! the tenant defines its own.

use crate::ApiConfig;
use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::extract::{EmptyBody, read_json};
use crate::validate::{
    check_model_allowed, parse_queue_mode_name, validate_model, validate_thinking,
};
use agentlane_core::agent::{
    MAX_INSTRUCTIONS_BYTES, MAX_METADATA_BYTES, validate_agent_id, validate_tool_prefix,
};
use agentlane_core::tenant_secret::validate_secret_name;
use agentlane_core::{Agent, AgentSpec, SecretRef, StoreError, TenantId};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Longest `name`.
const MAX_NAME_CHARS: usize = 256;
/// Largest stored definition, as JSON (a DynamoDB item holds 400 KB; a head and a version are
/// separate items).
pub(crate) const MAX_AGENT_BYTES: usize = 256 * 1024;
/// Agents per page unless `limit` says otherwise, and the most a page holds.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;
/// Writes of a PATCH retried when another PATCH landed in between.
const PATCH_RETRIES: u32 = 3;
/// Longest timeout of an MCP server's calls.
const MAX_TOOL_TIMEOUT_MS: u64 = 300_000;

/// A page of agents.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentList {
    pub agents: Vec<Agent>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /v1/agents` query.
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

/// `GET /v1/agents/{agentId}` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionQuery {
    /// An older version (the current one when absent).
    #[param(minimum = 1)]
    pub version: Option<u64>,
}

/// The body of `POST /v1/agents`: `agentId` and any field of an agent.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct NewAgentBody {
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"
    )]
    agent_id: String,
    #[serde(flatten)]
    spec: AgentSpec,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

fn agent_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("agent {id:?} does not exist"))
}

/// An agent id from the path; a malformed one cannot exist (404).
fn path_id(raw: &str) -> Result<&str, ApiError> {
    validate_agent_id(raw).map_err(|_| agent_not_found(raw))?;
    Ok(raw)
}

/// Names the secret references that are plain values (`"sk-…"` instead of `{"env": …}`): the
/// headers, an HTTP tool's `signingSecret` and an `auth.clientSecret`, so the 400 says where,
/// before the spec's own decoding speaks of enum variants.
fn check_plain_secrets(spec: &Map<String, Value>) -> Result<(), ApiError> {
    let Some(tools) = spec.get("tools").and_then(Value::as_object) else {
        return Ok(());
    };
    let refused = |path: String| {
        invalid(format!(
            "{path} must be a secret reference, {{\"secret\": \"<name>\"}} (a tenant secret, \
             PUT /v1/secrets/<name>) or {{\"env\": \"VAR\"}} (a variable the operator granted); \
             plain values are never stored"
        ))
    };
    for (list, has_signing) in [("mcpServers", false), ("http", true)] {
        let Some(items) = tools.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            if let Some(headers) = item.get("headers").and_then(Value::as_object) {
                for (name, value) in headers {
                    if !value.is_object() {
                        return Err(refused(format!("tools.{list}[{i}].headers.{name}")));
                    }
                }
            }
            if has_signing
                && item
                    .get("signingSecret")
                    .is_some_and(|v| !v.is_object() && !v.is_null())
            {
                return Err(refused(format!("tools.{list}[{i}].signingSecret")));
            }
            // Required when `auth` is given: `null` is no reference either.
            if item
                .get("auth")
                .and_then(|auth| auth.get("clientSecret"))
                .is_some_and(|v| !v.is_object())
            {
                return Err(refused(format!("tools.{list}[{i}].auth.clientSecret")));
            }
        }
    }
    Ok(())
}

/// Each secret reference of `spec` names something this tenant may use: `{"secret": name}`
/// one of its own secrets (which must exist), `{"env": VAR}` a variable the operator granted
/// (`AGENTLANE_AGENT_ENV_ALLOW`); the 400 names the field.
async fn check_references(
    spec: &AgentSpec,
    state: &Shared,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    for (path, reference) in spec.secret_refs() {
        match reference {
            SecretRef::Env(var) if !state.config.agent_env_allow.allows(var) => {
                return Err(invalid(format!(
                    "{path}: the environment variable {var} is not granted to agents by this \
                     deployment; store the value as a tenant secret (PUT /v1/secrets/<name>) \
                     and write {{\"secret\": \"<name>\"}}"
                )));
            }
            SecretRef::Env(_) => {}
            SecretRef::Secret(name) => {
                validate_secret_name(name).map_err(|why| {
                    invalid(format!(
                        "{path}: {{\"secret\": …}} names one of the tenant's secrets: {why}"
                    ))
                })?;
                if state.secrets.meta(tenant, name).await?.is_none() {
                    return Err(invalid(format!(
                        "{path}: the tenant has no secret {name:?}; create it first with \
                         PUT /v1/secrets/{name}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Decodes a spec from its JSON fields, the queue mode by name or alias, naming the field that
/// fails.
fn decode_spec(mut fields: Map<String, Value>) -> Result<AgentSpec, ApiError> {
    check_plain_secrets(&fields)?;
    if let Some(Value::String(mode)) = fields.get("queueMode") {
        let mode = parse_queue_mode_name(mode)?;
        fields.insert("queueMode".into(), Value::String(mode.as_str().into()));
    }
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            invalid(format!("invalid agent: {inner}"))
        } else {
            invalid(format!("{path}: {inner}"))
        }
    })
}

/// Every rule of a definition beyond its shape; each failure names the field.
pub(crate) fn check_spec(
    spec: &AgentSpec,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    if let Some(name) = &spec.name
        && (name.trim().is_empty() || name.chars().count() > MAX_NAME_CHARS)
    {
        return Err(invalid(format!(
            "name must be 1-{MAX_NAME_CHARS} characters"
        )));
    }
    if let Some(text) = &spec.instructions
        && text.len() > MAX_INSTRUCTIONS_BYTES
    {
        return Err(invalid(format!(
            "instructions is {} bytes; at most {MAX_INSTRUCTIONS_BYTES} are allowed",
            text.len()
        )));
    }
    let models = spec.model.iter().map(|m| ("model", m));
    let fallbacks = spec
        .fallback_models
        .iter()
        .flatten()
        .map(|m| ("fallbackModels", m));
    for (field, model) in models.chain(fallbacks) {
        validate_model(model, config)
            .and_then(|()| check_model_allowed(model, config, tenant))
            .map_err(|e| invalid(format!("{field}: {e}")))?;
    }
    if let Some(level) = &spec.thinking {
        validate_thinking(level, spec.model.as_deref(), config)
            .map_err(|e| invalid(format!("thinking: {e}")))?;
    }
    if let Some(turns) = spec.history_max_turns
        && turns == 0
    {
        return Err(invalid("historyMaxTurns must be at least 1"));
    }
    if let Some(meta) = &spec.metadata {
        let size = serde_json::to_vec(meta).map(|v| v.len()).unwrap_or(0);
        if size > MAX_METADATA_BYTES {
            return Err(invalid(format!(
                "metadata is {size} bytes of JSON; at most {MAX_METADATA_BYTES} are allowed"
            )));
        }
    }
    if let Some(problem) = spec.budget.as_ref().and_then(|b| b.problem("budget")) {
        return Err(ApiError::InvalidRequest(problem));
    }
    for (model, price) in spec.prices.iter().flatten() {
        if let Some(problem) = price.problem() {
            return Err(invalid(format!("prices.{model}: {problem}")));
        }
        if !model.contains('/') || model.len() > 128 {
            return Err(invalid(format!(
                "prices.{model}: prices are keyed by provider/model"
            )));
        }
    }
    if spec.prices.as_ref().is_some_and(|p| p.len() > 32) {
        return Err(invalid("prices: at most 32 models"));
    }
    if let Some(problem) = spec.approval.as_ref().and_then(|a| a.problem()) {
        return Err(invalid(problem));
    }
    check_tools(spec, config)?;
    check_bounds(spec, config)
}

/// The most MCP servers one agent may name: each is connected (in parallel, 5 s at most) at
/// the start of every run.
pub(crate) const MAX_MCP_SERVERS: usize = 8;

/// The rules that keep a tenant inside the operator's bounds: its prices may only raise the
/// deployment's, its output cap is bounded, it names at most [`MAX_MCP_SERVERS`] MCP servers,
/// no HTTP tool takes a built-in's name, and no configured header is one agentlane sets.
fn check_bounds(spec: &AgentSpec, config: &ApiConfig) -> Result<(), ApiError> {
    for (model, price) in spec.prices.iter().flatten() {
        if let Some(problem) =
            agentlane_core::spend::agent_price_problem(config.prices.price(model), price)
        {
            return Err(invalid(format!("prices.{model}.{problem}")));
        }
    }
    if let Some(cap) = spec.max_output_tokens
        && let Some(problem) = agentlane_core::spend::output_tokens_problem("maxOutputTokens", cap)
    {
        return Err(invalid(problem));
    }
    let servers = spec.mcp_servers();
    if servers.len() > MAX_MCP_SERVERS {
        return Err(invalid(format!(
            "tools.mcpServers: {} servers; at most {MAX_MCP_SERVERS} are allowed",
            servers.len()
        )));
    }
    for (i, tool) in spec.http_tools().iter().enumerate() {
        if config.builtin_tools.contains(&tool.name) {
            return Err(invalid(format!(
                "tools.http[{i}].name: {:?} is a built-in tool's name",
                tool.name
            )));
        }
    }
    let headers = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("tools.mcpServers[{i}].headers"), &s.headers))
        .chain(
            spec.http_tools()
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tools.http[{i}].headers"), &t.headers)),
        );
    for (field, headers) in headers {
        if let Some(name) = headers
            .keys()
            .find(|n| agentlane_tools::http_tool::is_reserved_header(n))
        {
            return Err(invalid(format!(
                "{field}: {name:?} is set by agentlane and may not be configured"
            )));
        }
    }
    Ok(())
}

fn check_url(field: &str, url: &str) -> Result<(), ApiError> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
        _ => Err(invalid(format!(
            "{field} must be an http(s) URL with a host"
        ))),
    }
}

fn check_header_name(field: &str, name: &str) -> Result<(), ApiError> {
    axum::http::HeaderName::from_bytes(name.as_bytes())
        .map(|_| ())
        .map_err(|_| invalid(format!("{field}: {name:?} is not a valid HTTP header name")))
}

fn check_tools(spec: &AgentSpec, config: &ApiConfig) -> Result<(), ApiError> {
    let Some(tools) = &spec.tools else {
        return Ok(());
    };
    let mut names = BTreeSet::new();
    for name in tools.builtin.iter().flatten() {
        if !config.builtin_tools.iter().any(|b| b == name) {
            return Err(invalid(format!(
                "tools.builtin: {name:?} is not a built-in tool; built-ins: {}",
                config.builtin_tools.join(", ")
            )));
        }
        names.insert(name.clone());
    }
    let mut prefixes = BTreeSet::new();
    for (i, server) in tools.mcp_servers.iter().enumerate() {
        let field = format!("tools.mcpServers[{i}]");
        validate_tool_prefix(&server.name).map_err(|e| invalid(format!("{field}.name: {e}")))?;
        if !prefixes.insert(server.name.clone()) {
            return Err(invalid(format!(
                "{field}.name: another MCP server is named {:?}",
                server.name
            )));
        }
        check_url(&format!("{field}.url"), &server.url)?;
        for name in server.headers.keys() {
            check_header_name(&format!("{field}.headers"), name)?;
        }
        if let Some(auth) = &server.auth {
            agentlane_core::agent::check_tool_auth(&field, auth, &server.headers)
                .map_err(invalid)?;
        }
        if let Some(ms) = server.timeout_ms
            && !(1..=MAX_TOOL_TIMEOUT_MS).contains(&ms)
        {
            return Err(invalid(format!(
                "{field}.timeoutMs must be 1-{MAX_TOOL_TIMEOUT_MS}"
            )));
        }
        if let Some(allowed) = &server.allowed_tools
            && allowed.iter().any(|t| t.is_empty() || t.len() > 128)
        {
            return Err(invalid(format!(
                "{field}.allowedTools: each name must be 1-128 characters"
            )));
        }
    }
    for (i, tool) in tools.http.iter().enumerate() {
        let field = format!("tools.http[{i}]");
        agentlane_tools::http_tool::check_definition(
            &tool.name,
            &tool.description,
            &tool.parameters,
            &tool.url,
            tool.timeout_ms,
        )
        .map_err(|e| invalid(format!("{field}.{}: {}", e.field, e.message)))?;
        for name in tool.headers.keys() {
            check_header_name(&format!("{field}.headers"), name)?;
        }
        if let Some(auth) = &tool.auth {
            agentlane_core::agent::check_tool_auth(&field, auth, &tool.headers).map_err(invalid)?;
        }
        if tool.name.contains("__") {
            return Err(invalid(format!(
                "{field}.name: \"__\" is kept for MCP tools (<server>__<tool>)"
            )));
        }
        if !names.insert(tool.name.clone()) {
            return Err(invalid(format!(
                "{field}.name: another tool of the agent is named {:?}",
                tool.name
            )));
        }
    }
    if tools.builtin.is_none() {
        names.extend(config.builtin_tools.iter().cloned());
    }
    crate::validate::check_client_tools(&tools.client, "tools.client", &names, &prefixes)?;
    Ok(())
}

/// A stored definition must fit the store's item.
fn check_size(agent: &Agent) -> Result<(), ApiError> {
    let size = serde_json::to_vec(agent).map(|v| v.len()).unwrap_or(0);
    if size > MAX_AGENT_BYTES {
        return Err(invalid(format!(
            "the agent is {size} bytes as JSON; at most {MAX_AGENT_BYTES} are allowed"
        )));
    }
    Ok(())
}

async fn read_object(
    state: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Map<String, Value>, ApiError> {
    read_json(
        headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await
}

/// `POST /v1/agents` → 201 the agent, version 1.
#[utoipa::path(post, path = "/v1/agents", operation_id = "createAgent", tag = "agents",
    request_body = NewAgentBody,
    responses(
        (status = 201, description = "The agent", body = Agent,
            links(
                ("GetAgent" = (operation_id = "getAgent", parameters(("agentId" = "$response.body#/agentId")))),
                ("UpdateAgent" = (operation_id = "updateAgent", parameters(("agentId" = "$response.body#/agentId")))),
                ("DeleteAgent" = (operation_id = "deleteAgent", parameters(("agentId" = "$response.body#/agentId")))),
            )),
        (status = 400, description = "`invalid_request`: the message names the field", body = ErrorBody),
        (status = 409, description = "`conflict`: the id is taken, or the tenant has as many agents as allowed", body = ErrorBody),
    ))]
pub(crate) async fn create(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Agent>), ApiError> {
    let mut fields = read_object(&state, &headers, body).await?;
    let agent_id = match fields.remove("agentId") {
        Some(Value::String(id)) => id,
        Some(_) => return Err(invalid("agentId must be a string")),
        None => return Err(invalid("agentId is required")),
    };
    validate_agent_id(&agent_id).map_err(invalid)?;
    let spec = decode_spec(fields)?;
    check_spec(&spec, &state.config, &tenant)?;
    check_references(&spec, &state, &tenant).await?;
    let now = state.clock.now_ms();
    let agent = Agent {
        tenant: tenant.clone(),
        agent_id,
        version: 1,
        created_at: now,
        updated_at: now,
        spec,
    };
    check_size(&agent)?;
    let stored = state
        .agents
        .create_agent(&agent, state.config.max_agents)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(why) => ApiError::Conflict(why),
            other => other.into(),
        })?;
    tracing::info!(agent_id = %stored.agent_id, version = stored.version, "agent created");
    Ok((StatusCode::CREATED, Json(stored)))
}

/// `GET /v1/agents`: the tenant's agents by id, a page at a time.
#[utoipa::path(get, path = "/v1/agents", operation_id = "listAgents", tag = "agents",
    params(ListQuery),
    responses((status = 200, description = "A page of the tenant's agents", body = AgentList)))]
pub(crate) async fn list(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<AgentList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(invalid(format!("limit must be 1-{MAX_PAGE}")));
    }
    let cursor = query.cursor.filter(|c| !c.is_empty());
    if let Some(c) = &cursor {
        validate_agent_id(c).map_err(|_| invalid("cursor is not one this API gave"))?;
    }
    let agents = state
        .agents
        .list_agents(&tenant, cursor.as_deref(), limit)
        .await?;
    let next_cursor = (agents.len() == limit)
        .then(|| agents.last().map(|a| a.agent_id.clone()))
        .flatten();
    Ok(Json(AgentList {
        agents,
        next_cursor,
    }))
}

/// `GET /v1/agents/{agentId}`: the current version, or `?version=N`.
#[utoipa::path(get, path = "/v1/agents/{agentId}", operation_id = "getAgent", tag = "agents",
    params(("agentId" = String, Path, description = "An agent id", min_length = 1, max_length = 64, pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"), VersionQuery),
    responses((status = 200, description = "The agent", body = Agent),
        (status = 404, description = "`not_found`: no such agent (or version)", body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<VersionQuery>,
) -> Result<Json<Agent>, ApiError> {
    let id = path_id(&raw)?;
    let current = state
        .agents
        .get_agent(&tenant, id)
        .await?
        .ok_or_else(|| agent_not_found(id))?;
    match query.version {
        None => Ok(Json(current)),
        Some(v) if v == current.version => Ok(Json(current)),
        Some(v) if v == 0 || v > current.version => Err(ApiError::NotFound(format!(
            "agent {id:?} has no version {v} (its current version is {})",
            current.version
        ))),
        Some(v) => state
            .agents
            .get_agent_version(&tenant, id, v)
            .await?
            .map(Json)
            .ok_or_else(|| ApiError::NotFound(format!("agent {id:?} has no version {v}"))),
    }
}

/// `PATCH /v1/agents/{agentId}`: any field (`null` clears it) → the new version.
#[utoipa::path(patch, path = "/v1/agents/{agentId}", operation_id = "updateAgent", tag = "agents",
    params(("agentId" = String, Path, description = "An agent id", min_length = 1, max_length = 64, pattern = r"^[a-z0-9][a-z0-9-]{0,63}$")),
    request_body = AgentSpec,
    responses((status = 200, description = "The agent's new version", body = Agent),
        (status = 400, description = "`invalid_request`: the message names the field", body = ErrorBody),
        (status = 404, description = "`not_found`: no such agent", body = ErrorBody)))]
pub(crate) async fn patch(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Agent>, ApiError> {
    let id = path_id(&raw)?.to_owned();
    let changes = read_object(&state, &headers, body).await?;
    for fixed in ["agentId", "version", "createdAt", "updatedAt"] {
        if changes.contains_key(fixed) {
            return Err(invalid(format!("{fixed} cannot be changed")));
        }
    }
    // The changes alone must be well formed, whatever the current version holds.
    let checked: Map<String, Value> = changes
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    decode_spec(checked)?;
    for _ in 0..=PATCH_RETRIES {
        let current = state
            .agents
            .get_agent(&tenant, &id)
            .await?
            .ok_or_else(|| agent_not_found(&id))?;
        let mut fields = match serde_json::to_value(&current.spec) {
            Ok(Value::Object(map)) => map,
            _ => return Err(ApiError::Internal("an agent that does not encode".into())),
        };
        for (key, value) in &changes {
            if value.is_null() {
                fields.remove(key);
            } else {
                fields.insert(key.clone(), value.clone());
            }
        }
        let spec = decode_spec(fields)?;
        check_spec(&spec, &state.config, &tenant)?;
        check_references(&spec, &state, &tenant).await?;
        let next = Agent {
            version: current.version + 1,
            updated_at: state.clock.now_ms().max(current.updated_at),
            spec,
            ..current
        };
        check_size(&next)?;
        match state.agents.update_agent(&next).await {
            Ok(()) => {
                tracing::info!(agent_id = %id, version = next.version, "agent changed");
                return Ok(Json(next));
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(StoreError::NotFound(_)) => return Err(agent_not_found(&id)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Conflict(
        "the agent kept changing while it was being updated; try again".into(),
    ))
}

/// `DELETE /v1/agents/{agentId}` → 204. Runs accepted before go on with their version; later
/// turns naming the agent answer 404.
#[utoipa::path(delete, path = "/v1/agents/{agentId}", operation_id = "deleteAgent", tag = "agents",
    params(("agentId" = String, Path, description = "An agent id", min_length = 1, max_length = 64, pattern = r"^[a-z0-9][a-z0-9-]{0,63}$")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such agent", body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiPath(raw): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id(&raw)?;
    if state.agents.delete_agent(&tenant, id).await? {
        tracing::info!(agent_id = %id, "agent deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(agent_not_found(id))
    }
}
