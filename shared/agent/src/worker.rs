//! Lane workers: receive deliveries, keep them invisible while the turn runs, then ack or hand
//! them back. The same [`LaneWorker::process`] serves the local server and the runner Lambda.

use crate::runner::{Runner, TurnExit};
use agentlane_core::backoff::jittered;
use agentlane_core::{Delivery, Lane, LaneMessage, LaneQueue, TurnMessage};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What to do with a delivery after processing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Delete the message: the run is terminal.
    Done,
    /// Make the message visible again now (the run continues later; the lane stays blocked).
    HandBack,
    /// Leave the message as it is; it returns when its visibility ends.
    Leave,
    /// Make the message visible again after this delay (its run must wait for an earlier one).
    Retry(Duration),
}

/// Pulls lane messages and runs their turns.
#[derive(Clone)]
pub struct LaneWorker {
    queue: Arc<dyn LaneQueue>,
    runner: Runner,
}

impl LaneWorker {
    pub fn new(queue: Arc<dyn LaneQueue>, runner: Runner) -> Self {
        Self { queue, runner }
    }

    /// Runs one delivery's turn, extending its visibility every third of the visibility timeout
    /// while it works. Does not ack: the caller does (the Lambda runtime acks by success).
    ///
    /// Everything it logs carries the run, tenant and receive count (a `turn` span: JSON logs
    /// show them on every line).
    pub async fn process(
        &self,
        delivery: &Delivery,
        shutdown: &CancellationToken,
    ) -> DeliveryOutcome {
        use tracing::Instrument as _;
        let body = &delivery.message.body;
        let span = tracing::info_span!(
            "turn",
            run_id = %body.run_id,
            tenant = %body.tenant,
            receive_count = delivery.receive_count,
        );
        self.process_in_span(delivery, shutdown)
            .instrument(span)
            .await
    }

    async fn process_in_span(
        &self,
        delivery: &Delivery,
        shutdown: &CancellationToken,
    ) -> DeliveryOutcome {
        let visibility = self.runner.config().visibility_timeout;
        let keepalive = CancellationToken::new();
        let _stop_keepalive = keepalive.clone().drop_guard();
        {
            let (queue, receipt, keepalive) = (
                self.queue.clone(),
                delivery.receipt.clone(),
                keepalive.clone(),
            );
            tokio::spawn(async move {
                let period = (visibility / 3).max(Duration::from_millis(50));
                loop {
                    tokio::select! {
                        _ = keepalive.cancelled() => return,
                        _ = tokio::time::sleep(period) => {}
                    }
                    if let Err(e) = queue.set_visibility(&receipt, visibility).await {
                        tracing::warn!(error = %e, "could not extend message visibility");
                    }
                }
            });
        }
        match self.runner.execute(&delivery.message.body, shutdown).await {
            Ok(TurnExit::Finished(status)) => {
                tracing::info!(run = %delivery.message.body.run_id, status = status.as_str(), "run finished");
                DeliveryOutcome::Done
            }
            Ok(TurnExit::AlreadyDone | TurnExit::Paused) => DeliveryOutcome::Done,
            Ok(TurnExit::FinishedThen(status, next)) => {
                tracing::info!(run = %delivery.message.body.run_id, status = status.as_str(), next = %next.run_id, "a run that paused finished; sending its session's next turn again");
                self.send_next(next, delivery).await;
                DeliveryOutcome::Done
            }
            Ok(TurnExit::HandBack) => DeliveryOutcome::HandBack,
            Ok(TurnExit::Abandoned) => DeliveryOutcome::Leave,
            Ok(TurnExit::OutOfOrder) => {
                DeliveryOutcome::Retry(jittered(self.runner.config().out_of_order_pause))
            }
            Ok(TurnExit::BehindUnsent(earlier)) => self.move_behind(earlier, delivery).await,
            Err(e) => {
                tracing::error!(run = %delivery.message.body.run_id, error = %e, "turn failed; the message will be redelivered");
                DeliveryOutcome::Leave
            }
        }
    }

