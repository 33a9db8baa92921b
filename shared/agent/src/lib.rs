//! The runner: everything between "a lane message arrived" and "the run is terminal".
//!
//! - [`worker`]: takes lane deliveries, keeps them invisible while working, acks or hands back.
//! - [`lock`]: the session write lock (acquire with retry, lease heartbeat).
//! - [`runner`]: a pickup of a run and its loop of attempts — one driver calling named steps
//!   (request, attempt, retry action, answer, tool round, compaction, finish).
//! - [`retry`]: every stop/continue decision of the loop, pure and serializable: budgets, the
//!   idle-timeout breaker, loop guards. "What happens on a 429" is in [`retry::decide`].
//! - [`writer`]: every fenced write of one run (transcript, events, the run record it owns,
//!   checkpoints), split into parts that each fit one store transaction.
//! - [`context`]: what the model sees — history, token precheck, compaction, pairing repair.
//! - [`answer`]: what the model said — tool-call normalisation, reply shaping.
//! - [`models`]: model names to providers, auth profiles, fallbacks, cooldowns.
//! - [`hooks`]: the plugin hooks of SPEC §11.
//! - [`recovery`]: ending a run its runner left behind (the supervisor's one way in).
//! - [`audit`], [`config`]: event previews and the audit log; the runner's settings.
//!
//! Nothing here knows AWS or SQLite: the runner works on `agentlane_core::{Store, LaneQueue}`.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod agents;
pub mod answer;
pub mod audit;
pub mod config;
pub mod context;
pub mod hooks;
pub mod lock;
pub mod models;
pub mod recovery;
pub mod retry;
pub mod runner;
pub mod worker;
pub mod writer;

pub use config::RunnerConfig;
pub use models::ModelRouter;
pub use runner::{Runner, RunnerError, SKIPPED_FOR_STEER, TurnExit};
pub use worker::{LaneWorker, Settlement};
