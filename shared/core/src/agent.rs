//! Agents a tenant defines (`/v1/agents`): instructions, model defaults and the tools a run of
//! the agent may call (built-ins, MCP servers, HTTP tools). Every change makes a new, immutable
//! version; a run records the version it was accepted with and runs with it, so a reader may
//! cache a version forever by `(tenant, agentId, version)`.
//!
//! The agent `main` always exists: version [`DEPLOYMENT_VERSION`] is the deployment's own
//! configuration, until the tenant defines a `main` of its own.

use crate::ids::TenantId;
use crate::run::QueueMode;
use crate::store::StoreResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The agent a turn runs when it names none.
pub const MAIN_AGENT: &str = "main";

/// The version of `main` that is the deployment's configuration (no stored definition).
pub const DEPLOYMENT_VERSION: u64 = 0;

/// Longest `instructions` (64 KiB).
pub const MAX_INSTRUCTIONS_BYTES: usize = 64 * 1024;

/// Longest `metadata`, as compact JSON (16 KiB).
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Agents a tenant may have at once unless the deployment says otherwise.
pub const DEFAULT_MAX_AGENTS: u32 = 100;

/// Where a secret's value comes from; the value itself is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum SecretRef {
    /// An environment variable of the process running the turn, refused unless the operator
    /// grants that variable (`AGENTLANE_AGENT_ENV_ALLOW`, `[agents] env_allow`).
    Env(String),
    /// One of the calling tenant's own secrets (`PUT /v1/secrets/{name}`), by name.
    Secret(String),
}

/// An MCP server whose tools the agent's runs may call (Streamable HTTP transport).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct McpServerDef {
    /// Prefix of its tools' names (`<name>__<tool>`): `[a-zA-Z0-9_-]{1,32}`, no `__`.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 32,
            pattern = r"^(?!.*__)[A-Za-z0-9_-]{1,32}$"
        )
    )]
    pub name: String,
    /// The server's endpoint (`http(s)://…/mcp`).
    pub url: String,
    /// Request headers, each a secret reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, SecretRef>,
    /// Only these of the server's tools (by their own names); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Per-call timeout (default 30000, at most 300000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 300000))]
    pub timeout_ms: Option<u64>,
    /// How the runner authenticates to the server (a bearer token it fetches itself); no
    /// `Authorization` header may be configured beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ToolAuth>,
}

/// A tool the runner calls by POSTing its arguments to a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HttpToolDef {
    /// The name the model calls it by: 1–64 chars of `[A-Za-z0-9_-]`, no `__` (kept for MCP
    /// tools).
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 64,
            pattern = r"^(?!.*__)[A-Za-z0-9_-]{1,64}$"
        )
    )]
    pub name: String,
    /// What the tool does, as the model is told (1–4096 bytes).
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 4096))]
    pub description: String,
    /// JSON Schema of the arguments (checked at create; each call is validated against it).
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub parameters: serde_json::Value,
    /// Where the arguments are POSTed (`http(s)://…`).
    pub url: String,
    /// Request headers, each a secret reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, SecretRef>,
    /// Per-attempt timeout (ms; default 30000, at most 300000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 300000))]
    pub timeout_ms: Option<u64>,
    /// Signs each request (`X-Agentlane-Signature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<SecretRef>,
    /// Retried twice on connect errors and 5xx when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// How the runner authenticates to the endpoint (a bearer token it fetches itself); no
    /// `Authorization` header may be configured beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ToolAuth>,
}

/// How the runner authenticates to an HTTP tool's endpoint or an MCP server, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum ToolAuth {
    /// OAuth 2.0 client credentials grant (RFC 6749 §4.4): the runner fetches an access token
    /// from `tokenUrl` (client id and secret sent with HTTP Basic), caches it until shortly
    /// before it expires, and sends it as `Authorization: Bearer <token>`.
    #[serde(rename = "oauth2_client_credentials", rename_all = "camelCase")]
    Oauth2ClientCredentials {
        /// The authorization server's token endpoint (`http(s)://…`), reached behind the same
        /// SSRF guard as the tool.
        token_url: String,
        /// The client id (1–256 characters).
        client_id: String,
        /// The client secret, a secret reference.
        client_secret: SecretRef,
        /// Scopes asked for (at most 16, each 1–128 characters without spaces); none: the
        /// authorization server's default.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
    },
}

