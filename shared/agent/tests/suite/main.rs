//! The agent crate's integration tests, one binary: the runner against the real embedded store
//! driven by a scripted model (unit-level: the HTTP-level scenarios live in the workspace
//! `tests/` package), and the hooks of SPEC §11.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod collect;
mod commit_parts;
mod context;
mod delivered_lock;
mod hook_failures;
mod hook_merges;
mod hook_support;
mod interrupt;
mod order;
mod poison;
mod retry_loop;
mod runner_hooks;
mod scheduled;
mod start_hold;
mod steer;
mod support;
mod tool_calls;
mod transcript_cache;
mod turns;
mod webhooks;
