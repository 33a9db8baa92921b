//! MCP servers as tool sources: an agent's `mcpServers` become agentlane [`Tool`](crate::Tool)s
//! named `<server>__<tool>`, called over Streamable HTTP with the official Rust SDK (`rmcp`).
//!
//! - [`config`]: [`McpServerConfig`] and the name rules.
//! - [`pool`]: [`McpPool`], the process-wide sessions and the `tools/list` cache.
//! - [`tool`]: [`McpTool`], one MCP tool behind the [`Tool`](crate::Tool) seam (`tools/call`
//!   under the run's cancel token and the server's timeout).
//! - `convert`: an MCP tool result as the text the model sees (text kept, `structuredContent`
//!   as JSON text, images/audio/binary resources as a short note, `isError` as a failure).
//!
//! Only tools are used: prompts, resources, sampling, elicitation and roots are not offered to
//! the server (the client declares no capabilities).
//!
//! Header values are secrets: they never appear in errors, `Debug` output or logs (errors are
//! scrubbed of them, and they are marked sensitive for the HTTP stack).

pub mod config;
#[cfg(feature = "mcp")]
mod connect;
#[cfg(feature = "mcp")]
mod convert;
#[cfg(feature = "mcp")]
pub mod pool;
#[cfg(feature = "mcp")]
pub mod tool;
#[cfg(not(feature = "mcp"))]
mod without;

pub use config::{McpServerConfig, check_server_name};
#[cfg(feature = "mcp")]
pub use pool::McpPool;
#[cfg(feature = "mcp")]
pub use tool::McpTool;
#[cfg(not(feature = "mcp"))]
pub use without::McpPool;

use crate::ToolError;

/// Why a server's tools could not be listed (or a session opened). Never carries header values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The server entry itself is wrong (name, url, header, timeout).
    #[error("invalid MCP server config: {0}")]
    InvalidConfig(String),
    /// The SSRF guard refused the server's address.
    #[error("MCP server {server:?} refused: {reason}")]
    Blocked {
        /// The server's name.
        server: String,
        /// Which address and why.
        reason: String,
    },
    /// It could not be reached, or answered with an error or something that is not MCP.
    #[error("MCP server {server:?} unavailable: {message}")]
    Unavailable {
        /// The server's name.
        server: String,
        /// What failed.
        message: String,
    },
    /// It did not answer within its timeout.
    #[error("MCP server {server:?} did not answer within {ms} ms")]
    Timeout {
        /// The server's name.
        server: String,
        /// The limit.
        ms: u64,
    },
}

impl From<McpError> for ToolError {
    fn from(err: McpError) -> Self {
        match err {
            McpError::Blocked { .. } => ToolError::Blocked(err.to_string()),
            McpError::Timeout { ms, .. } => ToolError::Timeout(ms),
            other => ToolError::Failed(other.to_string()),
        }
    }
}
