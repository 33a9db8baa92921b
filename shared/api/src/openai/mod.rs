//! The OpenAI-compatible endpoint: OpenAI's SDKs (and anything that speaks Chat Completions or
//! Responses) talk to agentlane's agents with `base_url = <agentlane>/v1` and an agentlane API
//! key.
//!
//! - `GET /v1/models`: each agent of the tenant is a model ([`models`]);
//! - `POST /v1/chat/completions` ([`chat`]) and `POST /v1/responses` ([`responses`]): one
//!   request is one turn ([`turn`] says how a conversation becomes one), accepted as
//!   `POST /v1/agent` accepts turns; the answer waits for the run, or streams its assistant
//!   deltas as they are committed ([`stream`]);
//! - errors in OpenAI's shape and status codes ([`error`]).
//!
//! Client tools ride on durable pauses: a chat request's `tools` are the turn's client tools,
//! a pause is its `tool_calls` answer, and the `role: "tool"` results that end the next request
//! answer the paused run ([`turn::ToolResults`]). The Responses API refuses tools.

pub(crate) mod chat;
pub(crate) mod error;
pub(crate) mod models;
pub(crate) mod responses;
pub(crate) mod stream;
pub(crate) mod turn;

pub(crate) use error::{OpenAiError, OpenAiErrorBody, OpenAiTenant};
