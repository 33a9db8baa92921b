//! Messages API stream events (`message_start` … `message_stop`) → [`StreamEvent`]s.
//!
//! A pure state machine: the transport feeds it each SSE event (name and `data:`) and finally
//! tells it the connection ended; it decides what to emit and whether the response was complete.
//! Content blocks are tracked by their `index`, so servers that open a block before stopping the
//! previous one (llama-server opens every `tool_use` block first and stops them all at the end)
//! decode the same as the real API.

use crate::{FailoverReason, FinishReason, ProviderError, StreamEvent};
use agentlane_core::Usage;
use serde::Deserialize;
use serde_json::{Value, json};

/// Whether more events are expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    /// `message_stop` arrived; `Usage` and `Finished` have been emitted.
    Done,
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking,
    Tool {
        /// The call's position among the message's `tool_use` blocks: `StreamEvent`'s index.
        ordinal: usize,
        /// `input` as given by `content_block_start`, sent only if no `input_json_delta` comes.
        start_input: Option<String>,
        streamed: bool,
    },
    /// A block we do not surface (redacted thinking, server-side tools).
    Other,
}

#[derive(Debug)]
struct OpenBlock {
    index: u64,
    block: Block,
    stopped: bool,
}

#[derive(Debug, Default)]
pub(crate) struct EventDecoder {
    blocks: Vec<OpenBlock>,
    tool_calls: usize,
    usage: Usage,
    stop_reason: Option<FinishReason>,
    done: bool,
    /// A text block started empty (the message has a text part, so far empty).
    empty_text: bool,
    /// Text, reasoning or a tool call arrived.
    content: bool,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        #[serde(default)]
        message: WireMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error,
    /// Event types added after this client was written are ignored, as the API asks.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        #[serde(default)]
        text: Option<String>,
    },
    Thinking {
        #[serde(default)]
        thinking: Option<String>,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        /// `{}` from the real API; absent from llama-server; complete in a non-streamed answer.
        #[serde(default)]
        input: Option<Value>,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        #[serde(default)]
        text: Option<String>,
    },
    InputJsonDelta {
        #[serde(default)]
        partial_json: Option<String>,
    },
    ThinkingDelta {
        #[serde(default)]
        thinking: Option<String>,
    },
    /// `signature_delta`, `citations_delta`, …
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

