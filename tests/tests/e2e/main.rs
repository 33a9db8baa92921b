//! End-to-end scenarios: the real `agentlane serve` over HTTP, against aimock answering as an
//! OpenAI-compatible model. Each scenario starts its own aimock and server (free ports, temp
//! data dir), narrates GIVEN / WHEN / THEN, and asserts what a user would notice. aimock's
//! drop checks the tool-call pairing invariant on every model request of every scenario.
//!
//! All modules link into this one binary to save link time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod abort;
mod agents;
mod attempt;
mod auth_and_tenants;
mod aws_requests;
mod budgets;
mod compaction;
mod crash_recovery;
mod crash_soak;
mod cron;
mod data_lifecycle;
mod early_end;
mod edge_limits;
mod events_sse;
mod generated_client;
mod harness;
mod idempotency;
mod keys;
mod lanes;
mod max_size;
mod metrics;
mod oauth_tools;
mod openai;
mod openai_output_cap;
mod openclaw_clients;
mod order;
mod pauses;
mod queue_modes;
mod rate_limits;
mod redaction;
mod retry_loop;
mod run_bounds;
mod secret_crash;
mod streaming;
mod supervisor;
mod support;
mod tenant_fairness;
mod tenant_secrets;
mod text_turn;
mod thinking;
mod tool_round_trip;
mod usage_pages;
mod validation;
mod wait;
mod wide_tool_round;
