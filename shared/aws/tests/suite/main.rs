//! The AWS backends' integration tests on the emulator (`AWS_ENDPOINT_URL`, default
//! `http://127.0.0.1:4566`), one binary: the shared conformance suite on DynamoDB and SQS FIFO,
//! DynamoDB- and SQS-specific behaviour, and resource set-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Counts the heap, for the memory bounds of `pages`.
#[global_allocator]
static ALLOC: agentlane_conformance::alloc::CountingAlloc =
    agentlane_conformance::alloc::CountingAlloc;

mod backfill;
mod common;
mod conformance;
mod cron_retention;
mod dynamo_store;
mod pages;
mod processing_index;
mod retention_resume;
mod secrets;
mod setup;
mod sqs_queue;
mod tenant_secrets;
