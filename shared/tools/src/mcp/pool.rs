//! [`McpPool`]: one MCP session per server (url + headers) for the whole process, and its
//! `tools/list` answer cached for a while.

use super::McpError;
use super::config::{McpServerConfig, prefixed_name};
use super::connect::{Connector, Session};
use super::tool::McpTool;
use crate::Tool;
use crate::http_fetch::{Resolve, SystemResolver};
use crate::oauth::{ClientCredentials, TokenCache};
use crate::ssrf::SsrfPolicy;
use rmcp::RoleClient;
use rmcp::service::{Peer, ServiceError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server's `tools/list` answer is reused.
pub const TOOLS_TTL: Duration = Duration::from_secs(60);
/// A server not used for this long loses its session (and cache) at the next `tools()` call.
pub const IDLE_EVICTION: Duration = Duration::from_secs(15 * 60);

/// Sessions and lists are shared by everything that names the same url with the same headers
/// and the same OAuth client (tenant included: two tenants never share a session).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    url: String,
    /// Sorted by name.
    headers: Vec<(String, String)>,
    auth: Option<crate::oauth::CacheKey>,
}

impl Key {
    fn of(config: &McpServerConfig) -> Self {
        let mut headers = config.headers.clone();
        headers.sort();
        Self {
            url: config.url.clone(),
            headers,
            auth: config.auth.as_ref().map(ClientCredentials::key),
        }
    }
}

/// A listing and when it was taken.
struct Listed {
    at: Instant,
    tools: Arc<Vec<rmcp::model::Tool>>,
}

/// One server (url + headers): its session and its last listing.
pub(crate) struct Server {
    connector: Connector,
    session: tokio::sync::Mutex<Option<Session>>,
    /// Held while listing, so concurrent callers make one `tools/list`.
    listing: tokio::sync::Mutex<()>,
    listed: Mutex<Option<Listed>>,
    last_used: Mutex<Instant>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Server {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Scrubs header values from `text`.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.connector.redact(text)
    }

    /// The live session's peer, opening a session first if there is none or it has ended.
    pub(crate) async fn peer(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Peer<RoleClient>, McpError> {
        self.touch();
        let mut session = self.session.lock().await;
        if let Some(live) = session.as_ref()
            && !live.is_closed()
            && !live.peer().is_transport_closed()
        {
            return Ok(live.peer().clone());
        }
        if session.take().is_some() {
            tracing::debug!(server = name, "MCP session ended; opening a new one");
        }
        let started = Instant::now();
        let opened = self.connector.connect(name, timeout).await?;
        tracing::debug!(
            server = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            protocol = opened
                .peer()
                .peer_info()
                .map(|info| info.protocol_version.to_string())
                .unwrap_or_default(),
            "MCP session opened"
        );
        let peer = opened.peer().clone();
        *session = Some(opened);
        Ok(peer)
    }

    /// Drops the session if it has ended (the next use opens a new one).
    pub(crate) async fn forget_if_closed(&self) {
        let mut session = self.session.lock().await;
        if session
            .as_ref()
            .is_some_and(|s| s.is_closed() || s.peer().is_transport_closed())
        {
            session.take();
        }
    }

    /// A service error as a message without secrets.
    pub(crate) fn describe(&self, err: &ServiceError) -> String {
        let text = match err {
            ServiceError::McpError(data) => {
                format!("error {}: {}", data.code.0, data.message)
            }
            ServiceError::TransportSend(inner) => {
                format!("transport error: {}", super::connect::chain(inner).0)
            }
            other => super::connect::chain(other).0,
        };
        self.redact(&text)
    }

    /// The server's tools, from the cache when younger than `ttl`.
    async fn tools(
        &self,
        name: &str,
        timeout: Duration,
        ttl: Duration,
    ) -> Result<Arc<Vec<rmcp::model::Tool>>, McpError> {
        let fresh = || {
            lock(&self.listed)
                .as_ref()
                .filter(|listed| listed.at.elapsed() < ttl)
                .map(|listed| listed.tools.clone())
        };
        if let Some(tools) = fresh() {
            self.touch();
            return Ok(tools);
        }
        let _listing = self.listing.lock().await;
        if let Some(tools) = fresh() {
            return Ok(tools);
        }
        let started = Instant::now();
        let list = async {
            // A session that ended since it was last used is opened again, once.
            for attempt in 0..2 {
                let peer = self.peer(name, timeout).await?;
                match peer.list_all_tools().await {
                    Ok(tools) => return Ok(tools),
                    Err(ServiceError::TransportClosed) if attempt == 0 => {
                        self.forget_if_closed().await;
                    }
                    Err(err) => {
                        self.forget_if_closed().await;
                        return Err(McpError::Unavailable {
                            server: name.to_owned(),
                            message: format!("tools/list failed: {}", self.describe(&err)),
                        });
                    }
                }
            }
            Err(McpError::Unavailable {
                server: name.to_owned(),
                message: "tools/list failed: the connection closed".to_owned(),
            })
        };
        let tools =
            tokio::time::timeout(timeout, list)
                .await
                .map_err(|_| McpError::Timeout {
                    server: name.to_owned(),
                    ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })??;
        tracing::debug!(
            server = name,
            tools = tools.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "MCP tools listed"
        );
        let tools = Arc::new(tools);
        *lock(&self.listed) = Some(Listed {
            at: Instant::now(),
            tools: tools.clone(),
        });
        Ok(tools)
    }
}

struct Inner {
    policy: SsrfPolicy,
    resolver: Arc<dyn Resolve>,
    tokens: TokenCache,
    tools_ttl: Duration,
    servers: Mutex<HashMap<Key, Arc<Server>>>,
}

/// MCP servers' tools for every run of the process: clone-cheap (one shared state). Sessions
/// are opened on first use and kept; `tools/list` answers are reused for [`TOOLS_TTL`].
#[derive(Clone)]
pub struct McpPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpPool")
            .field("policy", &self.inner.policy)
            .field("tools_ttl", &self.inner.tools_ttl)
            .field("servers", &lock(&self.inner.servers).len())
            .finish()
    }
}

