//! The agent a run runs: its definition at the version the run was accepted with, turned into
//! what a pickup needs ([`AgentProfile`]: the system prompt's base, model defaults, the tool
//! registry with its MCP and HTTP tools).
//!
//! Versions are immutable, so [`AgentResolver`] caches them per process by `(tenant, agentId,
//! version)`: a warm runner reads a version once. Secret references are resolved by a
//! [`SecretSource`] (the environment for `serve`, Secrets Manager in the deployed functions);
//! values live only in the tools built from them, never in the run, its events or logs.

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
    /// Prices over the deployment's, by `provider/model`.
    pub prices: std::collections::BTreeMap<String, agentlane_core::spend::Price>,
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

/// Resolves secret references to their values.
#[async_trait]
pub trait SecretSource: Send + Sync + 'static {
    /// The value `reference` names; `Err` says why not, without any value.
    async fn value(&self, reference: &SecretRef) -> Result<String, String>;
}

/// Environment variables only (`serve`): a `{"secret": …}` reference is refused.
#[derive(Debug, Clone, Default)]
pub struct EnvSecrets;

#[async_trait]
impl SecretSource for EnvSecrets {
    async fn value(&self, reference: &SecretRef) -> Result<String, String> {
        match reference {
            SecretRef::Env(name) => {
                std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))
            }
            SecretRef::Secret(name) => Err(format!(
                "secret {name:?}: this process reads no Secrets Manager secrets (use {{\"env\": …}} with serve)"
            )),
        }
    }
}

/// Builds [`AgentProfile`]s for runs. Shared by every worker of a process.
pub struct AgentResolver {
    store: Arc<dyn AgentStore>,
    secrets: Arc<dyn SecretSource>,
    mcp: McpPool,
    ssrf: SsrfPolicy,
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
        Self {
            store,
            secrets,
            mcp: McpPool::new(ssrf.clone()),
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
        let version = run.request.agent_version.unwrap_or(DEPLOYMENT_VERSION);
        if version == DEPLOYMENT_VERSION {
            return Ok(Some(AgentProfile::deployment(builtins)));
        }
        let agent_id = run.request.agent();
        let Some(agent) = self.version(&run.tenant, agent_id, version).await? else {
            return Ok(None);
        };
        let spec = &agent.spec;
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
            match self.http_tool(def).await {
                Ok(tool) => tools.register(tool),
                Err(why) => warnings.push(why),
            }
        }
        for server in spec.mcp_servers() {
            match self.mcp_tools(server).await {
                Ok(list) => list.into_iter().for_each(|t| tools.register(t)),
                Err(why) => warnings.push(why),
            }
        }
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
            }
            .with_client_tools(spec.client_tools()),
        ))
    }

    /// The headers of a definition, their references resolved; `Err` names the first that
    /// could not be (never a value).
    async fn headers(
        &self,
        what: &str,
        headers: &std::collections::BTreeMap<String, SecretRef>,
    ) -> Result<Vec<(String, String)>, String> {
        let mut resolved = Vec::with_capacity(headers.len());
        for (name, reference) in headers {
            let value = self
                .secrets
                .value(reference)
                .await
                .map_err(|why| format!("{what}: header {name}: {why}; left out"))?;
            resolved.push((name.clone(), value));
        }
        Ok(resolved)
    }

    async fn http_tool(&self, def: &HttpToolDef) -> Result<Arc<dyn Tool>, String> {
        let what = format!("HTTP tool {:?}", def.name);
        let headers = self.headers(&what, &def.headers).await?;
        let signing_secret = match &def.signing_secret {
            Some(reference) => Some(
                self.secrets
                    .value(reference)
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
        };
        HttpTool::new(config, self.ssrf.clone())
            .map(|t| Arc::new(t) as Arc<dyn Tool>)
            .map_err(|e| format!("{what}: {}: {}; left out", e.field, e.message))
    }

    async fn mcp_tools(&self, def: &McpServerDef) -> Result<Vec<Arc<dyn Tool>>, String> {
        let what = format!("MCP server {:?}", def.name);
        let headers = self.headers(&what, &def.headers).await?;
        let config = McpServerConfig {
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
