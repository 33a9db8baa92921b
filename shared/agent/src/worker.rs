//! Lane workers: receive deliveries, keep them invisible while the turn runs, then settle them
//! ([`Settlement`]: ack, or visible again after a delay). The same [`LaneWorker::process`]
//! serves the local server and the runner Lambda; each host applies its settlement.

use crate::config::RunnerConfig;
use crate::runner::{Runner, TurnExit};
use agentlane_core::backoff::jittered;
use agentlane_core::{Delivery, Lane, LaneMessage, LaneQueue, TurnMessage};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a host does with a delivery once its pickup is over: the one vocabulary both hosts
/// apply — the local worker ([`LaneWorker::settle`]) and the runner Lambda's batch handler
/// (which also reports a record it does not ack failed, with the rest of its message group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Delete the message: its run is terminal or parked, or there was nothing to run.
    Ack,
    /// Make the message visible again after this delay; zero: at once (the run continues
    /// later and its lane stays blocked meanwhile).
    VisibleAfter(Duration),
}

impl Settlement {
    /// How a pickup that ended with `exit` is settled (before jitter). For `FinishedThen` and
    /// `BehindUnsent`, once the worker has sent the messages they name.
    pub fn after(exit: &TurnExit, config: &RunnerConfig) -> Self {
        match exit {
            TurnExit::Finished(_)
            | TurnExit::FinishedThen(..)
            | TurnExit::AlreadyDone
            | TurnExit::Paused
            | TurnExit::BehindUnsent(_) => Settlement::Ack,
            TurnExit::HandBack => Settlement::VisibleAfter(Duration::ZERO),
            // Its lock was taken by another writer: whatever that one does, this message comes
            // back soon and finds the run's real state.
            TurnExit::Abandoned => Settlement::after_failure(config),
            TurnExit::OutOfOrder => Settlement::VisibleAfter(config.out_of_order_pause),
        }
    }

    /// How a pickup that failed (a store error; its lock released) is settled: it comes back
    /// after [`RunnerConfig::failed_pickup_pause`], not after the queue's visibility timeout.
    pub fn after_failure(config: &RunnerConfig) -> Self {
        Settlement::VisibleAfter(config.failed_pickup_pause)
    }

    /// The same settlement with a delay jittered ±20 % (zero stays zero).
    pub fn jittered(self) -> Self {
        match self {
            Settlement::VisibleAfter(delay) if !delay.is_zero() => {
                Settlement::VisibleAfter(jittered(delay))
            }
            other => other,
        }
    }
}

/// Pulls lane messages and runs their turns.
#[derive(Clone)]
pub struct LaneWorker {
    queue: Arc<dyn LaneQueue>,
    runner: Runner,
}

impl LaneWorker {
    /// A worker that pulls from `queue` and runs each turn with `runner`.
    pub fn new(queue: Arc<dyn LaneQueue>, runner: Runner) -> Self {
        Self { queue, runner }
    }

