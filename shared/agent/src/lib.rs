//! The runner: everything between "a lane message arrived" and "the run is terminal".
//!
//! - [`worker`]: takes lane deliveries, keeps them invisible while working, acks or hands back.
//! - [`lock`]: the session write lock (acquire with retry, lease heartbeat).
//! - [`writer`]: every fenced write of one run (transcript, events, run record), with event seq
//!   numbering and assistant-delta coalescing.
//! - [`turn`]: the turn loop — model attempts, tool rounds, recovery after a crash, abort and
//!   timeouts; [`failover`] decides retry, rotation, fallback or stop in one place.
//! - [`attempt`]: one streamed model call with the idle watchdog.
//! - [`tool_exec`]: runs a batch of tool calls concurrently, results in call order.
//! - [`repair`]: tool_use/tool_result pairing repair (pure).
//! - [`reply`]: final payload shaping (pure).
//!
//! Nothing here knows AWS or SQLite: the runner works on `agentlane_core::{Store, LaneQueue}`.

pub mod attempt;
pub mod audit;
pub mod compaction;
pub mod config;
pub mod failover;
pub mod history;
pub mod hooks;
pub mod lock;
pub mod models;
pub mod normalize;
pub mod precheck;
pub mod repair;
pub mod reply;
pub mod tokens;
pub mod tool_exec;
pub mod turn;
pub mod worker;
pub mod writer;

pub use config::RunnerConfig;
pub use models::ModelRouter;
pub use turn::Runner;
pub use worker::{DeliveryOutcome, LaneWorker};