fn malformed(what: impl std::fmt::Display) -> ProviderError {
    ProviderError::new(
        FailoverReason::Network,
        format!("malformed stream event: {what}"),
    )
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

impl EventDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Decodes one SSE event (`event:` name and `data:` payload), appending what it carries to
    /// `out`. The payload's own `type` decides; the event name stands in when it has none.
    pub(crate) fn event(
        &mut self,
        name: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Step, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Step::More);
        }
        let mut value: Value = serde_json::from_str(data).map_err(malformed)?;
        if let Some(object) = value.as_object_mut()
            && !object.contains_key("type")
        {
            // An OpenAI-shaped `{"error": {...}}` (llama-server) is an error whatever the name.
            let kind = if object.contains_key("error") {
                "error"
            } else {
                name
            };
            object.insert("type".to_owned(), json!(kind));
        }
        self.apply(&value, out)
    }

    /// The connection ended. Only a response that reached `message_stop` is complete.
    pub(crate) fn end(&self) -> Result<(), ProviderError> {
        if self.done {
            Ok(())
        } else {
            Err(ProviderError::cut_off())
        }
    }

    /// Decodes a whole (non-streamed) answer by replaying it as the events a stream would carry.
    pub(crate) fn whole_message(body: &str) -> Result<Vec<StreamEvent>, ProviderError> {
        let value: Value = serde_json::from_str(body).map_err(malformed)?;
        let mut decoder = Self::new();
        let mut out = Vec::new();
        if value.get("type").and_then(Value::as_str) == Some("error")
            || value.get("error").is_some()
        {
            return Err(stream_error(&value));
        }
        let blocks = value
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut events =
            vec![json!({"type": "message_start", "message": {"usage": value.get("usage")}})];
        for (index, block) in blocks.into_iter().enumerate() {
            events.push(
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
            events.push(json!({"type": "content_block_stop", "index": index}));
        }
        events.push(
            json!({"type": "message_delta", "delta": {"stop_reason": value.get("stop_reason")}}),
        );
        events.push(json!({"type": "message_stop"}));
        for event in &events {
            decoder.apply(event, &mut out)?;
        }
        Ok(out)
    }

    fn apply(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<Step, ProviderError> {
        if self.done {
            return Ok(Step::Done);
        }
        let event = WireEvent::deserialize(value).map_err(malformed)?;
        match event {
            WireEvent::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.usage(&usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let before = out.len();
                self.empty_text |= matches!(&content_block, WireBlock::Text { .. });
                self.start(index, content_block, out);
                self.content |= out.len() > before;
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                let before = out.len();
                self.delta(index, delta, out)?;
                self.content |= out.len() > before;
            }
            WireEvent::ContentBlockStop { index } => self.stop(index, out),
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(finish_reason(&reason));
                }
                if let Some(usage) = usage {
                    self.usage(&usage);
                }
            }
            WireEvent::MessageStop => {
                let open: Vec<u64> = self
                    .blocks
                    .iter()
                    .filter(|b| !b.stopped)
                    .map(|b| b.index)
                    .collect();
                for index in open {
                    self.stop(index, out);
                }
                let reason = self.stop_reason.take().unwrap_or(if self.tool_calls > 0 {
                    FinishReason::ToolCalls
                } else {
                    FinishReason::Stop
                });
                out.push(StreamEvent::Usage(self.usage));
                // An empty text block and nothing else is an empty answer, not a missing one.
                if self.empty_text && !self.content {
                    out.push(StreamEvent::EmptyText);
                }
                out.push(StreamEvent::Finished(reason));
                self.done = true;
                return Ok(Step::Done);
            }
            WireEvent::Error => return Err(stream_error(value)),
            WireEvent::Ping | WireEvent::Unknown => {}
        }
        Ok(Step::More)
    }

    /// Counts are cumulative: the latest report wins. Cached prompt tokens count as input (the
    /// API reports them apart from `input_tokens`), and are kept apart too, for their prices.
    fn usage(&mut self, usage: &WireUsage) {
        let input = [
            usage.input_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        ];
        if input.iter().any(Option::is_some) {
            let total: u64 = input.iter().flatten().sum();
            if total > 0 {
                self.usage.input_tokens = total;
            }
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = read;
        }
        if let Some(written) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = written;
        }
    }

    fn start(&mut self, index: u64, block: WireBlock, out: &mut Vec<StreamEvent>) {
        // A server reusing an index starts a new block: finish the old one first.
        if self.blocks.iter().any(|b| b.index == index && !b.stopped) {
            self.stop(index, out);
        }
        let block = match block {
            WireBlock::Text { text } => {
                out.extend(non_empty(text).map(StreamEvent::TextDelta));
                Block::Text
            }
            WireBlock::Thinking { thinking } => {
                out.extend(non_empty(thinking).map(StreamEvent::ReasoningDelta));
                Block::Thinking
            }
            WireBlock::ToolUse { id, name, input } => {
                let ordinal = self.tool_calls;
                self.tool_calls += 1;
                out.push(StreamEvent::ToolCallStart {
                    index: ordinal,
                    id: id.unwrap_or_default(),
                    name: name.unwrap_or_default(),
                });
                Block::Tool {
                    ordinal,
                    start_input: input.filter(|v| !v.is_null()).map(|v| v.to_string()),
                    streamed: false,
                }
            }
            WireBlock::Other => Block::Other,
        };
        self.blocks.push(OpenBlock {
            index,
            block,
            stopped: false,
        });
    }

    fn delta(
        &mut self,
        index: u64,
        delta: WireDelta,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError> {
        match delta {
            WireDelta::TextDelta { text } => {
                out.extend(non_empty(text).map(StreamEvent::TextDelta));
            }
            WireDelta::ThinkingDelta { thinking } => {
                out.extend(non_empty(thinking).map(StreamEvent::ReasoningDelta));
            }
            WireDelta::InputJsonDelta { partial_json } => {
                let block = self.blocks.iter_mut().rev().find(|b| b.index == index);
                let Some(OpenBlock {
                    block:
                        Block::Tool {
                            ordinal, streamed, ..
                        },
                    ..
                }) = block
                else {
                    return Err(malformed(format!(
                        "input_json_delta for block {index}, which is not a tool_use block"
                    )));
                };
                if let Some(fragment) = non_empty(partial_json) {
                    *streamed = true;
                    out.push(StreamEvent::ToolCallArgumentsDelta {
                        index: *ordinal,
                        delta: fragment,
                    });
                }
            }
            WireDelta::Other => {}
        }
        Ok(())
    }

    /// Closes a block. A tool call that received no argument fragments gets its start `input`
    /// (or `{}`), so its arguments are always a JSON object.
    fn stop(&mut self, index: u64, out: &mut Vec<StreamEvent>) {
        let Some(open) = self
            .blocks
            .iter_mut()
            .find(|b| b.index == index && !b.stopped)
        else {
            return;
        };
        open.stopped = true;
        if let Block::Tool {
            ordinal,
            start_input,
            streamed: false,
        } = &mut open.block
        {
            out.push(StreamEvent::ToolCallArgumentsDelta {
                index: *ordinal,
                delta: start_input.take().unwrap_or_else(|| "{}".to_owned()),
            });
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Classifies an error event (`{"type": "error", "error": {"type": "overloaded_error", …}}`).
/// The response was a 200, so the error's type picks a stand-in status for the classifier (a
/// numeric `code`, as llama-server sends, is taken as the status); the error carries no status.
fn stream_error(event: &Value) -> ProviderError {
    let kind = event
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let stand_in = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    };
    ProviderError::in_stream(event.pointer("/error/code"), stand_in, &event.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[(&str, Value)]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = EventDecoder::new();
        let mut out = Vec::new();
        for (name, data) in events {
            match decoder.event(name, &data.to_string(), &mut out) {
                Ok(Step::Done) => return (out, Ok(())),
                Ok(Step::More) => {}
                Err(e) => return (out, Err(e)),
            }
        }
        let end = decoder.end();
        (out, end)
    }

    #[test]
    fn tool_call_without_fragments_gets_its_start_input_or_an_empty_object() {
        let (events, end) = run(&[
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "a", "name": "now", "input": {}}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            // No `input` at all, and never stopped before message_stop.
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "b", "name": "now"}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        end.unwrap();
        assert_eq!(
            events,
            vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "a".into(),
                    name: "now".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: "{}".into()
                },
                StreamEvent::ToolCallStart {
                    index: 1,
                    id: "b".into(),
                    name: "now".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 1,
                    delta: "{}".into()
                },
                StreamEvent::Usage(Usage::default()),
                // No stop_reason: tool calls imply ToolCalls.
                StreamEvent::Finished(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn stop_reasons() {
        let cases = [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("tool_use", FinishReason::ToolCalls),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::ContentFilter),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ];
        for (wire, want) in cases {
            let (events, end) = run(&[
                (
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": wire}}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ]);
            end.unwrap();
            assert_eq!(events.last(), Some(&StreamEvent::Finished(want)), "{wire}");
        }
    }

    #[test]
    fn usage_counts_cached_input_and_takes_the_latest_output() {
        let (events, _) = run(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 5, "output_tokens": 1}}}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        assert_eq!(
            events[0],
            StreamEvent::Usage(Usage {
                input_tokens: 105,
                output_tokens: 42,
                cache_read_tokens: 90,
                cache_write_tokens: 5,
            })
        );
    }

    #[test]
    fn in_stream_errors_are_classified() {
        let cases = [
            ("overloaded_error", FailoverReason::Overloaded),
            ("rate_limit_error", FailoverReason::RateLimit),
            ("api_error", FailoverReason::Server),
            ("authentication_error", FailoverReason::Auth),
            ("permission_error", FailoverReason::Auth),
            ("not_found_error", FailoverReason::ModelNotFound),
            ("billing_error", FailoverReason::Billing),
            ("timeout_error", FailoverReason::Timeout),
            ("invalid_request_error", FailoverReason::Format),
            ("something_new", FailoverReason::Server),
        ];
        for (kind, reason) in cases {
            let (_, end) = run(&[(
                "error",
                json!({"type": "error", "error": {"type": kind, "message": "it failed"}}),
            )]);
            let err = end.unwrap_err();
            assert_eq!((err.reason, err.status), (reason, None), "{kind}");
            assert!(
                err.message.starts_with("error in stream: it failed"),
                "{}",
                err.message
            );
        }
        // llama-server's OpenAI-shaped error, without a type, with a numeric code.
        let (_, end) = run(&[(
            "",
            json!({"error": {"code": 500, "message": "does not match the expected format"}}),
        )]);
        let err = end.unwrap_err();
        assert_eq!(
            (err.reason, err.status),
            (FailoverReason::Server, Some(500))
        );
    }

    #[test]
    fn an_empty_text_block_alone_is_reported_and_no_block_is_not() {
        let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}});
        let block = |text: &str| json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": text}});
        let stop_block = json!({"type": "content_block_stop", "index": 0});
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}});
        let stop = json!({"type": "message_stop"});
        let empty = |events: &[StreamEvent]| {
            events
                .iter()
                .filter(|e| **e == StreamEvent::EmptyText)
                .count()
        };
        // An empty text block and nothing else: an empty answer, once, before the finish.
        let (events, end) = run(&[
            ("message_start", start.clone()),
            ("content_block_start", block("")),
            ("content_block_stop", stop_block.clone()),
            ("message_delta", delta.clone()),
            ("message_stop", stop.clone()),
        ]);
        assert!(end.is_ok());
        assert_eq!(empty(&events), 1, "{events:?}");
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finished(FinishReason::Stop))
        );
        // A text block with text: no marker.
        let (events, _) = run(&[
            ("message_start", start.clone()),
            ("content_block_start", block("hi")),
            ("content_block_stop", stop_block),
            ("message_stop", stop.clone()),
        ]);
        assert_eq!(empty(&events), 0, "{events:?}");
        // No content block at all: no assistant message.
        let (events, _) = run(&[
            ("message_start", start),
            ("message_delta", delta),
            ("message_stop", stop),
        ]);
        assert_eq!(empty(&events), 0, "{events:?}");
    }

    #[test]
    fn malformed_events_are_network_errors() {
        let mut decoder = EventDecoder::new();
        let err = decoder
            .event("message_start", "{not json", &mut Vec::new())
            .unwrap_err();
        assert_eq!(err.reason, FailoverReason::Network);
        let (_, end) = run(&[
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}}),
            ),
        ]);
        assert_eq!(end.unwrap_err().reason, FailoverReason::Network);
    }

    #[test]
    fn whole_message_replays_as_events() {
        let events = EventDecoder::whole_message(
            &json!({
                "type": "message", "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "get_time", "input": {"tz": "UTC"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 7, "output_tokens": 3},
            })
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta("hmm".into()),
                StreamEvent::TextDelta("Checking.".into()),
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "t1".into(),
                    name: "get_time".into()
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: r#"{"tz":"UTC"}"#.into()
                },
                StreamEvent::Usage(Usage {
                    input_tokens: 7,
                    output_tokens: 3,
                    ..Default::default()
                }),
                StreamEvent::Finished(FinishReason::ToolCalls),
            ]
        );
        let err = EventDecoder::whole_message(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
        assert_eq!(err.reason, FailoverReason::Overloaded);
    }
}
