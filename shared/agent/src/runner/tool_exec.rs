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
    /// The call as the model made it (after normalisation).
    pub call: ToolCall,
    /// The result text sent back to the model (an error message when `is_error`).
    pub content: String,
    /// Whether the call failed (timeout, blocked, unknown tool, tool error).
    pub is_error: bool,
    /// How long the call ran, in milliseconds.
    pub duration_ms: u64,
}

/// How long the runner lets one call of a tool run: the tool's own timeout (an MCP server's or
/// an HTTP tool's from its definition, a built-in's declared one) plus [`BACKSTOP`] (the tool
/// ends its call itself first), else `default`; and never past the run's deadline
/// (`remaining`: the time left before it, when the run has one). At the deadline the run's
/// stop signal cuts the call and ends the run `timeout`; the cap here is its backstop, so it
/// too comes [`BACKSTOP`] later (a cap that fired first would let the loop go on).
pub fn call_timeout(
    own: Option<Duration>,
    default: Duration,
    remaining: Option<Duration>,
) -> Duration {
    let timeout = own.map_or(default, |own| own + BACKSTOP);
    remaining.map_or(timeout, |left| timeout.min(left + BACKSTOP))
}

/// How long after a tool's own timeout, or the run's deadline, the runner cuts a call itself.
pub const BACKSTOP: Duration = Duration::from_secs(1);

/// Runs `calls` concurrently, each for at most its [`call_timeout`]. A stopped run cancels the
/// calls still going; they come back as error results saying so, so every call still gets
/// exactly one result.
pub async fn run_batch(
    tools: &ToolRegistry,
    calls: &[ToolCall],
    (default, remaining): (Duration, Option<Duration>),
    stop: &CancellationToken,
    run_id: &str,
) -> Vec<ToolRun> {
    join_all(calls.iter().map(|call| async move {
        let started = Instant::now();
        let outcome = match tools.get(&call.name) {
            None => Err(ToolError::Failed(format!("unknown tool {:?}", call.name))),
            Some(tool) => {
                let ctx = ToolContext::new(stop.child_token(), run_id, call.id.as_str());
                let timeout = call_timeout(tool.timeout(), default, remaining);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_timeout_is_the_tools_own_else_the_default_never_past_the_deadline() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let rows = [
            ("no timeout of its own: the default", None, None, s(60)),
            ("its own, plus the backstop second", Some(s(1)), None, s(2)),
            (
                "its own may be longer than the default",
                Some(s(300)),
                None,
                s(301),
            ),
            (
                "the deadline (plus the backstop) cuts the default",
                None,
                Some(ms(1500)),
                ms(2500),
            ),
            ("the deadline cuts its own", Some(s(30)), Some(s(5)), s(6)),
            (
                "a far deadline changes nothing",
                Some(s(1)),
                Some(s(3600)),
                s(2),
            ),
            (
                "a passed deadline: only the backstop",
                None,
                Some(Duration::ZERO),
                s(1),
            ),
        ];
        for (case, own, remaining, want) in rows {
            assert_eq!(call_timeout(own, s(60), remaining), want, "{case}");
        }
    }
}