/// The longest `clientId`, in characters.
pub const MAX_CLIENT_ID_CHARS: usize = 256;
/// The most `scopes` an `auth` may ask for.
pub const MAX_SCOPES: usize = 16;
/// The longest scope, in characters.
pub const MAX_SCOPE_CHARS: usize = 128;

/// Checks an `auth` of the tool or server at `path` (`tools.http[0]`) whose configured headers
/// are `headers`: `tokenUrl` is an http(s) URL with a host and no credentials, `clientId` is
/// 1-256 characters, at most 16 `scopes` of 1-128 characters without whitespace, and no
/// `Authorization` header is configured beside it. The message names the field
/// (`tools.http[0].auth.tokenUrl: …`) and never a secret.
pub fn check_tool_auth(
    path: &str,
    auth: &ToolAuth,
    headers: &BTreeMap<String, SecretRef>,
) -> Result<(), String> {
    let ToolAuth::Oauth2ClientCredentials {
        token_url,
        client_id,
        scopes,
        ..
    } = auth;
    let field = |name: &str, why: &str| format!("{path}.auth.{name}: {why}");
    match url::Url::parse(token_url) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            return Err(field("tokenUrl", "must be an http or https URL"));
        }
        Ok(u) if u.host_str().is_none_or(str::is_empty) => {
            return Err(field("tokenUrl", "must have a host"));
        }
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            return Err(field(
                "tokenUrl",
                "must not carry credentials (user:pass@); they go in clientId and clientSecret",
            ));
        }
        Ok(_) => {}
        Err(e) => return Err(field("tokenUrl", &format!("is not a URL: {e}"))),
    }
    let id_chars = client_id.chars().count();
    if id_chars == 0 || id_chars > MAX_CLIENT_ID_CHARS || client_id.chars().any(char::is_control) {
        return Err(field(
            "clientId",
            &format!("must be 1-{MAX_CLIENT_ID_CHARS} characters, without control characters"),
        ));
    }
    if scopes.len() > MAX_SCOPES {
        return Err(field(
            "scopes",
            &format!("{} scopes; at most {MAX_SCOPES} are allowed", scopes.len()),
        ));
    }
    for (i, scope) in scopes.iter().enumerate() {
        let chars = scope.chars().count();
        if chars == 0
            || chars > MAX_SCOPE_CHARS
            || scope.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(field(
                &format!("scopes[{i}]"),
                &format!("must be 1-{MAX_SCOPE_CHARS} characters without spaces"),
            ));
        }
    }
    if headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("authorization"))
    {
        return Err(format!(
            "{path}.auth: cannot be combined with an Authorization header (the token is sent as \
             Authorization: Bearer …); remove one of them"
        ));
    }
    Ok(())
}

/// The tools of an agent's runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AgentTools {
    /// Built-in tools by name; all of the deployment's when absent, none when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<Vec<String>>,
    /// MCP servers whose tools the runs may call (at most 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 8))]
    pub mcp_servers: Vec<McpServerDef>,
    /// Tools called by POSTing their arguments to a URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpToolDef>,
    /// Tools the caller's application runs: a call pauses the run until its output is posted
    /// (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 64))]
    pub client: Vec<crate::action::ClientTool>,
}

