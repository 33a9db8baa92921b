//! The history of a [`ModelRequest`](crate::ModelRequest) as shared messages: each one is
//! held by `Arc` by the runner's transcript cache, the turn and the request alike (never
//! copied), and keeps what is derived from it, each computed at most once: its size for the
//! estimates and its encoding in each provider's wire format. A request body is assembled
//! from those fragments, so a turn encodes only the messages it has not sent before
//! (issue 26.1).
//!
//! A fragment is the exact text the full encoding gives the message (`Value`'s compact
//! `Display`, as `serde_json::to_vec` writes it), so an assembled body is byte-identical to
//! the fully encoded one (`assemble`).

use agentlane_core::Message;
use serde_json::Value;
use std::borrow::Borrow;
use std::sync::{Arc, OnceLock};

/// A history message shared by `Arc`, with its derived sizes and wire encodings computed at
/// most once (cloning shares them). A changed message is a new `SharedMessage`.
#[derive(Clone)]
pub struct SharedMessage(Arc<Inner>);

struct Inner {
    message: Message,
    text_chars: OnceLock<usize>,
    openai_chat: OnceLock<Box<str>>,
    anthropic: OnceLock<AnthropicFragment>,
}

/// A message in the Anthropic Messages format: tool results are blocks that [`assemble`]
/// groups into one user turn; an assistant message with nothing to show is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AnthropicFragment {
    /// A whole turn (`{"role": ..., "content": ...}`).
    Turn(Box<str>),
    /// A `tool_result` block.
    ToolResult(Box<str>),
    /// Nothing is sent for it.
    Skipped,
}

impl SharedMessage {
    /// Shares `message`; nothing is encoded until a provider asks.
    pub fn new(message: Message) -> Self {
        Self(Arc::new(Inner {
            message,
            text_chars: OnceLock::new(),
            openai_chat: OnceLock::new(),
            anthropic: OnceLock::new(),
        }))
    }

    /// The message.
    pub fn message(&self) -> &Message {
        &self.0.message
    }

    /// The characters (not bytes) of the texts the model reads: the content, the tool calls'
    /// names and arguments, a tool result's content, a summary. Counted once.
    pub fn text_chars(&self) -> usize {
        *self
            .0
            .text_chars
            .get_or_init(|| text_chars(&self.0.message))
    }

    /// The message as a Chat Completions `messages` item (JSON text), encoded once.
    pub(crate) fn openai_chat(&self) -> &str {
        self.0.openai_chat.get_or_init(|| {
            crate::openai::wire_message(&self.0.message)
                .to_string()
                .into()
        })
    }

    /// The message in the Anthropic Messages format, encoded once.
    pub(crate) fn anthropic(&self) -> &AnthropicFragment {
        self.0
            .anthropic
            .get_or_init(|| crate::anthropic::wire_fragment(&self.0.message))
    }

    /// Whether both share one message (and its encodings).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn text_chars(message: &Message) -> usize {
    match message {
        Message::User { content } => content.chars().count(),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            content.chars().count()
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        }
        Message::Tool { content, .. } => content.chars().count(),
        Message::Compaction { summary, .. } => summary.chars().count(),
    }
}

impl std::ops::Deref for SharedMessage {
    type Target = Message;

    fn deref(&self) -> &Message {
        &self.0.message
    }
}

impl Borrow<Message> for SharedMessage {
    fn borrow(&self) -> &Message {
        &self.0.message
    }
}

impl AsRef<Message> for SharedMessage {
    fn as_ref(&self) -> &Message {
        &self.0.message
    }
}

impl From<Message> for SharedMessage {
    fn from(message: Message) -> Self {
        Self::new(message)
    }
}

impl PartialEq for SharedMessage {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.0.message == other.0.message
    }
}

impl Eq for SharedMessage {}

impl PartialEq<Message> for SharedMessage {
    fn eq(&self, other: &Message) -> bool {
        self.0.message == *other
    }
}

impl std::fmt::Debug for SharedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.message.fmt(f)
    }
}

/// A provider wire format whose message encodings a [`SharedMessage`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI Chat Completions (and compatible servers).
    OpenAiChat,
    /// The Anthropic Messages API.
    Anthropic,
}

/// The body a provider of `format` sends for `request` (a compatible server's `max_tokens`;
/// Anthropic's default output cap), assembled from the messages' kept encodings.
pub fn request_body(format: WireFormat, request: &crate::ModelRequest) -> String {
    match format {
        WireFormat::OpenAiChat => {
            crate::openai::request_bytes(request, crate::openai::MaxTokensField::MaxTokens)
        }
        WireFormat::Anthropic => {
            crate::anthropic::request_bytes(request, crate::anthropic::DEFAULT_MAX_TOKENS)
        }
    }
}

