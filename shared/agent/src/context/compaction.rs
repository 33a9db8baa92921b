//! Compaction, the pure part: the summarizing request for the history before the current run,
//! and the history that replaces it (one compaction entry, then the run's own messages). The
//! model call and the writes are the runner's (`runner::compaction`).

use super::tokens::estimate_parts;
use agentlane_core::Message;
use agentlane_providers::ModelRequest;
use std::borrow::Borrow;

/// The instructions of the summarizing call.
pub const COMPACTION_PROMPT: &str = "You compact conversations. Summarize the conversation you are \
given so that an assistant can continue it without the original: keep the user's goals, \
decisions, facts, names, numbers, open questions and the results of tool calls. Write plain \
prose, at most a few paragraphs. Do not address the user.";

/// Each message's text is cut to this many characters in the summarizer's input.
const MAX_CHARS_PER_MESSAGE: usize = 4000;

/// Renders messages as plain text for the summarizer.
fn render<M: Borrow<Message>>(messages: &[M]) -> String {
    let cut = |s: &str| -> String {
        if s.chars().count() > MAX_CHARS_PER_MESSAGE {
            let head: String = s.chars().take(MAX_CHARS_PER_MESSAGE).collect();
            format!("{head} [...]")
        } else {
            s.to_owned()
        }
    };
    let mut out = String::new();
    for m in messages {
        let line = match m.borrow() {
            Message::User { content } => format!("User: {}", cut(content)),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let calls: Vec<String> = tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, cut(&c.arguments)))
                    .collect();
                if calls.is_empty() {
                    format!("Assistant: {}", cut(content))
                } else {
                    format!("Assistant: {} [called: {}]", cut(content), calls.join(", "))
                }
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => format!(
                "Tool {name}{}: {}",
                if *is_error { " (error)" } else { "" },
                cut(content)
            ),
            Message::Compaction { summary, .. } => format!("Earlier summary: {}", cut(summary)),
        };
        out.push_str(&line);
        out.push_str("\n\n");
    }
    out
}

/// Why there is nothing to compact: `history[..run_start]` holds no entry that is not already
/// a summary.
pub fn nothing_to_compact<M: Borrow<Message>>(
    history: &[M],
    run_start: usize,
) -> Option<&'static str> {
    let prefix = &history[..run_start.min(history.len())];
    let has_new_material = prefix
        .iter()
        .any(|m| !matches!(m.borrow(), Message::Compaction { .. }));
    (!has_new_material).then_some("nothing before the current run is left to compact")
}

/// The summarizing call for `history[..run_start]` on `model` (no tools, a short answer).
pub fn summary_request<M: Borrow<Message>>(
    model: &str,
    history: &[M],
    run_start: usize,
) -> ModelRequest {
    ModelRequest {
        model: model.to_owned(),
        system: COMPACTION_PROMPT.to_owned(),
        messages: vec![Message::user(render(&history[..run_start.min(history.len())])).into()],
        tools: Vec::new().into(),
        max_output_tokens: Some(2048),
        thinking: None,
    }
}

/// The history after compaction: the summary entry (covering entries up to `through_seq`),
/// then `history[run_start..]`. The summary records the token estimates before and after.
pub fn compacted_history<M>(
    summary: &str,
    through_seq: u64,
    tokens_before: u64,
    system: &str,
    history: &[M],
    run_start: usize,
) -> Vec<M>
where
    M: Borrow<Message> + From<Message> + Clone,
{
    let summary_entry = |tokens_after| Message::Compaction {
        summary: summary.trim().to_owned(),
        through_seq,
        tokens_before,
        tokens_after,
    };
    let mut compacted = vec![M::from(summary_entry(0))];
    compacted.extend(history[run_start.min(history.len())..].iter().cloned());
    let tokens_after = estimate_parts(system, &compacted, 0);
    compacted[0] = M::from(summary_entry(tokens_after));
    compacted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_replaces_the_history_before_the_run() {
        let history = vec![
            Message::user("old question"),
            Message::user("x".repeat(5_000)),
            Message::user("this run"),
        ];
        assert_eq!(nothing_to_compact(&history, 2), None);
        let request = summary_request("m", &history, 2);
        let Some(Message::User { content }) = request.messages.first().map(|m| m.message()) else {
            panic!("one user message: {request:?}")
        };
        assert!(content.starts_with("User: old question"));
        assert!(content.contains("[...]"), "long messages are cut");
        assert!(!content.contains("this run"));
        let after = compacted_history(" the gist ", 7, 1_000, "sys", &history, 2);
        assert_eq!(after.len(), 2);
        assert!(
            matches!(&after[0], Message::Compaction { summary, through_seq: 7, tokens_before: 1_000, tokens_after }
            if summary == "the gist" && *tokens_after > 0)
        );
        assert_eq!(after[1], Message::user("this run"));
        assert!(
            nothing_to_compact(&after, 1).is_some(),
            "only a summary is left"
        );
    }
}
