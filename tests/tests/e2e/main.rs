//! End-to-end scenarios: the real `agentlane serve` over HTTP, against aimock answering as an
//! OpenAI-compatible model. Each scenario starts its own aimock and server (free ports, temp
//! data dir), narrates GIVEN / WHEN / THEN, and asserts what a user would notice. aimock's
//! drop checks the tool-call pairing invariant on every model request of every scenario.
//!
//! All modules link into this one binary to save link time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod abort;
mod attempt;
mod auth_and_tenants;
mod compaction;
mod crash_recovery;
mod cron;
mod early_end;
mod edge_limits;
mod events_sse;
mod harness;
mod idempotency;
mod lanes;
mod order;
mod queue_modes;
mod retry_loop;
mod supervisor;
mod support;
mod text_turn;
mod tool_round_trip;
mod validation;
mod wait;
mod wide_tool_round;
