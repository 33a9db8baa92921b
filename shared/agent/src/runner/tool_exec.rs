//! Runs one batch of tool calls: concurrently, each with a timeout and the run's stop signal;
//! results come back in call order.

use agentlane_core::ToolCall;
use agentlane_tools::{ToolContext, ToolError, ToolRegistry};
use futures::future::join_all;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The outcome of one call.
#[derive(Debug, Clone)]
pub struct ToolRun {
    pub call: ToolCall,
    pub content: String,
    pub is_error: bool,
    pub duration_ms: u64,
}

/// Runs `calls` concurrently. A stopped run cancels the calls still going; they come back as
/// error results saying so, so every call still gets exactly one result.
pub async fn run_batch(
    tools: &ToolRegistry,
    calls: &[ToolCall],
    timeout: Duration,
    stop: &CancellationToken,
    run_id: &str,
) -> Vec<ToolRun> {
    join_all(calls.iter().map(|call| async move {
        let started = Instant::now();
        let outcome = match tools.get(&call.name) {
            None => Err(ToolError::Failed(format!("unknown tool {:?}", call.name))),
            Some(tool) => {
                let ctx = ToolContext::new(stop.child_token(), run_id, call.id.as_str());
                // A tool with its own timeout (an MCP server's, an HTTP tool's) ends its call
                // itself; the runner's cut comes a second later, as a backstop.
                let timeout = tool
                    .timeout()
                    .map_or(timeout, |own| own + Duration::from_secs(1));
                tokio::select! {
                    _ = stop.cancelled() => Err(ToolError::Cancelled),
                    r = tokio::time::timeout(timeout, tool.call(&call.arguments, ctx)) => match r {
                        Ok(r) => r,
                        Err(_) => Err(ToolError::Timeout(timeout.as_millis() as u64)),
                    },
                }
            }
        };
        let (content, is_error) = match outcome {
            Ok(out) => (out.content, false),
            Err(ToolError::Cancelled) => (crate::context::repair::ABORTED_RESULT.to_owned(), true),
            Err(e) => (format!("error: {e}"), true),
        };
        ToolRun {
            call: call.clone(),
            content,
            is_error,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }))
    .await
}
