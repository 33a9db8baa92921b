//! Chat Completions chunks (`data:` payloads) → [`StreamEvent`]s.
//!
//! A pure state machine: the transport feeds it each `data:` payload and finally tells it the
//! connection ended; it decides what to emit and whether the response was complete.

use crate::{FailoverReason, FinishReason, ProviderError, StreamEvent};
use agentlane_core::Usage;
use serde::Deserialize;
use serde_json::Value;

/// Whether more chunks are expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    /// The response is complete (`[DONE]`); `Finished` has been emitted.
    Done,
}

/// Per-tool-call bookkeeping: what has already been announced with `ToolCallStart`.
#[derive(Debug, Default)]
struct CallSeen {
    index: usize,
    id: bool,
    name: bool,
}

#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: Vec<CallSeen>,
    finish: Option<FinishReason>,
    finished: bool,
    /// A `"content": ""` arrived (the message has a text part, so far empty).
    empty_text: bool,
    /// Text, reasoning or a tool call arrived.
    content: bool,
}

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    index: usize,
    /// Streaming chunks carry `delta`; a whole (non-streamed) answer carries `message`.
    #[serde(default, alias = "message")]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    reasoning_content: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string per the API; some servers send an object, which we re-serialise.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    /// `cached_tokens`: prompt tokens read from OpenAI's prompt cache.
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Debug, Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn text(value: Option<Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

impl ChunkDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Decodes one `data:` payload, appending what it carries to `out`.
    pub(crate) fn data(
        &mut self,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Step, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.mark_empty_text(out);
            out.push(self.finished_event());
            return Ok(Step::Done);
        }
        if data.is_empty() {
            return Ok(Step::More);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            ProviderError::new(
                FailoverReason::Network,
                format!("malformed stream chunk: {e}"),
            )
        })?;
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
                self.mark_empty_text(out);
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cache_read_tokens: usage
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                cache_write_tokens: 0,
            }));
        }
        Ok(Step::More)
    }

    /// The connection ended (or a whole non-streamed body was decoded). A response that saw a
    /// `finish_reason` is complete; anything else was cut off.
    pub(crate) fn end(&mut self) -> Result<Option<StreamEvent>, ProviderError> {
        if self.finished {
            return Ok(None);
        }
        if self.finish.is_some() {
            return Ok(Some(self.finished_event()));
        }
        Err(ProviderError::cut_off())
    }

    fn finished_event(&mut self) -> StreamEvent {
        self.finished = true;
        let reason = match self.finish.take() {
            // Some servers report "stop" for a turn that called tools.
            Some(FinishReason::Stop) | None if !self.calls.is_empty() => FinishReason::ToolCalls,
            Some(reason) => reason,
            None => FinishReason::Stop,
        };
        StreamEvent::Finished(reason)
    }

    /// At the finish: an empty text part and nothing else is an empty answer, not a missing
    /// one ([`StreamEvent::EmptyText`], sent once).
    fn mark_empty_text(&mut self, out: &mut Vec<StreamEvent>) {
        if self.empty_text && !self.content {
            out.push(StreamEvent::EmptyText);
            self.empty_text = false;
        }
    }

    fn delta(&mut self, delta: Delta, out: &mut Vec<StreamEvent>) {
        let before = out.len();
        if matches!(&delta.content, Some(Value::String(s)) if s.is_empty()) {
            self.empty_text = true;
        }
        self.delta_events(delta, out);
        self.content |= out.len() > before;
    }

    fn delta_events(&mut self, delta: Delta, out: &mut Vec<StreamEvent>) {
        if let Some(reasoning) = text(delta.reasoning_content).or_else(|| text(delta.reasoning)) {
            out.push(StreamEvent::ReasoningDelta(reasoning));
        }
        if let Some(content) = text(delta.content) {
            out.push(StreamEvent::TextDelta(content));
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            self.tool_call(call.index.unwrap_or(position), call, out);
        }
    }

    fn tool_call(&mut self, index: usize, call: ToolCallDelta, out: &mut Vec<StreamEvent>) {
        let id = call.id.filter(|s| !s.is_empty());
        let (name, arguments) = match call.function {
            Some(f) => (f.name.filter(|s| !s.is_empty()), f.arguments),
            None => (None, None),
        };
        let seen = match self.calls.iter().position(|c| c.index == index) {
            Some(i) => &mut self.calls[i],
            None => {
                self.calls.push(CallSeen {
                    index,
                    ..CallSeen::default()
                });
                let last = self.calls.len() - 1;
                &mut self.calls[last]
            }
        };
        // Announce an id or a name only the first time it appears: servers that repeat them in
        // every fragment must not duplicate the name.
        let new_id = id.filter(|_| !seen.id);
        let new_name = name.filter(|_| !seen.name);
        if new_id.is_some() || new_name.is_some() {
            seen.id |= new_id.is_some();
            seen.name |= new_name.is_some();
            out.push(StreamEvent::ToolCallStart {
                index,
                id: new_id.unwrap_or_default(),
                name: new_name.unwrap_or_default(),
            });
        }
        let arguments = match arguments {
            Some(Value::String(s)) => s,
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if !arguments.is_empty() {
            out.push(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: arguments,
            });
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "end_turn" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Classifies `data: {"error": {...}}`. The error carries no HTTP status of its own (the response
/// was a 200), so a numeric `code` is taken as one, else the type/code text picks a stand-in.
fn stream_error(error: &Value) -> ProviderError {
    let body = serde_json::json!({ "error": error }).to_string();
    let code = error.get("code");
    let label = format!(
        "{} {}",
        error
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        code.and_then(Value::as_str).unwrap_or_default()
    )
    .to_ascii_lowercase();
    let stand_in = if label.contains("rate_limit") {
        429
    } else if label.contains("overloaded") {
        529
    } else if label.contains("insufficient_quota") || label.contains("billing") {
        402
    } else if label.contains("authentication") || label.contains("invalid_api_key") {
        401
    } else if label.contains("invalid_request") {
        400
    } else {
        500
    };
    ProviderError::in_stream(code, stand_in, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> (Vec<StreamEvent>, Result<Option<StreamEvent>, ProviderError>) {
        let mut decoder = ChunkDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            if decoder.data(c, &mut out).unwrap() == Step::Done {
                return (out, Ok(None));
            }
        }
        let end = decoder.end();
        (out, end)
    }

    #[test]
    fn an_empty_text_part_alone_is_reported_and_no_message_is_not() {
        let empty = |events: &[StreamEvent]| {
            events
                .iter()
                .filter(|e| **e == StreamEvent::EmptyText)
                .count()
        };
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        let stop = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        // `content: ""` and nothing else: an empty answer, once, before the finish.
        let (events, _) = run(&[role, stop, "[DONE]"]);
        assert_eq!(empty(&events), 1, "{events:?}");
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finished(FinishReason::Stop))
        );
        // Text after the empty part: no marker.
        let text = r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
        let (events, _) = run(&[role, text, stop, "[DONE]"]);
        assert_eq!(empty(&events), 0, "{events:?}");
        // `content: null` and no tool call: no assistant message at all.
        let null = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#;
        let calls = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
        let (events, _) = run(&[null, calls, "[DONE]"]);
        assert_eq!(empty(&events), 0, "{events:?}");
    }

    #[test]
    fn repeated_id_and_name_are_announced_once() {
        let (events, end) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":":1}"}}]},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "c".into(),
                    name: "f".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: "{\"a\"".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: ":1}".into()
                },
            ]
        );
        // "stop" with tool calls is normalised.
        assert_eq!(
            end.unwrap(),
            Some(StreamEvent::Finished(FinishReason::ToolCalls))
        );
    }

    #[test]
    fn cached_prompt_tokens_are_reported_apart() {
        let (events, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":1024}}}"#,
        ]);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Usage(Usage {
                input_tokens: 1200,
                output_tokens: 9,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
            }))
        );
    }

    #[test]
    fn whole_message_with_object_arguments_and_reasoning_alias() {
        let (events, end) = run(&[
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning":"hmm","tool_calls":[{"id":"x","type":"function","function":{"name":"g","arguments":{"k":"v"}}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta("hmm".into()),
                StreamEvent::TextDelta("ok".into()),
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "x".into(),
                    name: "g".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: r#"{"k":"v"}"#.into()
                },
                StreamEvent::Usage(Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                    ..Default::default()
                }),
            ]
        );
        assert_eq!(
            end.unwrap(),
            Some(StreamEvent::Finished(FinishReason::ToolCalls))
        );
    }

    #[test]
    fn done_without_finish_reason_completes_and_end_without_either_is_a_network_error() {
        let (events, end) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            "[DONE]",
        ]);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finished(FinishReason::Stop))
        );
        assert!(end.is_ok());

        let (_, end) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#]);
        assert_eq!(end.unwrap_err().reason, FailoverReason::Network);
    }

    #[test]
    fn in_stream_errors_are_classified() {
        let cases = [
            (
                r#"{"error":{"code":500,"message":"The model produced output that does not match"}}"#,
                FailoverReason::Server,
                Some(500),
            ),
            (
                r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                FailoverReason::Overloaded,
                None,
            ),
            (
                r#"{"error":{"code":"rate_limit_exceeded","message":"slow down"}}"#,
                FailoverReason::RateLimit,
                None,
            ),
            (
                r#"{"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"too long"}}"#,
                FailoverReason::ContextOverflow,
                None,
            ),
        ];
        for (chunk, reason, status) in cases {
            let err = ChunkDecoder::new()
                .data(chunk, &mut Vec::new())
                .unwrap_err();
            assert_eq!((err.reason, err.status), (reason, status), "{chunk}");
            assert!(
                err.message.starts_with("error in stream: "),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn malformed_chunk_is_a_network_error() {
        let err = ChunkDecoder::new()
            .data("{not json", &mut Vec::new())
            .unwrap_err();
        assert_eq!(err.reason, FailoverReason::Network);
    }
}
