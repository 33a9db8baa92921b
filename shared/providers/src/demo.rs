//! The offline, deterministic `demo` model used when no provider is configured.
//!
//! It echoes the latest user message, and when that message asks for the time or the date and
//! the `current_time` tool is offered, it calls the tool and then reports its result. It streams
//! its answer in small chunks (optionally paced) so clients see deltas as with a real model.

use crate::{FinishReason, ModelProvider, ModelRequest, ModelStream, ProviderError, StreamEvent};
use agentlane_core::{Message, ToolCall, Usage};
use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use std::collections::VecDeque;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The tool the demo model knows how to call.
pub const TIME_TOOL: &str = "current_time";

/// How much of the user's message the echo quotes, in characters.
const ECHO_CHARS: usize = 200;

/// Roughly how many characters each text delta carries.
const CHUNK_CHARS: usize = 16;

/// The built-in offline model (provider name `demo`).
#[derive(Debug, Clone)]
pub struct DemoModel {
    chunk_delay: Duration,
}

impl Default for DemoModel {
    fn default() -> Self {
        Self::new()
    }
}

impl DemoModel {
    /// The provider name.
    pub const NAME: &'static str = "demo";

    /// Paces its chunks 30 ms apart, like a (fast) real model.
    pub fn new() -> Self {
        Self::with_chunk_delay(Duration::from_millis(30))
    }

    /// `Duration::ZERO` streams without pausing (benchmarks, tests).
    pub fn with_chunk_delay(chunk_delay: Duration) -> Self {
        Self { chunk_delay }
    }
}

/// What the demo model answers to a request: pure and deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoReply {
    /// The visible answer.
    pub text: String,
    /// A `current_time` call to make, if any.
    pub tool_call: Option<ToolCall>,
}

/// Decides the demo model's answer.
pub fn reply(request: &ModelRequest) -> DemoReply {
    let last_user = request
        .messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m.message() {
            Message::User { content } => Some((i, content.as_str())),
            _ => None,
        });
    let (question, after) = match last_user {
        Some((i, question)) => (question, &request.messages[i + 1..]),
        None => ("", &request.messages[..0]),
    };

    let tool_result = after.iter().rev().find_map(|m| match m.message() {
        Message::Tool {
            name,
            content,
            is_error,
            ..
        } => Some((name, content, *is_error)),
        _ => None,
    });
    if let Some((name, content, is_error)) = tool_result {
        let text = match (name.as_str(), is_error) {
            (TIME_TOOL, false) => format!("The current time is {}.", content.trim()),
            (TIME_TOOL, true) => format!("I could not read the clock: {}", content.trim()),
            (_, false) => format!("The {name} tool returned: {}", excerpt(content)),
            (_, true) => format!("The {name} tool failed: {}", excerpt(content)),
        };
        return DemoReply {
            text,
            tool_call: None,
        };
    }

    let offered = request.tools.iter().any(|t| t.name == TIME_TOOL);
    if offered && asks_for_time(question) {
        return DemoReply {
            text: "Let me check the clock.".to_owned(),
            tool_call: Some(ToolCall {
                // Deterministic: the same conversation always yields the same id.
                id: format!("call_demo_{}", request.messages.len()),
                name: TIME_TOOL.to_owned(),
                arguments: "{}".to_owned(),
            }),
        };
    }

    DemoReply {
        text: format!(
            "[demo model] You said: {}. I am agentlane's built-in offline demo model; configure \
             OPENAI_API_KEY (or OPENAI_BASE_URL) and AGENTLANE_MODEL for a real one.",
            excerpt(question)
        ),
        tool_call: None,
    }
}

/// Whether the message mentions the word "time" or "date" (any case, whole words).
fn asks_for_time(message: &str) -> bool {
    message
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case("time") || w.eq_ignore_ascii_case("date"))
}

