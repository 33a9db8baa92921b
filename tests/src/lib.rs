//! End-to-end test harness for agentlane: the real server (`agentlane serve`, built as the
//! `agentlane-under-test` binary of this package) over HTTP, against aimock — a real
//! OpenAI-protocol server answering from fixtures and recording every request.
//!
//! - [`Aimock`]: starts `node tools/aimock/.../dist/cli.js`, exposes its journal (the model
//!   requests the server sent) and runtime fixtures; on drop it checks the tool-call pairing
//!   invariant on every recorded request.
//! - [`Server`]: starts `serve` on a temp data dir with two tenants, can `kill_hard` and
//!   `restart` on the same data dir.
//! - [`Client`]: a small typed client of the HTTP API.
//! - [`Scenario`]: both, wired together.
//! - [`Sdk`]: the official OpenAI SDKs (Python, Node) as clients of the OpenAI-compatible
//!   endpoint, each running a scenario script of `tools/openai-clients`.
//!
//! A missing aimock install is an error (the test fails, never skips): run `scripts/test`, or
//! `npm ci --prefix tools/aimock`.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod aimock;
pub mod client;
pub mod error;
pub mod lambda;
pub mod openai_sdk;
pub mod pairing;
mod plain_http;
mod process;
pub mod scenario;
pub mod server;
pub mod views;

pub use aimock::{Aimock, Fixtures, JournalEntry, ModelRequest, message_text, repo_root};
pub use client::{Client, RawBody, RawResponse, SseEvents};
pub use error::{HarnessError, HarnessResult};
pub use openai_sdk::{SDKS, Sdk};
pub use pairing::{PairingItem, PairingViolation, check_pairing, openai_items, transcript_items};
pub use scenario::Scenario;
pub use server::{
    METRICS_KEY, MODEL, OPENAI_TEST_KEY, Server, ServerOptions, TENANT_A, TENANT_B, Tenant,
    backend_is_aws,
};
pub use views::{
    Accepted, AttemptView, ErrorBody, ErrorDetail, EventsPage, RunView, TranscriptView, WaitReply,
    WaitStatus, assistant_text, is, phase, role,
};