/// What a tenant says of an agent: every field optional, the deployment's settings filling in.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AgentSpec {
    /// A display name (1–256 characters); not used by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub name: Option<String>,
    /// The system prompt's base (at most 64 KiB; the deployment's bootstrap files and a turn's
    /// `extraSystemPrompt` still add to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(max_length = 65536))]
    pub instructions: Option<String>,
    /// Default model (`provider/model`, within the deployment's allow-list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            max_length = 256,
            pattern = r"^[A-Za-z0-9_.-]+/[^\s\x00-\x1f\x7f-\x9f]+$"
        )
    )]
    pub model: Option<String>,
    /// Models tried in order when the default fails (`provider/model` each); `None`: the
    /// deployment's (`AGENTLANE_FALLBACK_MODELS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_models: Option<Vec<String>>,
    /// Default `thinking` level (`off`, `minimal`, `low`, `medium`, `high`) of its turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<crate::ThinkingLevel>))]
    pub thinking: Option<String>,
    /// The tools its runs may call; `None`: the deployment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<AgentTools>,
    /// Default queue mode of the agent's sessions (a session's or a turn's own mode wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
    /// Only the last N user turns of history are sent to the model (older ones stay in the
    /// transcript); `None`: the deployment's limit. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1))]
    pub history_max_turns: Option<u32>,
    /// Calls that need a person's yes before they run (any kind of tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::action::ApprovalPolicy>,
    /// Each run's spend limits over all its model calls (a turn's `budget` fills first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::spend::RunBudget>,
    /// The most one model call of its runs may write (1–128,000 tokens; a turn's own
    /// `maxOutputTokens` wins): sent to the provider as its output cap, and what each call's
    /// budget reservation holds. `None`: the model's usual answer size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 128000))]
    pub max_output_tokens: Option<u32>,
    /// Prices (USD per million tokens) of this agent's runs, by `provider/model`: each may only
    /// raise the deployment's price of a model it prices (a lower price, or a model without a
    /// deployment price, is 400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub prices: Option<std::collections::BTreeMap<String, crate::spend::Price>>,
    /// Free-form JSON the tenant keeps with the agent (at most 16 KiB); never read by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

impl AgentSpec {
    /// The MCP servers of the agent (none when it names no tools).
    pub fn mcp_servers(&self) -> &[McpServerDef] {
        self.tools.as_ref().map_or(&[], |t| &t.mcp_servers)
    }

    /// The HTTP tools of the agent.
    pub fn http_tools(&self) -> &[HttpToolDef] {
        self.tools.as_ref().map_or(&[], |t| &t.http)
    }

    /// The client tools of the agent.
    pub fn client_tools(&self) -> &[crate::action::ClientTool] {
        self.tools.as_ref().map_or(&[], |t| &t.client)
    }

    /// Every secret reference the agent holds, with where it sits (`tools.http[0].signingSecret`).
    pub fn secret_refs(&self) -> Vec<(String, &SecretRef)> {
        let mut refs = Vec::new();
        for (i, server) in self.mcp_servers().iter().enumerate() {
            for (name, r) in &server.headers {
                refs.push((format!("tools.mcpServers[{i}].headers.{name}"), r));
            }
        }
        for (i, tool) in self.http_tools().iter().enumerate() {
            for (name, r) in &tool.headers {
                refs.push((format!("tools.http[{i}].headers.{name}"), r));
            }
            if let Some(r) = &tool.signing_secret {
                refs.push((format!("tools.http[{i}].signingSecret"), r));
            }
            if let Some(ToolAuth::Oauth2ClientCredentials { client_secret, .. }) = &tool.auth {
                refs.push((format!("tools.http[{i}].auth.clientSecret"), client_secret));
            }
        }
        for (i, server) in self.mcp_servers().iter().enumerate() {
            if let Some(ToolAuth::Oauth2ClientCredentials { client_secret, .. }) = &server.auth {
                refs.push((
                    format!("tools.mcpServers[{i}].auth.clientSecret"),
                    client_secret,
                ));
            }
        }
        refs
    }
}

