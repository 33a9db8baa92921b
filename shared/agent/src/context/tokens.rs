//! A rough token estimate (about four characters a token), enough to judge prompt pressure
//! against a context window.

use agentlane_core::Message;
use agentlane_providers::ModelRequest;
use agentlane_tools::registry::spec_chars;
use std::borrow::Borrow;

/// The characters of a message's texts (its content, reasoning, tool calls).
pub(crate) fn message_chars(m: &Message) -> usize {
    match m {
        Message::User { content } => content.len(),
        Message::Assistant {
            content,
            reasoning,
            tool_calls,
            ..
        } => {
            content.len()
                + reasoning.as_ref().map_or(0, String::len)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + 16)
                    .sum::<usize>()
        }
        Message::Tool { content, name, .. } => content.len() + name.len() + 16,
        Message::Compaction { summary, .. } => summary.len() + 64,
    }
}

/// Estimated prompt tokens of a request: system prompt, messages and tool schemas.
pub fn estimate_tokens(request: &ModelRequest) -> u64 {
    estimate_parts(
        &request.system,
        &request.messages,
        spec_chars(&request.tools),
    )
}

/// The same estimate from borrowed parts (no request needs to be built), with the tool specs
/// as the characters they count ([`spec_chars`]; a registry keeps its own:
/// [`ToolRegistry::spec_chars`](agentlane_tools::ToolRegistry::spec_chars)).
pub fn estimate_parts<M: Borrow<Message>>(system: &str, messages: &[M], tools: usize) -> u64 {
    let chars = system.len()
        + messages
            .iter()
            .map(|m| message_chars(m.borrow()))
            .sum::<usize>()
        + tools
        + 4 * messages.len();
    (chars as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_four_characters_a_token() {
        let r = ModelRequest {
            model: "m".into(),
            system: "x".repeat(400),
            messages: agentlane_providers::history::shared([Message::user("y".repeat(396))]),
            tools: vec![].into(),
            max_output_tokens: None,
            thinking: None,
        };
        assert_eq!(estimate_tokens(&r), 200);
    }
}