    /// Runs one delivery's turn, extending its visibility every third of the visibility timeout
    /// while it works. Does not ack: the caller does (the Lambda runtime acks by success).
    ///
    /// Everything it logs carries the run, tenant and receive count (a `turn` span: JSON logs
    /// show them on every line).
    pub async fn process(&self, delivery: &Delivery, shutdown: &CancellationToken) -> Settlement {
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
    ) -> Settlement {
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
        let config = self.runner.config();
        let body = &delivery.message.body;
        let lock = delivery.lock.clone();
        let exit = match self.runner.execute_delivered(body, lock, shutdown).await {
            Ok(exit) => exit,
            Err(e) => {
                tracing::error!(run = %delivery.message.body.run_id, error = %e, "turn failed; the message comes back shortly");
                return Settlement::after_failure(config).jittered();
            }
        };
        match &exit {
            TurnExit::Finished(status) => {
                tracing::info!(run = %delivery.message.body.run_id, status = status.as_str(), "run finished");
            }
            TurnExit::FinishedThen(status, next) => {
                tracing::info!(run = %delivery.message.body.run_id, status = status.as_str(), next = %next.run_id, "a run that paused finished; sending its session's next turn again");
                self.send_next(next.clone(), delivery).await;
            }
            TurnExit::BehindUnsent(earlier) => {
                if !self.move_behind(earlier.clone(), delivery).await {
                    return Settlement::VisibleAfter(Duration::ZERO);
                }
            }
            TurnExit::AlreadyDone
            | TurnExit::Paused
            | TurnExit::HandBack
            | TurnExit::Abandoned
            | TurnExit::OutOfOrder => {}
        }
        Settlement::after(&exit, config).jittered()
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
    /// delivered copy (`true`); if either send fails, the delivery is handed back instead. New
    /// dedup ids: the queue may remember the old ones. Should the earlier message exist after
    /// all, the duplicate delivery runs nothing twice (the runner checks order and state).
    async fn move_behind(&self, earlier: TurnMessage, delivery: &Delivery) -> bool {
        let Some(key) = earlier.session_key.clone() else {
            return false;
        };
        let stamp = uuid::Uuid::new_v4().simple().to_string();
        let head = LaneMessage {
            lane: Lane::for_session(&earlier.tenant, &key),
            dedup_id: format!("{}:unsent:{stamp}", earlier.run_id),
            body: earlier,
        };
        if let Err(e) = self.queue.enqueue(&head).await {
            tracing::warn!(run = %head.body.run_id, error = %e, "could not send again the lane message of a run never picked up");
            return false;
        }
        let again = LaneMessage {
            lane: delivery.message.lane.clone(),
            dedup_id: format!("{}:behind:{stamp}", delivery.message.body.run_id),
            body: delivery.message.body.clone(),
        };
        if let Err(e) = self.queue.enqueue(&again).await {
            tracing::warn!(run = %again.body.run_id, error = %e, "could not move a turn behind an earlier one");
            return false;
        }
        tracing::warn!(
            run = %head.body.run_id, behind = %again.body.run_id,
            "an earlier run of the session was never picked up: its lane message was sent again, this turn after it"
        );
        true
    }

    /// Applies a settlement to the queue: ack, or visible again after its delay.
    pub async fn settle(&self, delivery: &Delivery, settlement: &Settlement) {
        let result = match settlement {
            Settlement::Ack => self.queue.ack(&delivery.receipt).await,
            Settlement::VisibleAfter(delay) => {
                self.queue.set_visibility(&delivery.receipt, *delay).await
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, ?settlement, "could not settle a delivery");
        }
    }

    /// Receives and processes deliveries one at a time until `shutdown`. A delivery whose turn
    /// is acked is acked together with the look for the next one
    /// ([`LaneQueue::ack_and_receive`]: one write on the embedded queue).
    pub async fn run(self, shutdown: CancellationToken) {
        let visibility = self.runner.config().visibility_timeout;
        let wait = self.runner.config().receive_wait;
        // Taken with the last ack, to run before receiving again.
        let mut next: Vec<Delivery> = Vec::new();
        while !shutdown.is_cancelled() {
            let received = if next.is_empty() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    r = self.queue.receive(1, visibility, wait) => r,
                }
            } else {
                Ok(std::mem::take(&mut next))
            };
            match received {
                Ok(deliveries) if deliveries.is_empty() && wait.is_zero() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(deliveries) => {
                    let count = deliveries.len();
                    for (i, delivery) in deliveries.into_iter().enumerate() {
                        let outcome = self.process(&delivery, &shutdown).await;
                        if i + 1 == count && outcome == Settlement::Ack && !shutdown.is_cancelled()
                        {
                            next = self.ack_and_receive(&delivery, visibility).await;
                        } else {
                            self.settle(&delivery, &outcome).await;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "receive failed; retrying shortly");
                    tokio::time::sleep(jittered(Duration::from_millis(500))).await;
                }
            }
        }
        // Taken with the last ack but not run: handed back at once for another worker (a
        // hand-back is not a failed delivery).
        for delivery in next {
            if let Some(lock) = &delivery.lock {
                self.runner.release_lock(&lock.fence).await;
            }
            self.settle(&delivery, &Settlement::VisibleAfter(Duration::ZERO))
                .await;
        }
    }

    /// Acks `delivery` and takes the next delivery when the queue can in the same step.
    async fn ack_and_receive(&self, delivery: &Delivery, visibility: Duration) -> Vec<Delivery> {
        match self
            .queue
            .ack_and_receive(&delivery.receipt, 1, visibility)
            .await
        {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, settlement = ?Settlement::Ack, "could not settle a delivery");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{RunId, RunStatus, TenantId};

    #[test]
    fn each_exit_has_one_settlement_on_both_hosts() {
        let config = RunnerConfig {
            out_of_order_pause: Duration::from_secs(1),
            failed_pickup_pause: Duration::from_secs(5),
            ..RunnerConfig::default()
        };
        let next = TurnMessage {
            tenant: TenantId::new("acme"),
            run_id: RunId::new("run_2"),
            session_key: None,
            accepted: None,
        };
        let after = |d| Settlement::VisibleAfter(Duration::from_secs(d));
        let cases = [
            (
                "finished",
                TurnExit::Finished(RunStatus::Ok),
                Settlement::Ack,
            ),
            (
                "finished, the next turn sent again",
                TurnExit::FinishedThen(RunStatus::Ok, next.clone()),
                Settlement::Ack,
            ),
            (
                "a redelivery of a run done",
                TurnExit::AlreadyDone,
                Settlement::Ack,
            ),
            ("paused or parked", TurnExit::Paused, Settlement::Ack),
            (
                "moved behind the earlier run, sent again",
                TurnExit::BehindUnsent(next),
                Settlement::Ack,
            ),
            ("handed back: at once", TurnExit::HandBack, after(0)),
            (
                "behind an earlier run: after a pause",
                TurnExit::OutOfOrder,
                after(1),
            ),
            (
                "the lock was lost: a failed pickup",
                TurnExit::Abandoned,
                after(5),
            ),
        ];
        for (name, exit, want) in cases {
            assert_eq!(Settlement::after(&exit, &config), want, "{name}");
        }
        assert_eq!(
            Settlement::after_failure(&config),
            after(5),
            "a failed pickup"
        );
    }

    #[test]
    fn jitter_keeps_a_hand_back_immediate_and_a_pause_near_its_length() {
        assert_eq!(
            Settlement::VisibleAfter(Duration::ZERO).jittered(),
            Settlement::VisibleAfter(Duration::ZERO)
        );
        assert_eq!(Settlement::Ack.jittered(), Settlement::Ack);
        for _ in 0..50 {
            let Settlement::VisibleAfter(d) =
                Settlement::VisibleAfter(Duration::from_secs(5)).jittered()
            else {
                panic!("still visible after a delay");
            };
            assert!(
                d >= Duration::from_secs(4) && d <= Duration::from_secs(6),
                "{d:?}"
            );
        }
    }
}