/// One version of an agent. Its JSON is flat: `agentId`, `version`, `createdAt`, `updatedAt`
/// and the fields of its [`AgentSpec`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Agent {
    /// The tenant that owns the agent; never shown by the API.
    #[serde(skip)]
    pub tenant: TenantId,
    /// The agent's id: `[a-z0-9][a-z0-9-]{0,63}`, unique within its tenant.
    pub agent_id: String,
    /// 1 at create, one more at each change.
    pub version: u64,
    /// When version 1 was created (ms since the epoch).
    pub created_at: u64,
    /// When this version was made.
    pub updated_at: u64,
    /// What the tenant set (flattened into the agent's JSON).
    #[serde(flatten)]
    pub spec: AgentSpec,
}

impl<'de> Deserialize<'de> for Agent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // `flatten` and the spec's `deny_unknown_fields` do not mix: take the four fields of
        // the version off first, then read the rest as the spec.
        let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let agent_id = map
            .remove("agentId")
            .and_then(|v| v.as_str().map(str::to_owned))
            .ok_or_else(|| D::Error::custom("agentId must be a string"))?;
        let mut number = |name: &str| -> Result<u64, D::Error> {
            map.remove(name)
                .and_then(|v| v.as_u64())
                .ok_or_else(|| D::Error::custom(format!("{name} must be a number")))
        };
        let version = number("version")?;
        let created_at = number("createdAt")?;
        let updated_at = number("updatedAt")?;
        let spec =
            AgentSpec::deserialize(serde_json::Value::Object(map)).map_err(D::Error::custom)?;
        Ok(Agent {
            tenant: TenantId::new(""),
            agent_id,
            version,
            created_at,
            updated_at,
            spec,
        })
    }
}

/// `agentId`: `[a-z0-9][a-z0-9-]{0,63}`.
pub fn validate_agent_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if first_ok && rest_ok && id.len() <= 64 {
        Ok(())
    } else {
        Err(format!(
            "agentId {id:?} must be 1-64 characters of a-z, 0-9 and -, starting with a letter or digit"
        ))
    }
}

/// The name of an MCP server, the prefix of its tools (`<name>__<tool>`): 1-32 characters of
/// `[a-zA-Z0-9_-]`, without `__`.
pub fn validate_tool_prefix(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-32 characters of a-z, A-Z, 0-9, _ and -, without \"__\""
        ))
    }
}

