//! [`ModelRequest`] → the Messages API request body.

use crate::history::AnthropicFragment;
use crate::{ModelRequest, SharedMessage, ToolSpec};
use agentlane_core::{Message, ThinkingLevel, ToolCall};
use serde_json::{Map, Value, json};
use std::borrow::Cow;

/// The streaming request body as `serde_json::to_vec` writes it, assembled from the
/// messages' encodings (each made once per message, see [`crate::history`]).
pub(crate) fn request_bytes(request: &ModelRequest, default_max_tokens: u32) -> String {
    let turns = turns(request.messages.iter().map(SharedMessage::anthropic));
    let mut out = String::with_capacity(1024);
    crate::history::assemble(
        &skeleton(request, default_max_tokens, Value::Null),
        "messages",
        turns.iter().map(|t| t.as_ref()),
        &mut out,
    );
    out
}

/// The streaming request body, encoded whole (what [`request_bytes`] must equal). `max_tokens`
/// is required by the API: the request's own cap, else `default_max_tokens`. With a thinking
/// level, extended thinking is enabled with that level's budget, and `max_tokens` grows by the
/// budget (the API wants it above `budget_tokens`, and the answer keeps its own cap).
pub(crate) fn request_body(request: &ModelRequest, default_max_tokens: u32) -> Value {
    let messages = Value::Array(messages(&request.messages));
    skeleton(request, default_max_tokens, messages)
}

/// The extended-thinking budget `request` is sent with, if any. A tool round's continuation
/// (the history ends in tool results) must replay the signed thinking block of the assistant
/// turn that called the tools when thinking is on; the transcript keeps no signatures, so such
/// a request runs with thinking off (allowed).
fn sent_budget(request: &ModelRequest) -> Option<u32> {
    let continues_tools = matches!(
        request.messages.last().map(|m| m.message()),
        Some(Message::Tool { .. })
    );
    thinking_budget(request.thinking).filter(|_| !continues_tools)
}

/// The `max_tokens` sent for `request`: its cap (else `default_max_tokens`) plus the thinking
/// budget it is sent with.
pub(crate) fn sent_max_tokens(request: &ModelRequest, default_max_tokens: u32) -> u32 {
    request
        .max_output_tokens
        .unwrap_or(default_max_tokens)
        .saturating_add(sent_budget(request).unwrap_or(0))
}

/// The body with `messages` as the `messages` field.
fn skeleton(request: &ModelRequest, default_max_tokens: u32, messages: Value) -> Value {
    let budget = sent_budget(request);
    let mut body = json!({
        "model": request.model,
        "max_tokens": sent_max_tokens(request, default_max_tokens),
        "stream": true,
        "messages": messages,
    });
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request.tools.iter().map(tool).collect();
    }
    body
}

/// The extended-thinking `budget_tokens` of a thinking level (`off`: thinking stays disabled).
/// The API's minimum budget is 1024 tokens.
pub fn thinking_budget(level: Option<ThinkingLevel>) -> Option<u32> {
    match level? {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some(1024),
        ThinkingLevel::Low => Some(4096),
        ThinkingLevel::Medium => Some(10_000),
        ThinkingLevel::High => Some(32_000),
    }
}

/// One history message in the Messages format.
enum Encoded {
    /// A whole turn.
    Turn(Value),
    /// A `tool_result` block (consecutive ones are sent as one user turn).
    ToolResult(Value),
    /// An assistant message with neither text nor tool calls: the API refuses empty content.
    Skipped,
}

fn encode(message: &Message) -> Encoded {
    match message {
        Message::Tool {
            tool_call_id,
            content,
            is_error,
            name: _,
        } => Encoded::ToolResult(json!({
            "type": "tool_result",
            "tool_use_id": tool_call_id,
            "content": content,
            "is_error": is_error,
        })),
        Message::User { content } => Encoded::Turn(json!({"role": "user", "content": content})),
        Message::Compaction { summary, .. } => {
            Encoded::Turn(json!({"role": "user", "content": Message::compaction_text(summary)}))
        }
        Message::Assistant {
            content,
            tool_calls,
            // Reasoning is not replayed: the API accepts thinking blocks back only with the
            // signature it issued, which the transcript does not keep.
            reasoning: _,
            model: _,
        } => {
            let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
            if !content.is_empty() {
                blocks.push(json!({"type": "text", "text": content}));
            }
            blocks.extend(tool_calls.iter().map(tool_use));
            if blocks.is_empty() {
                Encoded::Skipped
            } else {
                Encoded::Turn(json!({"role": "assistant", "content": blocks}))
            }
        }
    }
}

