//! The agent a run runs: its definition at the version the run was accepted with, turned into
//! what a pickup needs ([`AgentProfile`]: the system prompt's base, model defaults, the tool
//! registry with its MCP and HTTP tools).
//!
//! Versions are immutable, so [`AgentResolver`] caches them per process by `(tenant, agentId,
//! version)`: a warm runner reads a version once. Secret references are resolved by a
//! [`SecretSource`] for the run's own tenant (its secrets, and only the environment variables
//! the operator granted); values live only in the tools built from them, and every tool of a
//! profile that resolved any passes its answers and errors through a
//! [`Redactor`](agentlane_tools::redact::Redactor) of those values, so they never reach the
//! run, its transcript, its events or the logs.

use agentlane_core::agent::{DEPLOYMENT_VERSION, HttpToolDef, McpServerDef, SecretRef};
use agentlane_core::{Agent, AgentStore, Run, StoreError, TenantId};
use agentlane_tools::http_tool::{HttpTool, HttpToolConfig};
use agentlane_tools::mcp::{McpPool, McpServerConfig};
use agentlane_tools::ssrf::SsrfPolicy;
use agentlane_tools::{Tool, ToolRegistry};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Versions kept per process before the cache starts over.
const CACHED_VERSIONS: usize = 1024;
/// An MCP server's call timeout when its definition names none.
const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);
/// An HTTP tool's timeout when its definition names none.
const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest one MCP server's connect and `tools/list` may take at a run's start (the
/// servers are reached in parallel, so this bounds the whole setup).
pub const MCP_SETUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most MCP servers a run connects to (the API refuses an agent naming more).
pub const MAX_MCP_SERVERS: usize = 8;

/// What bounds the setup of a run's tools: the run's stop signal (abort, timeout, lost lock,
/// shutdown) and its deadline. The default bounds nothing but [`MCP_SETUP_TIMEOUT`].
#[derive(Debug, Clone, Default)]
pub struct SetupBound {
    /// Cancelled when the run is stopped: servers not listed by then are left out.
    pub cancel: tokio_util::sync::CancellationToken,
    /// When the run must end: no server is waited for past it.
    pub deadline: Option<tokio::time::Instant>,
}

impl SetupBound {
    /// How long one server may take from now: [`MCP_SETUP_TIMEOUT`], or less before the
    /// deadline.
    fn limit(&self) -> Duration {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        left.map_or(MCP_SETUP_TIMEOUT, |left| left.min(MCP_SETUP_TIMEOUT))
    }
}

/// What one pickup of a run runs with.
#[derive(Clone)]
pub struct AgentProfile {
    /// The agent's id; `main` (agentlane_core::MAIN_AGENT) for the deployment's own agent.
    pub agent_id: String,
    /// 0: the deployment's own `main`.
    pub version: u64,
    /// The system prompt's base; `None`: the deployment's.
    pub instructions: Option<String>,
    /// The model when the turn names none; `None`: the deployment's default.
    pub model: Option<String>,
    /// Replaces the deployment's fallback chain when set.
    pub fallback_models: Option<Vec<String>>,
    /// The thinking level when the turn names none.
    pub thinking: Option<String>,
    /// Replaces the deployment's history limit when set.
    pub history_max_turns: Option<u32>,
    /// Every tool the run may call.
    pub tools: ToolRegistry,
    /// What went wrong building the tools (an MCP server unreachable, a secret missing): the
    /// run goes on without those tools and its record lists these.
    pub warnings: Vec<String>,
    /// The names of the tools the caller's application runs (in `tools` too): a call of one
    /// pauses the run.
    pub client_tools: std::collections::BTreeSet<String>,
    /// Which calls need a person's yes.
    pub approval: Option<agentlane_core::ApprovalPolicy>,
    /// The spend limits of each run (a turn's own fill what it sets).
    pub budget: Option<agentlane_core::spend::RunBudget>,
    /// Prices over the deployment's, by `provider/model`: they may only raise them (see
    /// [`agentlane_core::spend::agent_price`]).
    pub prices: std::collections::BTreeMap<String, agentlane_core::spend::Price>,
    /// The most one model call may write when the turn sets no `maxOutputTokens`; `None`: the
    /// model's usual answer size.
    pub max_output_tokens: Option<u32>,
}

impl AgentProfile {
    /// The deployment's own `main`: its prompt, models and `builtins`.
    pub fn deployment(builtins: &ToolRegistry) -> Self {
        Self {
            agent_id: agentlane_core::MAIN_AGENT.to_owned(),
            version: DEPLOYMENT_VERSION,
            instructions: None,
            model: None,
            fallback_models: None,
            thinking: None,
            history_max_turns: None,
            tools: builtins.clone(),
            warnings: Vec::new(),
            client_tools: Default::default(),
            approval: None,
            budget: None,
            prices: Default::default(),
            max_output_tokens: None,
        }
    }

    /// Adds client tools (offered to the model; a call of one pauses the run). A client tool
    /// replaces a tool of the same name (the API refuses such clashes before they get here).
    pub fn with_client_tools(mut self, tools: &[agentlane_core::ClientTool]) -> Self {
        for tool in tools {
            self.client_tools.insert(tool.name.clone());
            self.tools
                .register(Arc::new(ClientToolSlot { tool: tool.clone() }));
        }
        self
    }

    /// How long a pause of this agent's runs waits for its answer.
    pub fn action_timeout(&self) -> Duration {
        Duration::from_secs(
            self.approval
                .as_ref()
                .and_then(|a| a.timeout_seconds)
                .unwrap_or(agentlane_core::action::DEFAULT_ACTION_TIMEOUT_SECONDS),
        )
    }
}

/// A client tool in the registry: its spec is offered to the model; it is never called here
/// (its calls pause the run, and the caller posts their outputs).
struct ClientToolSlot {
    tool: agentlane_core::ClientTool,
}

#[async_trait]
impl Tool for ClientToolSlot {
    fn spec(&self) -> agentlane_providers::ToolSpec {
        agentlane_providers::ToolSpec {
            name: self.tool.name.clone(),
            description: self.tool.description.clone().unwrap_or_default(),
            parameters: self.tool.schema(),
        }
    }

    async fn call(
        &self,
        _arguments: &str,
        _ctx: agentlane_tools::ToolContext,
    ) -> Result<agentlane_tools::ToolOutput, agentlane_tools::ToolError> {
        Err(agentlane_tools::ToolError::Failed(format!(
            "{} is run by the caller's application, not here",
            self.tool.name
        )))
    }
}

/// Resolves secret references to their values, for one tenant at a time.
#[async_trait]
pub trait SecretSource: Send + Sync + 'static {
    /// The value `reference` names for an agent of `tenant`: its own secret of that name, or
    /// an environment variable the operator granted; `Err` says why not, without any value.
    async fn value(&self, tenant: &TenantId, reference: &SecretRef) -> Result<String, String>;
}