/// The same body encoded whole, nothing kept or reused: what [`request_body`] must equal.
pub fn request_body_whole(format: WireFormat, request: &crate::ModelRequest) -> String {
    let body = match format {
        WireFormat::OpenAiChat => {
            crate::openai::request_value(request, crate::openai::MaxTokensField::MaxTokens)
        }
        WireFormat::Anthropic => {
            crate::anthropic::request_value(request, crate::anthropic::DEFAULT_MAX_TOKENS)
        }
    };
    body.to_string()
}

/// Shares each message of `messages`.
pub fn shared(messages: impl IntoIterator<Item = Message>) -> Vec<SharedMessage> {
    messages.into_iter().map(SharedMessage::new).collect()
}

/// The compact JSON text of `skeleton` (an object) with the value of its key `key` replaced by
/// the array of the JSON texts `items`: byte for byte what `serde_json::to_vec` gives for the
/// skeleton with the items' values under `key`. A skeleton that is not an object, or has no
/// `key`, is written as it is.
pub(crate) fn assemble<'a>(
    skeleton: &Value,
    key: &str,
    items: impl IntoIterator<Item = &'a str>,
    out: &mut String,
) {
    let Value::Object(map) = skeleton else {
        out.push_str(&skeleton.to_string());
        return;
    };
    let mut items = Some(items);
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        match (k == key).then(|| items.take()).flatten() {
            Some(items) => {
                out.push('[');
                for (j, item) in items.into_iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str(item);
                }
                out.push(']');
            }
            None => out.push_str(&v.to_string()),
        }
    }
    out.push('}');
}

/// A request with every kind of history content, for the byte-identity tests of each format.
#[cfg(test)]
pub(crate) fn every_kind() -> crate::ModelRequest {
    use agentlane_core::{ThinkingLevel, ToolCall};
    let call = |id: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: arguments.into(),
    };
    let result = |id: &str, content: &str, is_error: bool| Message::Tool {
        tool_call_id: id.into(),
        name: "get_weather".into(),
        content: content.into(),
        is_error,
    };
    let assistant =
        |content: &str, reasoning: Option<&str>, calls: Vec<ToolCall>| Message::Assistant {
            content: content.into(),
            reasoning: reasoning.map(Into::into),
            tool_calls: calls,
            model: Some("p/m".into()),
        };
    crate::ModelRequest {
        model: "m-1".into(),
        system: "Be \"terse\".\n\tRules: ✓".into(),
        messages: shared([
            Message::Compaction {
                summary: "Earlier: the user asked about Paris.".into(),
                through_seq: 7,
                tokens_before: 900,
                tokens_after: 40,
            },
            Message::user("weather and time in Zürich? 🌦 </script> \u{0}"),
            assistant(
                "Checking both.",
                Some("two calls"),
                vec![call("c1", r#"{"city":"Zürich"}"#), call("c2", "")],
            ),
            result("c1", "21C, sunny", false),
            // A result the pairing repair filled in for a call that never completed.
            result("c2", "aborted: the tool call did not complete", true),
            assistant("", Some("only thinking"), vec![]),
            assistant("", None, vec![call("c3", "not json")]),
            result("c3", "{\"nested\": [1, 2]}", false),
            assistant("It is 21C.", None, vec![]),
            Message::user("thanks"),
            assistant("", None, vec![call("c4", "[1]")]),
            result("c4", "", true),
        ]),
        tools: vec![crate::ToolSpec {
            name: "get_weather".into(),
            description: "The weather in a city.".into(),
            parameters: serde_json::json!({"properties": {"city": {"type": "string"}}}),
        }]
        .into(),
        max_output_tokens: Some(512),
        thinking: Some(ThinkingLevel::Low),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_assembled_object_is_the_full_encoding() {
        let items = [
            json!({"role": "user", "content": "a \"quoted\" é"}),
            json!(null),
        ];
        let texts: Vec<String> = items.iter().map(Value::to_string).collect();
        let full = json!({"z": 1, "messages": items, "a": {"b": [1, 2]}});
        let skeleton = json!({"z": 1, "messages": null, "a": {"b": [1, 2]}});
        let mut out = String::new();
        assemble(
            &skeleton,
            "messages",
            texts.iter().map(String::as_str),
            &mut out,
        );
        assert_eq!(out.as_bytes(), serde_json::to_vec(&full).unwrap());
    }

    #[test]
    fn a_clone_shares_the_message_and_its_encodings() {
        let a = SharedMessage::new(Message::user("héllo"));
        let b = a.clone();
        assert!(a.ptr_eq(&b));
        assert_eq!(a.text_chars(), 5);
        assert!(std::ptr::eq(a.openai_chat(), b.openai_chat()));
        let c = SharedMessage::new(Message::user("héllo"));
        assert_eq!(a, c);
        assert!(!a.ptr_eq(&c));
    }
}
