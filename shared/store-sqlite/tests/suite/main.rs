//! The SQLite backend's integration tests, one binary: the shared conformance suite, the queue's
//! guarantees beyond it, and durability across restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance;
mod connections;
mod cron_retention;
mod fairness;
mod queue_details;
mod restart;