/// The name a resolved value is redacted as: the secret's, or the variable's.
fn shown_as(reference: &SecretRef) -> &str {
    match reference {
        SecretRef::Env(name) | SecretRef::Secret(name) => name,
    }
}

/// What the tools of one profile are being built for: the run's tenant, and the values
/// resolved so far (by the name each is redacted as).
struct Resolving<'a> {
    tenant: &'a TenantId,
    values: Mutex<Vec<(String, String)>>,
}

impl Resolving<'_> {
    fn redactor(&self) -> agentlane_tools::redact::Redactor {
        let values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        agentlane_tools::redact::Redactor::new(values.iter().map(|(n, v)| (n, v)))
    }
}

/// Builds [`AgentProfile`]s for runs. Shared by every worker of a process.
pub struct AgentResolver {
    store: Arc<dyn AgentStore>,
    secrets: Arc<dyn SecretSource>,
    mcp: McpPool,
    ssrf: SsrfPolicy,
    /// OAuth tokens of HTTP tools, shared by every run of this process (keyed by tenant,
    /// client and secret: never shared across tenants).
    tokens: agentlane_tools::oauth::TokenCache,
    versions: Mutex<HashMap<(TenantId, String, u64), Arc<Agent>>>,
}

impl AgentResolver {
    /// Reads versions from `store`, secrets from `secrets`; MCP servers and HTTP tools are
    /// reached only where `ssrf` allows.
    pub fn new(
        store: Arc<dyn AgentStore>,
        secrets: Arc<dyn SecretSource>,
        ssrf: SsrfPolicy,
    ) -> Self {
        let tokens = agentlane_tools::oauth::TokenCache::new(ssrf.clone());
        Self {
            store,
            secrets,
            mcp: McpPool::new(ssrf.clone()),
            tokens,
            ssrf,
            versions: Mutex::new(HashMap::new()),
        }
    }

    /// The same resolver with another MCP pool (tests: a resolver of their own).
    pub fn with_mcp_pool(mut self, pool: McpPool) -> Self {
        self.mcp = pool;
        self
    }

