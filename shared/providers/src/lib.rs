//! Model providers behind one seam, [`ModelProvider`]: a streaming call that yields normalised
//! [`StreamEvent`]s. Adapters: [`openai::OpenAiProvider`] (OpenAI Chat Completions and any
//! OpenAI-compatible server via its base URL), [`anthropic::AnthropicProvider`] (the Anthropic
//! Messages API and compatible servers) and [`demo::DemoModel`] (offline, deterministic).
//!
//! Errors are classified into [`FailoverReason`]s so the runner's loop decides retry vs stop in
//! one place.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod accumulate;
pub mod anthropic;
pub mod config;
pub mod demo;
mod endpoint;
pub mod error;
pub mod history;
pub mod openai;
pub mod redact;
pub mod transport;

pub use accumulate::{AssistantTurn, StreamAccumulator};
pub use config::ConfigError;
pub use error::{FailoverReason, ProviderError, RateLimitWindow};
pub use history::SharedMessage;

use agentlane_core::{ThinkingLevel, Usage};
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls the tool by; unique among the request's tools.
    pub name: String,
    /// What the tool does, as the model reads it.
    pub description: String,
    /// The JSON schema of the tool's arguments (an `object` schema).
    pub parameters: serde_json::Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model name as the provider knows it (without the `provider/` prefix).
    pub model: String,
    /// The system prompt; empty for none.
    pub system: String,
    /// The conversation sent, oldest first (user, assistant and tool-result messages), shared
    /// with the history it comes from: each message is encoded for a provider once.
    pub messages: Vec<SharedMessage>,
    /// The tools the model may call; empty offers none. Shared: an agent's specs are built
    /// once, not per request.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Cap on the answer's output tokens; `None` leaves the provider's default.
    pub max_output_tokens: Option<u32>,
    /// How hard a reasoning model should think (`None` or `off`: nothing is asked). OpenAI
    /// sends it as `reasoning_effort`, Anthropic as an extended-thinking `budget_tokens`
    /// (see [`anthropic::thinking_budget`]); the demo model has no reasoning mode.
    pub thinking: Option<ThinkingLevel>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model stopped to have its tool calls run.
    ToolCalls,
    /// The output hit the token cap (`max_output_tokens` or the model's own).
    Length,
    /// The provider's content filter cut the answer.
    ContentFilter,
    /// Any other reason, as the provider named it.
    Other(String),
}

/// What a provider stream yields, in order. Tool calls are identified by `index` (their position
/// in the assistant message); their arguments arrive as JSON text fragments.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A fragment of the visible answer text.
    TextDelta(String),
    /// A fragment of the model's reasoning (not shown as the answer).
    ReasoningDelta(String),
    /// A tool call begins (a later start with the same `index` continues its id and name).
    ToolCallStart {
        /// The call's position in the assistant message.
        index: usize,
        /// The provider's id for the call (may be empty; normalisation assigns one).
        id: String,
        /// The tool's name (or a fragment of it).
        name: String,
    },
    /// A fragment of a tool call's arguments (JSON text).
    ToolCallArgumentsDelta {
        /// The call's position in the assistant message.
        index: usize,
        /// The next piece of the arguments' JSON text.
        delta: String,
    },
    /// Token usage of the response so far (the latest report replaces earlier ones).
    Usage(Usage),
    /// The last event of a complete response.
    Finished(FinishReason),
    /// Bytes arrived from the provider that completed no event (an SSE comment or keep-alive,
    /// part of an event): the stream is alive. The idle watchdog counts it; everything else
    /// ignores it.
    KeepAlive,
    /// The response's assistant message has a text part that stayed empty (OpenAI
    /// `"content": ""`, an Anthropic text block with no text), and nothing else: no text,
    /// reasoning or tool call. Sent once, before `Finished`. It tells an empty answer (an
    /// assistant message that shows nothing) from a response with no assistant message at all.
    EmptyText,
}

/// The events of one model response, or the error that ended it.
pub type ModelStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A model provider. `stream` returns once the response has started (HTTP status known); the
/// stream then yields events until `Finished`, an error, or cancellation. Cancelling `cancel`
/// drops the underlying HTTP request.
#[async_trait]
pub trait ModelProvider: Send + Sync + 'static {
    /// The provider's name, the part before `/` in `provider/model`.
    fn name(&self) -> &str;

    /// Whether the provider runs on the user's own hardware (longer idle timeout applies).
    fn self_hosted(&self) -> bool {
        false
    }

    /// The output-token cap this provider sends for `request` (`None`: it sends none, and the
    /// answer's length is the provider's to choose). A budget reserves exactly this.
    fn output_cap(&self, request: &ModelRequest) -> Option<u32> {
        request.max_output_tokens
    }

    /// Starts a model call; returns once the response has started (HTTP status known).
    /// A refusal before any output (an HTTP error status) is an `Err` here; a failure later
    /// is an `Err` item of the stream.
    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError>;
}