impl McpPool {
    /// Connects only where `ssrf` allows, resolving names with the system resolver.
    pub fn new(ssrf: SsrfPolicy) -> Self {
        Self::with_resolver(ssrf, Arc::new(SystemResolver))
    }

    /// Resolves host names with `resolver` (tests, custom DNS); every address it answers is
    /// checked against `ssrf` at each connection.
    pub fn with_resolver(ssrf: SsrfPolicy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            inner: Arc::new(Inner {
                tokens: TokenCache::with_resolver(ssrf.clone(), resolver.clone()),
                policy: ssrf,
                resolver,
                tools_ttl: TOOLS_TTL,
                servers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A new pool with this one's policy and resolver (none of its sessions) and another
    /// `tools/list` cache lifetime (tests).
    pub fn with_tools_ttl(self, ttl: Duration) -> Self {
        let inner = Inner {
            policy: self.inner.policy.clone(),
            resolver: self.inner.resolver.clone(),
            tokens: self.inner.tokens.clone(),
            tools_ttl: ttl,
            servers: Mutex::new(HashMap::new()),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// A new pool with this one's policy, resolver and cache lifetime (none of its sessions),
    /// taking OAuth tokens from `tokens`, the process-wide cache (by default a pool has a
    /// cache of its own, with its SSRF policy).
    pub fn with_token_cache(self, tokens: TokenCache) -> Self {
        let inner = Inner {
            policy: self.inner.policy.clone(),
            resolver: self.inner.resolver.clone(),
            tokens,
            tools_ttl: self.inner.tools_ttl,
            servers: Mutex::new(HashMap::new()),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The entry for `config`'s url + headers, created if new; idle entries are dropped.
    fn server(&self, config: &McpServerConfig) -> Arc<Server> {
        let mut servers = lock(&self.inner.servers);
        servers.retain(|_, server| {
            Arc::strong_count(server) > 1 || lock(&server.last_used).elapsed() < IDLE_EVICTION
        });
        servers
            .entry(Key::of(config))
            .or_insert_with(|| {
                Arc::new(Server {
                    connector: Connector {
                        url: config.url.clone(),
                        headers: config.headers.clone(),
                        auth: config
                            .auth
                            .clone()
                            .map(|creds| (creds, self.inner.tokens.clone())),
                        policy: self.inner.policy.clone(),
                        resolver: self.inner.resolver.clone(),
                    },
                    session: tokio::sync::Mutex::new(None),
                    listing: tokio::sync::Mutex::new(()),
                    listed: Mutex::new(None),
                    last_used: Mutex::new(Instant::now()),
                })
            })
            .clone()
    }

    /// The server's tools as agentlane tools named `<server>__<tool>`, with the server's input
    /// schema, filtered by `allowed_tools`. `tools/list` is cached per process for
    /// [`TOOLS_TTL`] (key: url + headers), and the MCP session kept and reused. A tool whose
    /// prefixed name would not fit `^[a-zA-Z0-9_-]{1,64}$` is skipped with a warning.
    pub async fn tools(&self, server: &McpServerConfig) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        server.validate().map_err(McpError::InvalidConfig)?;
        let entry = self.server(server);
        let listed = entry
            .tools(&server.name, server.timeout, self.inner.tools_ttl)
            .await?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for tool in listed.iter() {
            if let Some(allowed) = &server.allowed_tools
                && !allowed.iter().any(|a| a.as_str() == tool.name.as_ref())
            {
                continue;
            }
            let Some(name) = prefixed_name(&server.name, &tool.name) else {
                tracing::warn!(
                    server = %server.name,
                    tool = ?tool.name,
                    "MCP tool skipped: `<server>__<tool>` must match ^[a-zA-Z0-9_-]{{1,64}}$"
                );
                continue;
            };
            tools.push(Arc::new(McpTool::new(entry.clone(), server, name, tool)));
        }
        Ok(tools)
    }
}
