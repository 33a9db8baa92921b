//! What an attempt ended with, as recorded in the run's attempt ledger (`AttemptRecord.outcome`
//! keeps the string form, which clients read).

use agentlane_providers::FailoverReason;

/// The outcome of one model attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A final answer (no tool calls).
    Answer,
    /// Tool calls to run: one tool round.
    ToolCalls,
    /// The response finished with no assistant message at all.
    MissingAssistant,
    /// The run was stopped during the attempt (abort, timeout, lock lost, shutdown).
    Stopped,
    /// The model call failed for this reason.
    Failed(FailoverReason),
}

impl AttemptOutcome {
    /// The ledger's string: `ok`, `tool_calls`, `missing_assistant`, `stopped`, or the failover
    /// reason.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Answer => "ok",
            AttemptOutcome::ToolCalls => "tool_calls",
            AttemptOutcome::MissingAssistant => "missing_assistant",
            AttemptOutcome::Stopped => "stopped",
            AttemptOutcome::Failed(reason) => reason.as_str(),
        }
    }

    /// Reads a ledger string back (`None` for a string no outcome writes).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(AttemptOutcome::Answer),
            "tool_calls" => Some(AttemptOutcome::ToolCalls),
            "missing_assistant" => Some(AttemptOutcome::MissingAssistant),
            "stopped" => Some(AttemptOutcome::Stopped),
            other => parse_reason(other).map(AttemptOutcome::Failed),
        }
    }
}

/// Every failover reason, for parsing.
const REASONS: [FailoverReason; 10] = [
    FailoverReason::RateLimit,
    FailoverReason::Overloaded,
    FailoverReason::Auth,
    FailoverReason::Billing,
    FailoverReason::ContextOverflow,
    FailoverReason::Timeout,
    FailoverReason::Server,
    FailoverReason::Format,
    FailoverReason::ModelNotFound,
    FailoverReason::Network,
];

/// The reason whose `as_str` is `s`.
pub fn parse_reason(s: &str) -> Option<FailoverReason> {
    REASONS.into_iter().find(|r| r.as_str() == s)
}

/// Serde for an optional [`FailoverReason`] as its string (`"rate_limit"`), the checkpoint
/// format. An unknown string reads as `None` rather than failing the whole checkpoint.
pub(crate) mod reason_serde {
    use super::parse_reason;
    use agentlane_providers::FailoverReason;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        reason: &Option<FailoverReason>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match reason {
            Some(r) => s.serialize_some(r.as_str()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<FailoverReason>, D::Error> {
        let raw: Option<String> = Option::deserialize(d)?;
        Ok(raw.as_deref().and_then(parse_reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_from_the_ledger() {
        for outcome in [
            AttemptOutcome::Answer,
            AttemptOutcome::ToolCalls,
            AttemptOutcome::MissingAssistant,
            AttemptOutcome::Stopped,
        ]
        .into_iter()
        .chain(REASONS.map(AttemptOutcome::Failed))
        {
            assert_eq!(AttemptOutcome::parse(outcome.as_str()), Some(outcome));
        }
        assert_eq!(AttemptOutcome::parse("bogus"), None);
        assert_eq!(AttemptOutcome::Answer.as_str(), "ok");
    }
}
