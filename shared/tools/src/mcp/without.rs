//! [`McpPool`] in a build without the `mcp` feature: same constructor and `tools`, which
//! answers that this binary cannot reach MCP servers (the run goes on without their tools).

use super::{McpError, McpServerConfig};
use crate::Tool;
use crate::ssrf::SsrfPolicy;
use std::sync::Arc;

/// Stands in for the MCP client in binaries built without it (the ingress and cron functions,
/// which never run a turn).
#[derive(Debug, Clone, Default)]
pub struct McpPool;

impl McpPool {
    /// A pool that never connects (`ssrf` is unused: there is no client).
    pub fn new(_ssrf: SsrfPolicy) -> Self {
        Self
    }

    /// Always [`McpError::Unavailable`]: this binary was built without the `mcp` feature.
    pub async fn tools(&self, server: &McpServerConfig) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        Err(McpError::Unavailable {
            server: server.name.clone(),
            message: "this binary was built without MCP support (cargo feature `mcp`)".into(),
        })
    }
}