    /// One version, from the cache or the store (`None` when the store has none).
    pub async fn version(
        &self,
        tenant: &TenantId,
        agent_id: &str,
        version: u64,
    ) -> Result<Option<Arc<Agent>>, StoreError> {
        let key = (tenant.clone(), agent_id.to_owned(), version);
        if let Some(hit) = self.cache().get(&key) {
            return Ok(Some(hit.clone()));
        }
        let Some(agent) = self
            .store
            .get_agent_version(tenant, agent_id, version)
            .await?
        else {
            return Ok(None);
        };
        let agent = Arc::new(agent);
        let mut cache = self.cache();
        if cache.len() >= CACHED_VERSIONS {
            cache.clear();
        }
        cache.insert(key, agent.clone());
        Ok(Some(agent))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(TenantId, String, u64), Arc<Agent>>> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What `run` runs with: `Ok(None)` when the version it was accepted with is not stored
    /// (it cannot run).
    pub async fn profile(
        &self,
        run: &Run,
        builtins: &ToolRegistry,
    ) -> Result<Option<AgentProfile>, StoreError> {
        self.profile_within(run, builtins, &SetupBound::default())
            .await
    }

    /// [`Self::profile`], its MCP servers reached within `bound` (in parallel, each within
    /// [`MCP_SETUP_TIMEOUT`]): a server that does not answer in time is a warning.
    pub async fn profile_within(
        &self,
        run: &Run,
        builtins: &ToolRegistry,
        bound: &SetupBound,
    ) -> Result<Option<AgentProfile>, StoreError> {
        let version = run.request.agent_version.unwrap_or(DEPLOYMENT_VERSION);
        if version == DEPLOYMENT_VERSION {
            return Ok(Some(AgentProfile::deployment(builtins)));
        }
        let agent_id = run.request.agent();
        let Some(agent) = self.version(&run.tenant, agent_id, version).await? else {
            return Ok(None);
        };
        let spec = &agent.spec;
        let resolving = Resolving {
            tenant: &run.tenant,
            values: Mutex::new(Vec::new()),
        };
        let mut warnings = Vec::new();
        let mut tools = ToolRegistry::new();
        let allowed = spec.tools.as_ref().and_then(|t| t.builtin.as_ref());
        for spec in builtins.specs().iter() {
            if allowed.is_none_or(|names| names.contains(&spec.name))
                && let Some(tool) = builtins.get(&spec.name)
            {
                tools.register(tool);
            }
        }
        for def in spec.http_tools() {
            match self.http_tool(&resolving, def).await {
                Ok(tool) => tools.register(tool),
                Err(why) => warnings.push(why),
            }
        }
        let servers = spec.mcp_servers();
        for server in servers.iter().skip(MAX_MCP_SERVERS) {
            warnings.push(format!(
                "MCP server {:?}: an agent's runs reach at most {MAX_MCP_SERVERS} MCP servers; \
                 left out",
                server.name
            ));
        }
        let reached = servers
            .iter()
            .take(MAX_MCP_SERVERS)
            .map(|server| self.mcp_tools_within(&resolving, server, bound));
        for listed in futures::future::join_all(reached).await {
            match listed {
                Ok(list) => list.into_iter().for_each(|t| tools.register(t)),
                Err(why) => warnings.push(why),
            }
        }
        // Every tool's answers and errors, and the warnings, without the values resolved.
        let redactor = resolving.redactor();
        let tools = redactor.wrap(tools);
        let warnings: Vec<String> = warnings
            .iter()
            .map(|w| redactor.redact(w).into_owned())
            .collect();
        for warning in &warnings {
            tracing::warn!(run_id = %run.run_id, agent_id, %warning, "agent tools");
        }
        Ok(Some(
            AgentProfile {
                agent_id: agent_id.to_owned(),
                version,
                instructions: spec.instructions.clone(),
                model: spec.model.clone(),
                fallback_models: spec.fallback_models.clone(),
                thinking: spec.thinking.clone(),
                history_max_turns: spec.history_max_turns,
                tools,
                warnings,
                client_tools: Default::default(),
                approval: spec.approval.clone(),
                budget: spec.budget,
                prices: spec.prices.clone().unwrap_or_default(),
                max_output_tokens: spec.max_output_tokens,
            }
            .with_client_tools(spec.client_tools()),
        ))
    }

    /// The headers of a definition, their references resolved; `Err` names the first that
    /// could not be (never a value).
    async fn headers(
        &self,
        ctx: &Resolving<'_>,
        what: &str,
        headers: &std::collections::BTreeMap<String, SecretRef>,
    ) -> Result<Vec<(String, String)>, String> {
        let mut resolved = Vec::with_capacity(headers.len());
        for (name, reference) in headers {
            let value = self
                .secret(ctx, reference)
                .await
                .map_err(|why| format!("{what}: header {name}: {why}; left out"))?;
            resolved.push((name.clone(), value));
        }
        Ok(resolved)
    }

    /// One reference of `ctx`'s tenant, resolved and remembered for redaction.
    async fn secret(&self, ctx: &Resolving<'_>, reference: &SecretRef) -> Result<String, String> {
        let value = self.secrets.value(ctx.tenant, reference).await?;
        ctx.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((shown_as(reference).to_owned(), value.clone()));
        Ok(value)
    }

    /// A definition's `auth`, its client secret resolved for `ctx`'s tenant.
    async fn credentials(
        &self,
        ctx: &Resolving<'_>,
        what: &str,
        auth: Option<&agentlane_core::agent::ToolAuth>,
    ) -> Result<Option<agentlane_tools::oauth::ClientCredentials>, String> {
        let Some(agentlane_core::agent::ToolAuth::Oauth2ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scopes,
        }) = auth
        else {
            return Ok(None);
        };
        let secret = self
            .secret(ctx, client_secret)
            .await
            .map_err(|why| format!("{what}: auth.clientSecret: {why}; left out"))?;
        Ok(Some(agentlane_tools::oauth::ClientCredentials {
            tenant: ctx.tenant.as_str().to_owned(),
            token_url: token_url.clone(),
            client_id: client_id.clone(),
            client_secret: secret,
            scopes: scopes.clone(),
        }))
    }

