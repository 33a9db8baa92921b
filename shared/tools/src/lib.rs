//! Tools the model can call, behind one seam, [`Tool`], and a [`ToolRegistry`] the runner
//! resolves calls against. Built-ins: [`current_time::CurrentTime`] and
//! [`http_fetch::HttpFetch`] (with an SSRF guard, [`ssrf`]). An agent's own tools:
//! [`http_tool::HttpTool`], a POST of the call's arguments to the agent's endpoint, and MCP
//! servers' tools from [`mcp::McpPool`].
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod current_time;
pub mod http_fetch;
pub mod http_tool;
pub mod mcp;
pub mod net;
pub mod oauth;
pub mod redact;
pub mod registry;
pub mod ssrf;
#[cfg(feature = "testing")]
pub mod testing;

pub use registry::ToolRegistry;

use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// What a tool gets besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Cancelled when the run is aborted or times out; long tools should watch it.
    pub cancel: CancellationToken,
    /// The run making the call.
    pub run_id: String,
    /// The model's id for this call (the `id` of its tool call), unique within the run: what
    /// an HTTP tool sends as `X-Agentlane-Tool-Call`, a receiver's idempotency key.
    pub tool_call_id: String,
}

impl ToolContext {
    /// A context for call `tool_call_id` of run `run_id`, cancelled by `cancel`.
    pub fn new(
        cancel: CancellationToken,
        run_id: impl Into<String>,
        tool_call_id: impl Into<String>,
    ) -> Self {
        Self {
            cancel,
            run_id: run_id.into(),
            tool_call_id: tool_call_id.into(),
        }
    }
}

/// A tool's successful answer: the text the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The result text sent back to the model.
    pub content: String,
}

/// A tool failure. The runner records it as an `isError` result the model sees; messages must
/// not carry secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments are not valid JSON or do not match the tool's schema.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// A policy refused the call (e.g. a blocked address for an HTTP tool).
    #[error("blocked: {0}")]
    Blocked(String),
    /// The call ran longer than its timeout, in ms.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// The run was stopped while the call ran.
    #[error("cancelled")]
    Cancelled,
    /// Any other failure, said for the model.
    #[error("{0}")]
    Failed(String),
}

/// A tool the model may call: its spec is offered, its calls run through `call`.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name, description and JSON-schema parameters offered to the model.
    fn spec(&self) -> ToolSpec;

    /// `arguments` is the raw JSON text from the model.
    async fn call(&self, arguments: &str, ctx: ToolContext) -> Result<ToolOutput, ToolError>;

    /// Whether a batch that calls this tool runs its calls one at a time, with a steering
    /// checkpoint before each launch (OpenClaw's `executionMode: "sequential"`); by default
    /// a batch's calls run concurrently.
    fn sequential(&self) -> bool {
        false
    }

    /// The tool's own per-call timeout: the built-ins declare theirs, an MCP server's and an
    /// HTTP tool's come from their definition (`timeoutMs`). The runner waits that long (plus a
    /// second as a backstop) instead of its default tool timeout (60 s), and never past the
    /// run's deadline. `None`: the default applies.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }
}
