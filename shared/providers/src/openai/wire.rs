//! [`ModelRequest`] → the Chat Completions request body.

use crate::ModelRequest;
use agentlane_core::{Message, ThinkingLevel};
use serde_json::{Value, json};

/// Which field carries the output-token cap. OpenAI's own API wants `max_completion_tokens`
/// (reasoning models refuse `max_tokens`); compatible servers (vLLM, Ollama, LiteLLM, llama.cpp)
/// all understand the older `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MaxTokensField {
    MaxCompletionTokens,
    MaxTokens,
}

impl MaxTokensField {
    fn key(self) -> &'static str {
        match self {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        }
    }
}

/// The streaming request body as `serde_json::to_vec` writes it, assembled from the
/// messages' encodings (each made once per message, see [`crate::history`]).
pub(crate) fn request_bytes(request: &ModelRequest, max_tokens: MaxTokensField) -> String {
    let system = system_message(request).map(|m| m.to_string());
    let messages = system
        .as_deref()
        .into_iter()
        .chain(request.messages.iter().map(|m| m.openai_chat()));
    let mut out = String::with_capacity(1024);
    crate::history::assemble(
        &skeleton(request, max_tokens, Value::Null),
        "messages",
        messages,
        &mut out,
    );
    out
}

/// The streaming request body, encoded whole (what [`request_bytes`] must equal).
pub(crate) fn request_body(request: &ModelRequest, max_tokens: MaxTokensField) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    messages.extend(system_message(request));
    messages.extend(request.messages.iter().map(|m| message(m)));
    skeleton(request, max_tokens, Value::Array(messages))
}

fn system_message(request: &ModelRequest) -> Option<Value> {
    (!request.system.is_empty()).then(|| json!({"role": "system", "content": request.system}))
}

/// The body with `messages` as the `messages` field.
fn skeleton(request: &ModelRequest, max_tokens: MaxTokensField, messages: Value) -> Value {
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(cap) = request.max_output_tokens {
        body[max_tokens.key()] = json!(cap);
    }
    if let Some(effort) = reasoning_effort(request.thinking) {
        body["reasoning_effort"] = json!(effort);
    }
    body
}

/// The `reasoning_effort` of a thinking level (`off`: none is sent).
pub(crate) fn reasoning_effort(level: Option<ThinkingLevel>) -> Option<&'static str> {
    match level? {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some("minimal"),
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High => Some("high"),
    }
}

/// One history message as a `messages` item.
pub(crate) fn message(message: &Message) -> Value {
    match message {
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Compaction { summary, .. } => {
            json!({"role": "user", "content": Message::compaction_text(summary)})
        }
        Message::Assistant {
            content,
            tool_calls,
            // Reasoning is not replayed: OpenAI has no field for it and some compatible servers
            // reject unknown message fields.
            reasoning: _,
            model: _,
        } => {
            if tool_calls.is_empty() {
                return json!({"role": "assistant", "content": content});
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    // Servers parse `arguments` as JSON; an empty string would be refused.
                    let arguments = if c.arguments.trim().is_empty() {
                        "{}"
                    } else {
                        c.arguments.as_str()
                    };
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": arguments},
                    })
                })
                .collect();
            let content = if content.is_empty() {
                Value::Null
            } else {
                json!(content)
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Message::Tool {
            tool_call_id,
            content,
            name: _,
            is_error: _,
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use agentlane_core::ToolCall;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "gpt-4o-mini".into(),
            system: String::new(),
            messages: crate::history::shared(messages),
            tools: vec![].into(),
            max_output_tokens: None,
            thinking: None,
        }
    }

    #[test]
    fn minimal_body_has_no_system_tools_or_cap() {
        let body = request_body(
            &request(vec![Message::user("hi")]),
            MaxTokensField::MaxTokens,
        );
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn assistant_without_text_but_with_calls_sends_null_content_and_object_arguments() {
        let mut req = request(vec![Message::Assistant {
            content: String::new(),
            reasoning: Some("thinking".into()),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "current_time".into(),
                arguments: String::new(),
            }],
            model: Some("openai/x".into()),
        }]);
        req.max_output_tokens = Some(64);
        req.tools = vec![ToolSpec {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({}),
        }]
        .into();
        let body = request_body(&req, MaxTokensField::MaxCompletionTokens);
        assert_eq!(
            body["messages"],
            json!([{
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}],
            }])
        );
        assert_eq!(body["max_completion_tokens"], json!(64));
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn the_assembled_body_is_byte_identical_to_the_full_encoding() {
        let full = crate::history::every_kind();
        let variants = [
            full.clone(),
            ModelRequest {
                system: String::new(),
                tools: vec![].into(),
                max_output_tokens: None,
                thinking: None,
                ..full.clone()
            },
            ModelRequest {
                messages: full.messages[..4].to_vec(),
                ..full.clone()
            },
            ModelRequest {
                messages: vec![],
                ..full.clone()
            },
        ];
        for request in variants {
            for field in [
                MaxTokensField::MaxTokens,
                MaxTokensField::MaxCompletionTokens,
            ] {
                let whole = serde_json::to_vec(&request_body(&request, field)).unwrap();
                let assembled = request_bytes(&request, field);
                assert_eq!(
                    assembled.as_bytes(),
                    whole,
                    "{}",
                    String::from_utf8_lossy(&whole)
                );
                // The second time, from the kept fragments.
                assert_eq!(request_bytes(&request, field).as_bytes(), whole);
            }
        }
    }
}
