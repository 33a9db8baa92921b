//! One invocation of the runner function: deadline → cancellation → hand-back.

use crate::handle_batch;
use agentlane_agent::LaneWorker;
use agentlane_core::{Clock, LaneQueue};
use agentlane_host::metrics::EmfWriter;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The runner function: the lane worker, the queue its records come from, the clock, and how
/// long before the invocation's deadline running turns are handed back.
#[derive(Clone)]
pub struct RunnerFunction {
    worker: LaneWorker,
    queue: Arc<dyn LaneQueue>,
    clock: Arc<dyn Clock>,
    handback_margin: Duration,
    emf: EmfWriter,
}

impl RunnerFunction {
    /// A handler running turns with `worker`; turns still running `handback_margin` before the
    /// deadline are cancelled and their records handed back to `queue`.
    pub fn new(
        worker: LaneWorker,
        queue: Arc<dyn LaneQueue>,
        clock: Arc<dyn Clock>,
        handback_margin: Duration,
    ) -> Self {
        Self {
            worker,
            queue,
            clock,
            handback_margin,
            emf: EmfWriter::from_env(),
        }
    }

    /// Where the invocation's metrics go (default: EMF lines on stdout).
    pub fn with_emf(mut self, emf: EmfWriter) -> Self {
        self.emf = emf;
        self
    }

    /// Handles one invocation whose deadline is `deadline_ms` (milliseconds since the epoch, as
    /// the Lambda context gives it). At `deadline_ms - handback_margin` every running turn is
    /// asked to stop: it keeps its state, its record is made visible again at once and reported
    /// failed with the rest of its group (the next invocation resumes it); finished records are
    /// reported done.
    pub async fn handle(&self, event: SqsEvent, deadline_ms: u64) -> SqsBatchResponse {
        let left = Duration::from_millis(deadline_ms.saturating_sub(self.clock.now_ms()));
        let stop_in = left.saturating_sub(self.handback_margin);
        let shutdown = CancellationToken::new();
        if stop_in.is_zero() {
            // Already inside the margin: no turn starts, every record goes back at once.
            shutdown.cancel();
        }
        let timer = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                tokio::time::sleep(stop_in).await;
                if !shutdown.is_cancelled() {
                    tracing::info!("the invocation's deadline is near: handing running turns back");
                    shutdown.cancel();
                }
            }
        });
        let response = handle_batch(event, self.queue.as_ref(), |delivery| {
            let (worker, shutdown) = (&self.worker, &shutdown);
            async move { worker.process(&delivery, shutdown).await }
        })
        .await;
        timer.abort();
        // The invocation's metrics (turns, attempts, queue age, ...) as EMF log lines.
        self.emf.flush(self.clock.now_ms());
        response
    }
}