/// One history message's encoding, kept with the message.
pub(crate) fn fragment(message: &Message) -> AnthropicFragment {
    match encode(message) {
        Encoded::Turn(turn) => AnthropicFragment::Turn(turn.to_string().into()),
        Encoded::ToolResult(block) => AnthropicFragment::ToolResult(block.to_string().into()),
        Encoded::Skipped => AnthropicFragment::Skipped,
    }
}

/// The user turn of consecutive tool results.
fn results_turn(results: Value) -> Value {
    json!({"role": "user", "content": results})
}

/// The history as Messages API turns, from its messages' fragments. Consecutive tool results
/// become one user message of `tool_result` blocks (the API wants every result of an assistant
/// turn in the next message).
fn turns<'a>(history: impl Iterator<Item = &'a AnthropicFragment>) -> Vec<Cow<'a, str>> {
    let mut turns = Vec::with_capacity(history.size_hint().0);
    let mut results: Vec<&str> = Vec::new();
    let flush = |results: &mut Vec<&str>, turns: &mut Vec<Cow<'a, str>>| {
        if !results.is_empty() {
            let mut turn = String::new();
            let skeleton = results_turn(Value::Null);
            crate::history::assemble(&skeleton, "content", results.drain(..), &mut turn);
            turns.push(Cow::Owned(turn));
        }
    };
    for fragment in history {
        match fragment {
            AnthropicFragment::ToolResult(block) => results.push(block),
            AnthropicFragment::Turn(turn) => {
                flush(&mut results, &mut turns);
                turns.push(Cow::Borrowed(turn));
            }
            AnthropicFragment::Skipped => flush(&mut results, &mut turns),
        }
    }
    flush(&mut results, &mut turns);
    turns
}

/// The history as Messages API turns, encoded whole (see [`turns`]).
fn messages(history: &[SharedMessage]) -> Vec<Value> {
    let mut turns = Vec::with_capacity(history.len());
    let mut results: Vec<Value> = Vec::new();
    for message in history {
        let encoded = encode(message);
        if let Encoded::ToolResult(block) = encoded {
            results.push(block);
            continue;
        }
        if !results.is_empty() {
            turns.push(results_turn(Value::Array(std::mem::take(&mut results))));
        }
        if let Encoded::Turn(turn) = encoded {
            turns.push(turn);
        }
    }
    if !results.is_empty() {
        turns.push(results_turn(Value::Array(results)));
    }
    turns
}