    async fn http_tool(
        &self,
        ctx: &Resolving<'_>,
        def: &HttpToolDef,
    ) -> Result<Arc<dyn Tool>, String> {
        let what = format!("HTTP tool {:?}", def.name);
        let headers = self.headers(ctx, &what, &def.headers).await?;
        let auth = self.credentials(ctx, &what, def.auth.as_ref()).await?;
        let signing_secret = match &def.signing_secret {
            Some(reference) => Some(
                self.secret(ctx, reference)
                    .await
                    .map_err(|why| format!("{what}: signingSecret: {why}; left out"))?,
            ),
            None => None,
        };
        let config = HttpToolConfig {
            name: def.name.clone(),
            description: def.description.clone(),
            parameters: def.parameters.clone(),
            url: def.url.clone(),
            headers,
            timeout: def
                .timeout_ms
                .map_or(DEFAULT_HTTP_TIMEOUT, Duration::from_millis),
            signing_secret,
            idempotent: def.idempotent,
            auth,
        };
        HttpTool::new(config, self.ssrf.clone())
            .map(|t| Arc::new(t.with_token_cache(self.tokens.clone())) as Arc<dyn Tool>)
            .map_err(|e| format!("{what}: {}: {}; left out", e.field, e.message))
    }

    /// [`Self::mcp_tools`] within `bound` and [`MCP_SETUP_TIMEOUT`]; `Err` says which bound
    /// cut it.
    async fn mcp_tools_within(
        &self,
        ctx: &Resolving<'_>,
        def: &McpServerDef,
        bound: &SetupBound,
    ) -> Result<Vec<Arc<dyn Tool>>, String> {
        let limit = bound.limit();
        tokio::select! {
            biased;
            () = bound.cancel.cancelled() => Err(format!(
                "MCP server {:?}: the run was stopped before it answered; the run goes on \
                 without its tools",
                def.name
            )),
            listed = tokio::time::timeout(limit, self.mcp_tools(ctx, def)) => {
                listed.unwrap_or_else(|_| Err(format!(
                    "MCP server {:?}: no answer within {} ms; the run goes on without its tools",
                    def.name,
                    limit.as_millis()
                )))
            }
        }
    }

    async fn mcp_tools(
        &self,
        ctx: &Resolving<'_>,
        def: &McpServerDef,
    ) -> Result<Vec<Arc<dyn Tool>>, String> {
        let what = format!("MCP server {:?}", def.name);
        let headers = self.headers(ctx, &what, &def.headers).await?;
        let auth = self.credentials(ctx, &what, def.auth.as_ref()).await?;
        let config = McpServerConfig {
            auth,
            name: def.name.clone(),
            url: def.url.clone(),
            headers,
            allowed_tools: def.allowed_tools.clone(),
            timeout: def
                .timeout_ms
                .map_or(DEFAULT_MCP_TIMEOUT, Duration::from_millis),
        };
        self.mcp
            .tools(&config)
            .await
            .map_err(|e| format!("{e}; the run goes on without its tools"))
    }
}
