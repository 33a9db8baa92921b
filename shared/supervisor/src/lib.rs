//! The supervisor (SPEC §10): stuck sessions, poison turns that reached a dead letter.
//!
//! - [`classify`]: `session.long_running` / `session.stalled` / `session.stuck` for one
//!   processing session, with the thresholds (`AGENTLANE_STUCK_WARN_MS`,
//!   `AGENTLANE_STUCK_ABORT_MS`).
//! - [`Supervisor::sweep`] (feature `sweep`, on by default): one sweep over the processing sessions (an index query, never a
//!   scan): diagnostics logged with back-off, stalled runs aborted, stuck sessions recovered
//!   under the session lock; [`Supervisor::reconcile_dead_letter`] for a dead-lettered turn.
//! - [`RetentionSweep`]: sessions past their tenant's retention deleted (issue 24), a bounded
//!   pass at the end of every sweep.
//! - [`run_every`]: the sweep on a timer (`serve`, every `AGENTLANE_SWEEP_INTERVAL_MS`); the
//!   cron Lambda calls [`Supervisor::sweep`] once per invocation.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod classify;
pub mod dead_letters;
pub mod retention;
#[cfg(feature = "sweep")]
pub mod sweep;

pub use classify::{
    Diagnostic, DiagnosticClass, QUEUED_WITHOUT_RUN, Thresholds, classify, classify_pending,
};
pub use dead_letters::{DeadLetterSource, DeadTurn};
pub use retention::{RetentionBudget, RetentionReport, RetentionSweep};
#[cfg(feature = "sweep")]
pub use sweep::{MAX_REDRIVES, SWEEP_LIMIT, Supervisor, SweepReport};

#[cfg(feature = "sweep")]
use std::sync::Arc;
use std::time::Duration;
#[cfg(feature = "sweep")]
use tokio_util::sync::CancellationToken;

/// `serve`'s default sweep period (`AGENTLANE_SWEEP_INTERVAL_MS`).
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// Sweeps every `interval` until `shutdown`; a failed sweep is logged and the next one runs.
#[cfg(feature = "sweep")]
pub async fn run_every(
    supervisor: Arc<Supervisor>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        match supervisor.sweep().await {
            Ok(report) if report.swept > 0 || report.retention.expired > 0 => {
                tracing::info!(?report, "sweep")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweep failed; the next one retries"),
        }
    }
}
