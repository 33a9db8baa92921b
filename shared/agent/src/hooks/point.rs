//! The hook points of SPEC §11 and how each one is dispatched.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A place in the run where hooks are called. The wire name (`as_str`, serde) is snake_case,
/// e.g. `before_tool_call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookPoint {
    /// Before the run's model is chosen; a hook may answer with a [`ModelOverride`](super::ModelOverride).
    BeforeModelResolve,
    /// Before the system and user prompts are assembled; modifying (hooks add context).
    BeforePromptBuild,
    /// Before the model is called for a turn; claiming (a hook may answer the turn itself).
    BeforeAgentReply,
    /// Before the run starts; policy (a failing hook blocks the run).
    BeforeAgentRun,
    /// When the run has a final answer; modifying (a hook may ask for a revision).
    BeforeAgentFinalize,
    /// After the run reached a terminal status; observer.
    AgentEnd,
    /// Before the history is compacted; observer.
    BeforeCompaction,
    /// After a compaction attempt, whether or not it compacted; observer.
    AfterCompaction,
    /// Before a tool call runs; policy (a failing hook blocks the call).
    BeforeToolCall,
    /// After a tool call finished; observer.
    AfterToolCall,
    /// Before a tool result is written to the transcript; modifying (a hook may rewrite it).
    ToolResultPersist,
    /// When a user message reaches the run; observer.
    MessageReceived,
    /// Before a reply is delivered; modifying (a hook may rewrite or cancel it).
    MessageSending,
    /// After a reply was delivered; observer.
    MessageSent,
    /// When a session starts (new or after a reset); observer.
    SessionStart,
    /// When a session ends; observer.
    SessionEnd,
}

/// How the handlers of one point are run and what a failing handler means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Sequential by priority; an error, timeout or unreadable answer blocks (fail closed).
    Policy,
    /// Sequential by priority; results merge; a failing handler is logged and skipped.
    Modifying,
    /// Sequential by priority; the first handler that claims wins; failures are skipped.
    Claiming,
    /// Concurrent; failures are logged and ignored (fail open).
    Observer,
}

impl HookPoint {
    /// Every point, in SPEC §11 order.
    pub const ALL: [HookPoint; 16] = [
        HookPoint::BeforeModelResolve,
        HookPoint::BeforePromptBuild,
        HookPoint::BeforeAgentReply,
        HookPoint::BeforeAgentRun,
        HookPoint::BeforeAgentFinalize,
        HookPoint::AgentEnd,
        HookPoint::BeforeCompaction,
        HookPoint::AfterCompaction,
        HookPoint::BeforeToolCall,
        HookPoint::AfterToolCall,
        HookPoint::ToolResultPersist,
        HookPoint::MessageReceived,
        HookPoint::MessageSending,
        HookPoint::MessageSent,
        HookPoint::SessionStart,
        HookPoint::SessionEnd,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPoint::BeforeModelResolve => "before_model_resolve",
            HookPoint::BeforePromptBuild => "before_prompt_build",
            HookPoint::BeforeAgentReply => "before_agent_reply",
            HookPoint::BeforeAgentRun => "before_agent_run",
            HookPoint::BeforeAgentFinalize => "before_agent_finalize",
            HookPoint::AgentEnd => "agent_end",
            HookPoint::BeforeCompaction => "before_compaction",
            HookPoint::AfterCompaction => "after_compaction",
            HookPoint::BeforeToolCall => "before_tool_call",
            HookPoint::AfterToolCall => "after_tool_call",
            HookPoint::ToolResultPersist => "tool_result_persist",
            HookPoint::MessageReceived => "message_received",
            HookPoint::MessageSending => "message_sending",
            HookPoint::MessageSent => "message_sent",
            HookPoint::SessionStart => "session_start",
            HookPoint::SessionEnd => "session_end",
        }
    }

    /// How this point's handlers run.
    pub fn dispatch(self) -> Dispatch {
        match self {
            HookPoint::BeforeToolCall | HookPoint::BeforeAgentRun => Dispatch::Policy,
            HookPoint::BeforePromptBuild
            | HookPoint::BeforeAgentFinalize
            | HookPoint::ToolResultPersist
            | HookPoint::MessageSending => Dispatch::Modifying,
            HookPoint::BeforeAgentReply => Dispatch::Claiming,
            HookPoint::BeforeModelResolve
            | HookPoint::AgentEnd
            | HookPoint::BeforeCompaction
            | HookPoint::AfterCompaction
            | HookPoint::AfterToolCall
            | HookPoint::MessageReceived
            | HookPoint::MessageSent
            | HookPoint::SessionStart
            | HookPoint::SessionEnd => Dispatch::Observer,
        }
    }

    /// Whether a failing handler blocks (fails closed).
    pub fn is_policy(self) -> bool {
        self.dispatch() == Dispatch::Policy
    }

    /// Position in [`HookPoint::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a hook point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown hook point {0:?}")]
pub struct UnknownHookPoint(pub String);

impl FromStr for HookPoint {
    type Err = UnknownHookPoint;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HookPoint::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownHookPoint(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names_round_trip_through_str_and_serde() {
        for (i, p) in HookPoint::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
            assert_eq!(p.as_str().parse::<HookPoint>().unwrap(), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<HookPoint>(&json).unwrap(), p);
        }
        assert!("before_everything".parse::<HookPoint>().is_err());
    }

    #[test]
    fn only_tool_call_and_agent_run_fail_closed() {
        let policy: Vec<HookPoint> = HookPoint::ALL
            .into_iter()
            .filter(|p| p.is_policy())
            .collect();
        assert_eq!(
            policy,
            vec![HookPoint::BeforeAgentRun, HookPoint::BeforeToolCall]
        );
    }
}
