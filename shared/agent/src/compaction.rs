//! Compaction: a model call that summarizes the history before the current run into one
//! transcript entry, so the run can go on within the model's context window.

use crate::failover::CompactionTrigger;
use crate::models::{Profile, ResolvedModel};
use crate::tokens::estimate_parts;
use crate::writer::RunWriter;
use agentlane_core::{EventStream, Message, StoreError};
use agentlane_providers::{ModelRequest, StreamAccumulator};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The instructions of the summarizing call.
pub const COMPACTION_PROMPT: &str = "You compact conversations. Summarize the conversation you are \
given so that an assistant can continue it without the original: keep the user's goals, \
decisions, facts, names, numbers, open questions and the results of tool calls. Write plain \
prose, at most a few paragraphs. Do not address the user.";

/// Each message's text is cut to this many characters in the summarizer's input.
const MAX_CHARS_PER_MESSAGE: usize = 4000;

/// What to compact: the history before the current run.
pub struct Plan<'a> {
    pub model: &'a ResolvedModel,
    pub profile: &'a Profile,
    pub idle: Duration,
    pub trigger: CompactionTrigger,
    /// Index in `history` of the current run's first message.
    pub run_start: usize,
    /// Seq of the last transcript entry before the current run.
    pub through_seq: u64,
}

/// Renders messages as plain text for the summarizer.
fn render(messages: &[Message]) -> String {
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
        let line = match m {
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

/// Summarizes `history[..plan.run_start]` with one model call and replaces it, in `history` and
/// in the transcript, by a compaction entry. `Ok(Err(why))` when there was nothing to compact or
/// the call failed; the history is then unchanged.
pub async fn compact(
    writer: &mut RunWriter,
    history: &mut Vec<Message>,
    system: &str,
    plan: Plan<'_>,
    stop: &CancellationToken,
) -> Result<Result<usize, String>, StoreError> {
    let prefix = &history[..plan.run_start.min(history.len())];
    let has_new_material = prefix
        .iter()
        .any(|m| !matches!(m, Message::Compaction { .. }));
    if !has_new_material {
        return Ok(Err(
            "nothing before the current run is left to compact".into()
        ));
    }
    let tokens_before = estimate_parts(system, history, &[]);
    writer.event(
        EventStream::Compaction,
        json!({ "phase": "start", "trigger": plan.trigger, "tokensBefore": tokens_before }),
    );
    writer.flush_events().await?;
    let request = ModelRequest {
        model: plan.model.model.clone(),
        system: COMPACTION_PROMPT.to_owned(),
        messages: vec![Message::user(render(prefix))],
        tools: Vec::new(),
        max_output_tokens: Some(2048),
    };
    let summary = match summarize(plan.profile, request, plan.idle, stop).await {
        Ok(s) if !s.trim().is_empty() => s,
        Ok(_) => return Ok(Err("the summary came back empty".into())),
        Err(e) => {
            writer.event(
                EventStream::Compaction,
                json!({ "phase": "end", "completed": false, "error": e }),
            );
            writer.flush_events().await?;
            return Ok(Err(e));
        }
    };
    let mut compacted = vec![Message::Compaction {
        summary: summary.trim().to_owned(),
        through_seq: plan.through_seq,
        tokens_before,
        tokens_after: 0,
    }];
    compacted.extend(history[plan.run_start..].iter().cloned());
    let tokens_after = estimate_parts(system, &compacted, &[]);
    if let Some(Message::Compaction {
        tokens_after: t, ..
    }) = compacted.first_mut()
    {
        *t = tokens_after;
    }
    writer.event(
        EventStream::Compaction,
        json!({
            "phase": "end",
            "completed": true,
            "trigger": plan.trigger,
            "tokensBefore": tokens_before,
            "tokensAfter": tokens_after,
        }),
    );
    writer
        .commit(vec![compacted[0].clone()], false, None, false)
        .await?;
    *history = compacted;
    Ok(Ok(1))
}

/// One non-tool model call, its text collected (no events: the summary is not a reply).
async fn summarize(
    profile: &Profile,
    request: ModelRequest,
    idle: Duration,
    stop: &CancellationToken,
) -> Result<String, String> {
    let call = stop.child_token();
    let _cancel = call.clone().drop_guard();
    let mut stream = tokio::time::timeout(idle, profile.provider.stream(request, call.clone()))
        .await
        .map_err(|_| "the compaction call timed out".to_owned())?
        .map_err(|e| e.message)?;
    let mut acc = StreamAccumulator::new();
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err("the compaction call went idle".into()),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(e.message),
            Ok(Some(Ok(event))) => acc.push(&event),
        }
    }
    let turn = acc.finish();
    if turn.finish.is_none() {
        return Err("the compaction stream ended early".into());
    }
    Ok(turn.text)
}