fn excerpt(text: &str) -> String {
    let text = text.trim();
    let mut cut: String = text.chars().take(ECHO_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// About four characters per token, rounded up.
fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

fn prompt_chars(request: &ModelRequest) -> usize {
    let messages: usize = request.messages.iter().map(|m| m.text_chars()).sum();
    request.system.chars().count() + messages
}

/// Splits text into deltas of about [`CHUNK_CHARS`] characters, cut after whitespace.
fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if c.is_whitespace() && current.chars().count() >= CHUNK_CHARS {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The events a reply streams as, in order.
fn events(request: &ModelRequest, reply: DemoReply) -> Vec<StreamEvent> {
    let mut output_chars = reply.text.chars().count();
    let mut events: Vec<StreamEvent> = chunks(&reply.text)
        .into_iter()
        .map(StreamEvent::TextDelta)
        .collect();
    let finish = match reply.tool_call {
        Some(call) => {
            output_chars += call.name.len() + call.arguments.len();
            events.push(StreamEvent::ToolCallStart {
                index: 0,
                id: call.id,
                name: call.name,
            });
            events.push(StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: call.arguments,
            });
            FinishReason::ToolCalls
        }
        None => FinishReason::Stop,
    };
    events.push(StreamEvent::Usage(Usage {
        input_tokens: estimate_tokens(prompt_chars(request)),
        output_tokens: estimate_tokens(output_chars),
        ..Default::default()
    }));
    events.push(StreamEvent::Finished(finish));
    events
}

#[async_trait]
impl ModelProvider for DemoModel {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        let events: VecDeque<StreamEvent> = events(&request, reply(&request)).into();
        let delay = self.chunk_delay;
        let stream = stream::unfold((events, cancel), move |(mut events, cancel)| async move {
            let event = events.pop_front()?;
            let paced = matches!(event, StreamEvent::TextDelta(_)) && !delay.is_zero();
            if paced {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
            } else if cancel.is_cancelled() {
                return None;
            }
            Some((Ok(event), (events, cancel)))
        });
        Ok(stream.boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{StreamAccumulator, ToolSpec};
    use std::time::Instant;

    fn time_tool() -> ToolSpec {
        ToolSpec {
            name: TIME_TOOL.into(),
            description: "the time".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ModelRequest {
        ModelRequest {
            model: "demo".into(),
            system: "be brief".into(),
            messages: crate::history::shared(messages),
            tools: tools.into(),
            max_output_tokens: None,
            thinking: None,
        }
    }

    async fn run(
        model: &DemoModel,
        request: ModelRequest,
    ) -> (Vec<StreamEvent>, crate::AssistantTurn) {
        let stream = model
            .stream(request, CancellationToken::new())
            .await
            .unwrap();
        let events: Vec<StreamEvent> = stream.map(|e| e.unwrap()).collect().await;
        let mut acc = StreamAccumulator::new();
        events.iter().for_each(|e| acc.push(e));
        (events, acc.finish())
    }

    #[tokio::test]
    async fn echoes_in_several_chunks_with_usage() {
        let model = DemoModel::with_chunk_delay(Duration::ZERO);
        let (events, turn) = run(
            &model,
            request(vec![Message::user("Hello there, demo!")], vec![time_tool()]),
        )
        .await;
        assert_eq!(
            turn.text,
            "[demo model] You said: Hello there, demo!. I am agentlane's built-in offline demo model; \
             configure OPENAI_API_KEY (or OPENAI_BASE_URL) and AGENTLANE_MODEL for a real one."
        );
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.finish, Some(FinishReason::Stop));
        let deltas = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
            .count();
        assert!(deltas >= 5, "{deltas} deltas");
        // "be brief" + "Hello there, demo!" = 8 + 18 chars → 7 tokens.
        assert_eq!(turn.usage.input_tokens, 7);
        assert_eq!(
            turn.usage.output_tokens,
            estimate_tokens(turn.text.chars().count())
        );
    }

    #[tokio::test]
    async fn long_messages_are_quoted_up_to_200_chars() {
        let long = "x".repeat(300);
        let r = reply(&request(vec![Message::user(long)], vec![]));
        assert!(
            r.text.contains(&format!("You said: {}….", "x".repeat(200))),
            "{}",
            r.text
        );
    }

    #[tokio::test]
    async fn time_question_calls_the_tool_then_reports_its_result() {
        let model = DemoModel::with_chunk_delay(Duration::ZERO);
        let mut history = vec![Message::user("What TIME is it?")];
        let (_, turn) = run(&model, request(history.clone(), vec![time_tool()])).await;
        assert_eq!(turn.text, "Let me check the clock.");
        assert_eq!(
            turn.tool_calls,
            vec![ToolCall {
                id: "call_demo_1".into(),
                name: TIME_TOOL.into(),
                arguments: "{}".into()
            }]
        );
        assert_eq!(turn.finish, Some(FinishReason::ToolCalls));

        history.push(Message::Assistant {
            content: turn.text,
            reasoning: None,
            tool_calls: turn.tool_calls,
            model: None,
        });
        history.push(Message::Tool {
            tool_call_id: "call_demo_1".into(),
            name: TIME_TOOL.into(),
            content: "2026-11-30T04:12:00+01:00 (Europe/Paris)".into(),
            is_error: false,
        });
        let (_, turn) = run(&model, request(history, vec![time_tool()])).await;
        assert_eq!(
            turn.text,
            "The current time is 2026-11-30T04:12:00+01:00 (Europe/Paris)."
        );
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.finish, Some(FinishReason::Stop));
    }

    #[test]
    fn time_tool_is_only_called_when_offered_and_asked_as_a_word() {
        let asked = |text: &str, tools: Vec<ToolSpec>| {
            reply(&request(vec![Message::user(text)], tools))
                .tool_call
                .is_some()
        };
        assert!(asked("what's the date today?", vec![time_tool()]));
        assert!(!asked("what's the date today?", vec![]));
        assert!(!asked(
            "please update the sometimes-broken docs",
            vec![time_tool()]
        ));
        // A new question after an earlier tool round asks again.
        let history = vec![
            Message::user("time?"),
            Message::Tool {
                tool_call_id: "c".into(),
                name: TIME_TOOL.into(),
                content: "t".into(),
                is_error: false,
            },
            Message::user("and the date?"),
        ];
        assert!(
            reply(&request(history, vec![time_tool()]))
                .tool_call
                .is_some()
        );
    }

    #[tokio::test]
    async fn chunks_are_paced_and_cancellation_ends_the_stream() {
        let model = DemoModel::with_chunk_delay(Duration::from_millis(40));
        let cancel = CancellationToken::new();
        let mut stream = model
            .stream(request(vec![Message::user("hi")], vec![]), cancel.clone())
            .await
            .unwrap();
        let started = Instant::now();
        assert!(matches!(
            stream.next().await,
            Some(Ok(StreamEvent::TextDelta(_)))
        ));
        assert!(started.elapsed() >= Duration::from_millis(40));
        // Without the cancellation the next item would be the next text chunk.
        cancel.cancel();
        assert!(stream.next().await.is_none());
    }
}
