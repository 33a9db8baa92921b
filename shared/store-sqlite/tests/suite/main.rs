//! The SQLite backend's integration tests, one binary: the shared conformance suite, the queue's
//! guarantees beyond it, and durability across restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Counts the heap, for the memory bounds of `pages`.
#[global_allocator]
static ALLOC: agentlane_conformance::alloc::CountingAlloc =
    agentlane_conformance::alloc::CountingAlloc;

mod conformance;
mod connections;
mod cron_retention;
mod fairness;
mod pages;
mod queue_details;
mod queued_accept;
mod restart;
mod sealed_at_rest;
