//! The cron Lambda's handler. EventBridge invokes it every minute with a scheduled event.
//!
//! # Firing on time from a once-a-minute schedule
//!
//! An invocation does not fire what is due and return: it stays for the minute its event
//! stands for and ticks every `AGENTLANE_CRON_TICK_MS` (1 s) until the next invocation is due
//! (the event's `time` + 60 s, or the Lambda deadline minus a margin, whichever comes first).
//! Each tick reads the jobs due now from the `cronDue` index and claims each slot with a
//! conditional write on the job's version, so a job due at 12:00:37 fires at 12:00:37–38, not
//! at the next minute — including jobs created after the invocation started. Consecutive
//! invocations may overlap by a moment (a late start, a retry): the conditional claim lets only
//! one of them fire a slot. The function's timeout (`CronTimeout`, default 120 s) leaves room for
//! the minute plus the last deliveries.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use agentlane_core::Clock;
use agentlane_host::metrics::EmfWriter;
use agentlane_scheduler::{TickReport, Ticker};
use agentlane_supervisor::{Supervisor, SweepReport};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long an invocation ticks at most: the schedule's period.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Stop ticking this long before the Lambda deadline.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);
/// Waiting for webhook deliveries before returning, at most.
pub const DELIVERY_GRACE: Duration = Duration::from_secs(3);

/// What one invocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationReport {
    /// The schedule time of the event (its `time` field).
    pub scheduled_for: String,
    /// Ticks made.
    pub ticks: u32,
    /// Runs fired, one per claimed slot.
    pub jobs_fired: u32,
    /// Their run ids.
    pub fired_run_ids: Vec<String>,
    /// Slots skipped because the job's previous fire still ran.
    pub slots_skipped: u32,
    /// Fires whose end was recorded on their job.
    pub runs_ended: u32,
    /// Fires recorded `timeout` by the scheduler.
    pub runs_timed_out: u32,
    /// Claims another ticker won.
    pub claims_lost: u32,
    /// The stuck-session sweep run at the start of the invocation (SPEC §10): sessions swept,
    /// diagnosed, stalled runs aborted, stuck sessions recovered. Zero without a supervisor.
    pub sweep: SweepReport,
}

impl InvocationReport {
    fn new(scheduled_for: String, report: TickReport) -> Self {
        Self {
            scheduled_for,
            ticks: report.ticks,
            jobs_fired: report.fired.len() as u32,
            fired_run_ids: report.fired.iter().map(|r| r.to_string()).collect(),
            slots_skipped: report.skipped,
            runs_ended: report.ended,
            runs_timed_out: report.timed_out,
            claims_lost: report.conflicts,
            sweep: SweepReport::default(),
        }
    }
}

/// Why an invocation refused its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TickError {
    /// The event's `detail-type` is not `Scheduled Event`; holds the one received.
    #[error("not a scheduled event (detail-type {0:?})")]
    NotScheduled(String),
    /// The scheduled event carries no `time`.
    #[error("the scheduled event has no time")]
    MissingTime,
}

impl From<TickError> for lambda_runtime::Diagnostic {
    fn from(error: TickError) -> Self {
        let error_type = match error {
            TickError::NotScheduled(_) => "NotScheduled",
            TickError::MissingTime => "MissingTime",
        };
        lambda_runtime::Diagnostic {
            error_type: error_type.to_owned(),
            error_message: error.to_string(),
        }
    }
}

/// The handler: a ticker over the AWS backends and the clock it reads. Built once per cold
/// start; each invocation borrows it.
#[derive(Clone)]
pub struct CronFunction {
    ticker: Ticker,
    clock: Arc<dyn Clock>,
    supervisor: Option<Arc<Supervisor>>,
    emf: EmfWriter,
}

impl CronFunction {
    /// A handler over `ticker`.
    pub fn new(ticker: Ticker, clock: Arc<dyn Clock>) -> Self {
        Self {
            ticker,
            clock,
            supervisor: None,
            emf: EmfWriter::from_env(),
        }
    }

    /// Where the invocation's metrics go (default: EMF lines on stdout).
    pub fn with_emf(mut self, emf: EmfWriter) -> Self {
        self.emf = emf;
        self
    }

    /// Sweeps stuck sessions once per invocation (every minute) with `supervisor`.
    pub fn with_supervisor(mut self, supervisor: Arc<Supervisor>) -> Self {
        self.supervisor = Some(supervisor);
        self
    }

    /// One invocation: ticks from now until `event.time + WINDOW` or `deadline_ms -
    /// DEADLINE_MARGIN` (the Lambda deadline, ms since epoch), whichever is first — at least one
    /// tick even for a late event — then waits briefly for webhook deliveries.
    pub async fn handle(
        &self,
        event: EventBridgeEvent<serde_json::Value>,
        deadline_ms: Option<u64>,
    ) -> Result<InvocationReport, TickError> {
        if event.detail_type != "Scheduled Event" {
            return Err(TickError::NotScheduled(event.detail_type));
        }
        let time = event.time.ok_or(TickError::MissingTime)?;
        let scheduled_ms = u64::try_from(time.timestamp_millis()).unwrap_or(0);
        let mut until = scheduled_ms.saturating_add(WINDOW.as_millis() as u64);
        if let Some(deadline) = deadline_ms {
            until = until.min(deadline.saturating_sub(DEADLINE_MARGIN.as_millis() as u64));
        }
        let now = self.clock.now_ms();
        tracing::info!(
            scheduled_for = %time.to_rfc3339(),
            window_ms = until.saturating_sub(now),
            "cron invocation"
        );
        let sweep = match &self.supervisor {
            Some(supervisor) => supervisor.sweep().await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "stuck-session sweep failed; the next minute retries");
                SweepReport::default()
            }),
            None => SweepReport::default(),
        };
        let report = self.ticker.run(CancellationToken::new(), Some(until)).await;
        self.ticker.drain_deliveries(DELIVERY_GRACE).await;
        let mut report = InvocationReport::new(time.to_rfc3339(), report);
        report.sweep = sweep;
        tracing::info!(
            fired = report.jobs_fired,
            skipped = report.slots_skipped,
            ended = report.runs_ended,
            lost = report.claims_lost,
            swept = report.sweep.swept,
            recovered = report.sweep.recovered,
            aborted = report.sweep.aborted,
            sessions_expired = report.sweep.retention.expired,
            "cron invocation done"
        );
        // Cron fires, stuck sessions, and the turns' metrics, as EMF log lines.
        self.emf.flush(self.clock.now_ms());
        Ok(report)
    }
}