    /// Sends the lane message of the run after one that paused (it may have been parked while
    /// the paused run waited). A failed send is logged: the supervisor's pending sweep sends a
    /// lost message again; a duplicate runs nothing twice.
    async fn send_next(&self, next: TurnMessage, delivery: &Delivery) {
        let message = LaneMessage {
            lane: delivery.message.lane.clone(),
            dedup_id: format!("{}:after:{}", next.run_id, delivery.message.body.run_id),
            body: next,
        };
        if let Err(e) = self.queue.enqueue(&message).await {
            tracing::warn!(run = %message.body.run_id, error = %e, "could not send the turn after a paused run; the supervisor will");
        }
    }

    /// Sends again the lane message of an earlier run that was never picked up (its first
    /// enqueue probably never happened), then the delivered message behind it, and acks the
    /// delivered copy (`Done`); if either send fails, the delivery is handed back instead. New
    /// dedup ids: the queue may remember the old ones. Should the earlier message exist after
    /// all, the duplicate delivery runs nothing twice (the runner checks order and state).
    async fn move_behind(&self, earlier: TurnMessage, delivery: &Delivery) -> DeliveryOutcome {
        let Some(key) = earlier.session_key.clone() else {
            return DeliveryOutcome::HandBack;
        };
        let stamp = uuid::Uuid::new_v4().simple().to_string();
        let head = LaneMessage {
            lane: Lane::for_session(&earlier.tenant, &key),
            dedup_id: format!("{}:unsent:{stamp}", earlier.run_id),
            body: earlier,
        };
        if let Err(e) = self.queue.enqueue(&head).await {
            tracing::warn!(run = %head.body.run_id, error = %e, "could not send again the lane message of a run never picked up");
            return DeliveryOutcome::HandBack;
        }
        let again = LaneMessage {
            lane: delivery.message.lane.clone(),
            dedup_id: format!("{}:behind:{stamp}", delivery.message.body.run_id),
            body: delivery.message.body.clone(),
        };
        if let Err(e) = self.queue.enqueue(&again).await {
            tracing::warn!(run = %again.body.run_id, error = %e, "could not move a turn behind an earlier one");
            return DeliveryOutcome::HandBack;
        }
        tracing::warn!(
            run = %head.body.run_id, behind = %again.body.run_id,
            "an earlier run of the session was never picked up: its lane message was sent again, this turn after it"
        );
        DeliveryOutcome::Done
    }

    /// Applies an outcome to the queue (ack, or hand back).
    pub async fn settle(&self, delivery: &Delivery, outcome: &DeliveryOutcome) {
        let result = match outcome {
            DeliveryOutcome::Done => self.queue.ack(&delivery.receipt).await,
            DeliveryOutcome::HandBack => {
                self.queue
                    .set_visibility(&delivery.receipt, Duration::ZERO)
                    .await
            }
            DeliveryOutcome::Retry(delay) => {
                self.queue.set_visibility(&delivery.receipt, *delay).await
            }
            DeliveryOutcome::Leave => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, ?outcome, "could not settle a delivery");
        }
    }

    /// Receives and processes deliveries one at a time until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let visibility = self.runner.config().visibility_timeout;
        let wait = self.runner.config().receive_wait;
        while !shutdown.is_cancelled() {
            let received = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = self.queue.receive(1, visibility, wait) => r,
            };
            match received {
                Ok(deliveries) if deliveries.is_empty() && wait.is_zero() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(deliveries) => {
                    for delivery in deliveries {
                        let outcome = self.process(&delivery, &shutdown).await;
                        self.settle(&delivery, &outcome).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "receive failed; retrying shortly");
                    tokio::time::sleep(jittered(Duration::from_millis(500))).await;
                }
            }
        }
    }
}
