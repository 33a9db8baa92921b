//! Model providers behind one seam, [`ModelProvider`]: a streaming call that yields normalised
//! [`StreamEvent`]s. Adapters: [`openai::OpenAiProvider`] (OpenAI Chat Completions and any
//! OpenAI-compatible server via its base URL), [`anthropic::AnthropicProvider`] (the Anthropic
//! Messages API and compatible servers) and [`demo::DemoModel`] (offline, deterministic).
//!
//! Errors are classified into [`FailoverReason`]s so the runner's loop decides retry vs stop in
//! one place.
#![warn(unreachable_pub)]

pub mod accumulate;
pub mod anthropic;
pub mod config;
pub mod demo;
mod endpoint;
pub mod error;
pub mod openai;
pub mod redact;
pub mod transport;

pub use accumulate::{AssistantTurn, StreamAccumulator};
pub use config::ConfigError;
pub use error::{FailoverReason, ProviderError, RateLimitWindow};

use agentlane_core::{Message, ThinkingLevel, Usage};
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model name as the provider knows it (without the `provider/` prefix).
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
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
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other(String),
}

/// What a provider stream yields, in order. Tool calls are identified by `index` (their position
/// in the assistant message); their arguments arrive as JSON text fragments.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolCallArgumentsDelta {
        index: usize,
        delta: String,
    },
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

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError>;
}
