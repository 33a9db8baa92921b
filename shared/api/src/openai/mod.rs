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
//! Client tools are refused until the durable-pause feature is wired in
//! ([`turn::client_tools_refused`] is the one place that refuses them).

pub mod chat;
pub mod error;
pub mod models;
pub mod responses;
pub mod stream;
pub mod turn;

pub use error::{OpenAiError, OpenAiErrorBody, OpenAiTenant};
