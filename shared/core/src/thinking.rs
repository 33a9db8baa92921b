//! The `thinking` level of a turn (how hard the model reasons before it answers) and which
//! models have a reasoning mode to map it to. Providers translate a level into their own knob
//! (OpenAI `reasoning_effort`, Anthropic extended-thinking `budget_tokens`); the API refuses a
//! level for a model known to have none, so a level is never silently ignored.

use serde::{Deserialize, Serialize};

/// A `thinking` level, as `POST /v1/agent` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum ThinkingLevel {
    /// No reasoning: nothing is sent to the provider (accepted for every model).
    Off,
    /// The least reasoning: OpenAI `reasoning_effort: minimal`, Anthropic 1024 thinking tokens.
    Minimal,
    /// OpenAI `low`, Anthropic 4096 thinking tokens.
    Low,
    /// OpenAI `medium`, Anthropic 10 000 thinking tokens.
    Medium,
    /// The most reasoning: OpenAI `high`, Anthropic 32 000 thinking tokens.
    High,
}

impl ThinkingLevel {
    /// Every level, in increasing effort.
    pub const ALL: [ThinkingLevel; 5] = [
        ThinkingLevel::Off,
        ThinkingLevel::Minimal,
        ThinkingLevel::Low,
        ThinkingLevel::Medium,
        ThinkingLevel::High,
    ];

    /// The level's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Minimal => "minimal",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
        }
    }

    /// The level named `value`, if any.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.as_str() == value)
    }
}

/// Whether a model has a reasoning mode a [`ThinkingLevel`] maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingSupport {
    /// A reasoning model (OpenAI o-series and GPT-5, Claude 3.7 and 4.x).
    Supported,
    /// Known to have none (the demo model, GPT-4o/4.1/3.5, Claude 3 and 3.5): any level but
    /// `off` is refused.
    Unsupported,
    /// A model this table does not know (an OpenAI-compatible server's own model): the level
    /// is sent and the server decides.
    Unknown,
}

/// Whether `model` (`provider/name`) supports a thinking level. Decided by the model name
/// (so an OpenAI-compatible provider under another name is judged by its model), except for
/// the offline demo provider, which has none.
pub fn thinking_support(model: &str) -> ThinkingSupport {
    let (provider, name) = model.split_once('/').unwrap_or(("", model));
    if provider == "demo" {
        return ThinkingSupport::Unsupported;
    }
    let name = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    if starts(&["o1", "o3", "o4", "gpt-5"]) && !name.starts_with("gpt-5-chat") {
        return ThinkingSupport::Supported;
    }
    if starts(&["gpt-4", "gpt-3.5", "gpt-5-chat", "chatgpt-"]) {
        return ThinkingSupport::Unsupported;
    }
    if starts(&[
        "claude-3-7",
        "claude-sonnet-4",
        "claude-opus-4",
        "claude-haiku-4",
        "claude-4",
    ]) {
        return ThinkingSupport::Supported;
    }
    if starts(&["claude-"]) {
        return ThinkingSupport::Unsupported;
    }
    ThinkingSupport::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_through_their_names() {
        for level in ThinkingLevel::ALL {
            assert_eq!(ThinkingLevel::parse(level.as_str()), Some(level));
            let json = serde_json::to_value(level).unwrap();
            assert_eq!(json, serde_json::json!(level.as_str()));
        }
        assert_eq!(ThinkingLevel::parse("extreme"), None);
    }

    #[test]
    fn reasoning_models_are_told_from_the_others() {
        use ThinkingSupport::*;
        let cases = [
            ("openai/o3-mini", Supported),
            ("openai/gpt-5", Supported),
            ("openai/gpt-4o-mini", Unsupported),
            ("openai/gpt-4.1", Unsupported),
            ("anthropic/claude-sonnet-4-5", Supported),
            ("anthropic/claude-3-7-sonnet-latest", Supported),
            ("anthropic/claude-3-5-haiku-latest", Unsupported),
            ("demo/agentlane-demo", Unsupported),
            ("local/llama3.2", Unknown),
            ("openrouter/anthropic/claude-opus-4", Supported),
        ];
        for (model, want) in cases {
            assert_eq!(thinking_support(model), want, "{model}");
        }
    }
}