/// Stored agents, per tenant. Versions are immutable once written.
#[async_trait]
pub trait AgentStore: Send + Sync + 'static {
    /// Creates `agent` (its `version` is ignored) unless the id is live (`Conflict`) or the
    /// tenant already has `max_agents` agents (`Conflict` naming the cap). An id deleted before
    /// continues its numbering (a deleted agent's versions stay readable by runs that use them),
    /// so `(tenant, agentId, version)` always names one definition. Returns what was stored.
    async fn create_agent(&self, agent: &Agent, max_agents: u32) -> StoreResult<Agent>;

    /// The current version of a live agent; `None` when it does not exist or was deleted.
    async fn get_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<Option<Agent>>;

    /// One stored version, deleted or not.
    async fn get_agent_version(
        &self,
        tenant: &TenantId,
        agent_id: &str,
        version: u64,
    ) -> StoreResult<Option<Agent>>;

    /// Live agents by id, the first after `after`, at most `limit`.
    async fn list_agents(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Agent>>;

    /// Stores `agent` as the new current version if the current one is still
    /// `agent.version - 1` (`Conflict` otherwise, `NotFound` when the agent is gone).
    async fn update_agent(&self, agent: &Agent) -> StoreResult<()>;

    /// Deletes the agent (its versions stay for the runs that use them); `false` when there
    /// was no live agent.
    async fn delete_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<bool>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn agent_ids() {
        for ok in ["main", "a", "support-bot", "0x", &"a".repeat(64)] {
            assert_eq!(validate_agent_id(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "A", "a_b", "a b", "é", &"a".repeat(65)] {
            assert!(validate_agent_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secret_references_are_tagged_objects_and_never_plain_strings() {
        let env: SecretRef = serde_json::from_str(r#"{"env":"TOKEN"}"#).unwrap();
        assert_eq!(env, SecretRef::Env("TOKEN".into()));
        let secret: SecretRef = serde_json::from_str(r#"{"secret":"prod/x"}"#).unwrap();
        assert_eq!(secret, SecretRef::Secret("prod/x".into()));
        assert!(serde_json::from_str::<SecretRef>(r#""sk-live""#).is_err());
        assert!(serde_json::from_str::<SecretRef>(r#"{"env":"A","secret":"B"}"#).is_err());
        assert_eq!(serde_json::to_string(&env).unwrap(), r#"{"env":"TOKEN"}"#);
    }

    fn auth(token_url: &str, client_id: &str, scopes: &[&str]) -> ToolAuth {
        ToolAuth::Oauth2ClientCredentials {
            token_url: token_url.into(),
            client_id: client_id.into(),
            client_secret: SecretRef::Secret("oauth".into()),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn tool_auth_reads_its_tagged_json_and_refuses_unknown_fields() {
        let json = serde_json::json!({"type": "oauth2_client_credentials",
            "tokenUrl": "https://auth.example/token", "clientId": "app",
            "clientSecret": {"secret": "oauth"}, "scopes": ["a", "b"]});
        let parsed: ToolAuth = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            parsed,
            auth("https://auth.example/token", "app", &["a", "b"])
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), json);
        let no_scopes: ToolAuth = serde_json::from_value(serde_json::json!({
            "type": "oauth2_client_credentials", "tokenUrl": "https://a.example/t",
            "clientId": "app", "clientSecret": {"env": "S"}}))
        .unwrap();
        let ToolAuth::Oauth2ClientCredentials { scopes, .. } = &no_scopes;
        assert!(scopes.is_empty());
        for bad in [
            serde_json::json!({"type": "oauth2_client_credentials", "tokenUrl": "https://a/t",
                "clientId": "app", "clientSecret": {"env": "S"}, "audience": "x"}),
            serde_json::json!({"type": "basic", "tokenUrl": "https://a/t",
                "clientId": "app", "clientSecret": {"env": "S"}}),
            serde_json::json!({"type": "oauth2_client_credentials", "tokenUrl": "https://a/t",
                "clientId": "app", "clientSecret": "plain-secret"}),
            serde_json::json!({"tokenUrl": "https://a/t", "clientId": "app",
                "clientSecret": {"env": "S"}}),
        ] {
            assert!(
                serde_json::from_value::<ToolAuth>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn tool_auth_rules() {
        let none = BTreeMap::new();
        let long_id = "i".repeat(MAX_CLIENT_ID_CHARS);
        let long_scope = "s".repeat(MAX_SCOPE_CHARS);
        let sixteen: Vec<String> = (0..MAX_SCOPES).map(|i| format!("s{i}")).collect();
        let sixteen: Vec<&str> = sixteen.iter().map(String::as_str).collect();
        let ok = [
            auth("https://auth.example/oauth/token", "app", &[]),
            auth("http://127.0.0.1:9000/token", "app", &["read", "write:all"]),
            auth("https://auth.example/t?tenant=1", &long_id, &[&long_scope]),
            auth("https://auth.example/t", "é-app", &sixteen),
        ];
        for a in &ok {
            assert_eq!(check_tool_auth("tools.http[0]", a, &none), Ok(()), "{a:?}");
        }
        let too_long_id = "i".repeat(MAX_CLIENT_ID_CHARS + 1);
        let too_long_scope = "s".repeat(MAX_SCOPE_CHARS + 1);
        let seventeen: Vec<String> = (0..=MAX_SCOPES).map(|i| format!("s{i}")).collect();
        let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
        let bad = [
            (auth("ftp://auth.example/t", "app", &[]), "auth.tokenUrl:"),
            (auth("not a url", "app", &[]), "auth.tokenUrl:"),
            (auth("/token", "app", &[]), "auth.tokenUrl:"),
            (
                auth("https://u:p@auth.example/t", "app", &[]),
                "auth.tokenUrl:",
            ),
            (auth("https://auth.example/t", "", &[]), "auth.clientId:"),
            (
                auth("https://auth.example/t", &too_long_id, &[]),
                "auth.clientId:",
            ),
            (
                auth("https://auth.example/t", "a\nb", &[]),
                "auth.clientId:",
            ),
            (
                auth("https://auth.example/t", "app", &seventeen),
                "auth.scopes:",
            ),
            (
                auth("https://auth.example/t", "app", &[""]),
                "auth.scopes[0]:",
            ),
            (
                auth("https://auth.example/t", "app", &["a", "b c"]),
                "auth.scopes[1]:",
            ),
            (
                auth("https://auth.example/t", "app", &["a\tb"]),
                "auth.scopes[0]:",
            ),
            (
                auth("https://auth.example/t", "app", &[&too_long_scope]),
                "auth.scopes[0]:",
            ),
        ];
        for (a, field) in &bad {
            let err = check_tool_auth("tools.mcpServers[2]", a, &none).unwrap_err();
            assert!(
                err.starts_with(&format!("tools.mcpServers[2].{field}")),
                "{err}"
            );
        }
        let mut headers = BTreeMap::new();
        headers.insert("X-Api-Key".to_owned(), SecretRef::Env("K".into()));
        assert_eq!(check_tool_auth("tools.http[1]", &ok[0], &headers), Ok(()));
        headers.insert("authorization".to_owned(), SecretRef::Env("T".into()));
        let err = check_tool_auth("tools.http[1]", &ok[0], &headers).unwrap_err();
        assert!(err.starts_with("tools.http[1].auth:"), "{err}");
        assert!(err.contains("Authorization header"), "{err}");
    }

    #[test]
    fn secret_refs_list_the_client_secrets_of_auth() {
        let spec: AgentSpec = serde_json::from_value(serde_json::json!({"tools": {
            "http": [{"name": "t", "description": "d", "parameters": {"type": "object"},
                "url": "https://api.example/t", "signingSecret": {"secret": "sign"},
                "auth": {"type": "oauth2_client_credentials", "tokenUrl": "https://a.example/t",
                    "clientId": "app", "clientSecret": {"secret": "http-oauth"}}}],
            "mcpServers": [{"name": "m", "url": "https://mcp.example/mcp",
                "auth": {"type": "oauth2_client_credentials", "tokenUrl": "https://a.example/t",
                    "clientId": "app", "clientSecret": {"env": "MCP_OAUTH"}, "scopes": ["x"]}}]
        }}))
        .unwrap();
        let refs: Vec<(String, SecretRef)> = spec
            .secret_refs()
            .into_iter()
            .map(|(path, r)| (path, r.clone()))
            .collect();
        assert_eq!(
            refs,
            vec![
                (
                    "tools.http[0].signingSecret".into(),
                    SecretRef::Secret("sign".into())
                ),
                (
                    "tools.http[0].auth.clientSecret".into(),
                    SecretRef::Secret("http-oauth".into())
                ),
                (
                    "tools.mcpServers[0].auth.clientSecret".into(),
                    SecretRef::Env("MCP_OAUTH".into())
                ),
            ]
        );
    }

    #[test]
    fn an_agent_serializes_flat_with_its_spec() {
        let agent = Agent {
            tenant: TenantId::new("t"),
            agent_id: "bot".into(),
            version: 2,
            created_at: 1,
            updated_at: 3,
            spec: AgentSpec {
                instructions: Some("Be brief.".into()),
                ..AgentSpec::default()
            },
        };
        let json = serde_json::to_value(&agent).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"agentId": "bot", "version": 2, "createdAt": 1, "updatedAt": 3,
                "instructions": "Be brief."})
        );
        let back: Agent = serde_json::from_value(json).unwrap();
        assert_eq!(back.spec, agent.spec);
    }
}