/// A `tool_use` block. The API wants `input` as a JSON object: arguments that are not valid JSON
/// or not an object (a model's broken output, an empty string) are sent as `{}`; the tool
/// result that followed already told the model what went wrong.
fn tool_use(call: &ToolCall) -> Value {
    let input = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::Object(Map::new()),
    };
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// A tool definition. The API requires `input_schema.type`; a schema without one gets
/// `"object"`, and a missing (non-object) schema becomes an empty object schema.
fn tool(spec: &ToolSpec) -> Value {
    let schema = match &spec.parameters {
        Value::Object(map) => {
            let mut map = map.clone();
            map.entry("type").or_insert_with(|| json!("object"));
            Value::Object(map)
        }
        _ => json!({"type": "object", "properties": {}}),
    };
    json!({"name": spec.name, "description": spec.description, "input_schema": schema})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: String::new(),
            messages: crate::history::shared(messages),
            tools: vec![].into(),
            max_output_tokens: None,
            thinking: None,
        }
    }

    fn call(id: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "f".into(),
            arguments: arguments.into(),
        }
    }

    fn tool_result(id: &str, content: &str, is_error: bool) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "f".into(),
            content: content.into(),
            is_error,
        }
    }

    #[test]
    fn thinking_is_enabled_for_a_prompt_and_left_off_for_a_tool_continuation() {
        let mut prompt = request(vec![Message::user("hi")]);
        prompt.thinking = Some(ThinkingLevel::Low);
        let body = request_body(&prompt, 1000);
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 4096})
        );
        assert_eq!(body["max_tokens"], 5096);
        assert_eq!(
            sent_max_tokens(&prompt, 1000),
            5096,
            "what a budget reserves"
        );

        let mut continuation = request(vec![
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                reasoning: Some("call f".into()),
                tool_calls: vec![call("t1", "{}")],
                model: None,
            },
            tool_result("t1", "done", false),
        ]);
        continuation.thinking = Some(ThinkingLevel::Low);
        let body = request_body(&continuation, 1000);
        assert!(body.get("thinking").is_none(), "{body}");
        assert_eq!(body["max_tokens"], 1000);
        assert_eq!(sent_max_tokens(&continuation, 1000), 1000);
        continuation.max_output_tokens = Some(300);
        assert_eq!(request_body(&continuation, 1000)["max_tokens"], 300);
        assert_eq!(sent_max_tokens(&continuation, 1000), 300);
    }

    #[test]
    fn minimal_body_has_the_default_cap_and_no_system_or_tools() {
        let body = request_body(&request(vec![Message::user("hi")]), 4096);
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "stream": true,
                "messages": [{"role": "user", "content": "hi"}],
            })
        );
    }

    #[test]
    fn arguments_that_are_not_a_json_object_become_an_empty_input() {
        let body = request_body(
            &request(vec![Message::Assistant {
                content: String::new(),
                reasoning: Some("thinking".into()),
                tool_calls: vec![
                    call("a", r#"{"k":1}"#),
                    call("b", ""),
                    call("c", "{broken"),
                    call("d", "[1,2]"),
                ],
                model: None,
            }]),
            1,
        );
        let inputs: Vec<&Value> = body["messages"][0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| &b["input"])
            .collect();
        assert_eq!(
            inputs,
            vec![&json!({"k": 1}), &json!({}), &json!({}), &json!({})]
        );
    }

    #[test]
    fn results_are_grouped_until_the_next_message_and_empty_assistants_dropped() {
        let body = request_body(
            &request(vec![
                Message::Assistant {
                    content: String::new(),
                    reasoning: None,
                    tool_calls: vec![],
                    model: None,
                },
                tool_result("a", "1", false),
                tool_result("b", "boom", true),
                Message::user("next"),
                tool_result("c", "3", false),
            ]),
            1,
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": true},
                ]},
                {"role": "user", "content": "next"},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c", "content": "3", "is_error": false},
                ]},
            ])
        );
    }

    #[test]
    fn tool_schemas_always_have_a_type() {
        let mut req = request(vec![Message::user("hi")]);
        req.tools = vec![
            ToolSpec {
                name: "a".into(),
                description: "A".into(),
                parameters: json!({"properties": {"x": {"type": "string"}}}),
            },
            ToolSpec {
                name: "b".into(),
                description: "B".into(),
                parameters: Value::Null,
            },
        ]
        .into();
        let body = request_body(&req, 1);
        assert_eq!(
            body["tools"],
            json!([
                {"name": "a", "description": "A", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
                {"name": "b", "description": "B", "input_schema": {"type": "object", "properties": {}}},
            ])
        );
    }

    #[test]
    fn the_assembled_body_is_byte_identical_to_the_full_encoding() {
        let full = crate::history::every_kind();
        let ends_in_results = ModelRequest {
            messages: full.messages[..5].to_vec(),
            ..full.clone()
        };
        let variants = [
            full.clone(),
            ModelRequest {
                system: String::new(),
                tools: vec![].into(),
                max_output_tokens: None,
                thinking: None,
                ..full.clone()
            },
            ends_in_results,
            ModelRequest {
                messages: vec![],
                ..full.clone()
            },
        ];
        for request in variants {
            let whole = serde_json::to_vec(&request_body(&request, 1000)).unwrap();
            let assembled = request_bytes(&request, 1000);
            assert_eq!(
                assembled.as_bytes(),
                whole,
                "{}",
                String::from_utf8_lossy(&whole)
            );
            assert_eq!(request_bytes(&request, 1000).as_bytes(), whole);
        }
    }
}
