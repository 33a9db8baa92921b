//! [`McpTool`]: one MCP server tool behind the [`Tool`] seam.

use super::config::McpServerConfig;
use super::convert::convert;
use super::pool::Server;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::ServiceError;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An MCP tool as the model sees it (`<server>__<tool>`, the server's description and input
/// schema). A call is one `tools/call` on the server's shared session, bounded by the run's
/// cancel token and the server's timeout; when either ends it first, the request is abandoned
/// and the server is sent `notifications/cancelled`.
pub struct McpTool {
    server: Arc<Server>,
    server_name: String,
    timeout: Duration,
    /// The name on the server.
    tool: String,
    spec: ToolSpec,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.server_name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl McpTool {
    pub(crate) fn new(
        server: Arc<Server>,
        config: &McpServerConfig,
        name: String,
        tool: &rmcp::model::Tool,
    ) -> Self {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        Self {
            server,
            server_name: config.name.clone(),
            timeout: config.timeout,
            tool: tool.name.to_string(),
            spec: ToolSpec {
                name,
                description,
                parameters: serde_json::Value::Object((*tool.input_schema).clone()),
            },
        }
    }

    /// The tool's name on its server (without the `<server>__` prefix).
    pub fn mcp_name(&self) -> &str {
        &self.tool
    }

    /// The name of the server it comes from.
    pub fn server_name(&self) -> &str {
        &self.server_name
    }

    async fn call_once(&self, arguments: JsonObject) -> Result<ToolOutput, ToolError> {
        let peer = self.server.peer(&self.server_name, self.timeout).await?;
        let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        // Dropping this future before the answer (cancel, timeout) makes rmcp send
        // `notifications/cancelled` for the request.
        match peer.call_tool(params).await {
            Ok(result) => convert(&result, |text| self.server.redact(text)),
            Err(ServiceError::Timeout { timeout }) => Err(ToolError::Timeout(millis(timeout))),
            Err(err) => {
                self.server.forget_if_closed().await;
                Err(ToolError::Failed(format!(
                    "MCP server {:?}: tools/call {} failed: {}",
                    self.server_name,
                    self.tool,
                    self.server.describe(&err)
                )))
            }
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    /// The server's timeout bounds the whole call, connecting included.
    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    async fn call(&self, arguments: &str, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let arguments: JsonObject = if arguments.trim().is_empty() {
            JsonObject::new()
        } else {
            serde_json::from_str(arguments)
                .map_err(|e| ToolError::InvalidArguments(format!("expected a JSON object: {e}")))?
        };
        let started = Instant::now();
        let result = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            done = tokio::time::timeout(self.timeout, self.call_once(arguments)) => match done {
                Ok(result) => result,
                Err(_) => Err(ToolError::Timeout(millis(self.timeout))),
            },
        };
        tracing::debug!(
            tool = %self.spec.name,
            run_id = %ctx.run_id,
            ok = result.is_ok(),
            elapsed_ms = millis(started.elapsed()),
            "MCP tool called"
        );
        result
    }
}
