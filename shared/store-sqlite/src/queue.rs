//! `LaneQueue` for `SqliteBackend`: the table operations of [`lane_table`] plus long polling.
//!
//! `receive` tries once, and when nothing is due waits for a wake-up (an enqueue or a
//! visibility change in this process wakes one waiting receiver), for the moment the next in-flight head becomes due, or for
//! [`RECHECK`], whichever comes first, until its `wait` runs out.

use crate::backend::SqliteBackend;
use crate::lane_table::{self, DeadLetter, QueueStats, Received};
use agentlane_core::{Delivery, LaneMessage, LaneQueue, QueueError, QueueResult, Receipt};
use async_trait::async_trait;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The longest a waiting `receive` sleeps between two looks at the table.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Done messages are pruned once every this many acks.
const PRUNE_EVERY: u64 = 512;

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl SqliteBackend {
    fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    async fn try_receive(&self, max: usize, visibility: Duration) -> QueueResult<Received> {
        let (visibility_ms, now) = (millis(visibility), self.now_ms());
        let max_failed = self.inner.max_failed_deliveries.load(Ordering::Relaxed);
        let fair = self.inner.fair.clone();
        self.with_conn(move |c| {
            let mut fair = fair.lock().unwrap_or_else(PoisonError::into_inner);
            lane_table::receive(c, max, visibility_ms, max_failed, now, &mut fair)
        })
        .await
    }

    /// Messages one tenant may have in flight at once (its share of the lane workers); `0`
    /// (the default): no cap. Whatever the cap, deliveries go round robin over the tenants
    /// with ready lanes, the tenant with the fewest in flight first.
    pub fn set_tenant_in_flight_cap(&self, cap: u32) {
        self.inner
            .fair
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cap = cap;
    }

    /// Failed deliveries (visibility ran out: neither acked nor handed back) after which a lane
    /// message is moved to the dead-letter table instead of being delivered again (default
    /// [`MAX_FAILED_DELIVERIES`](crate::MAX_FAILED_DELIVERIES); at least 1).
    pub fn set_max_failed_deliveries(&self, max: u32) {
        self.inner
            .max_failed_deliveries
            .store(max.max(1), Ordering::Relaxed);
    }

    /// Up to `limit` dead-lettered lane messages, oldest first.
    pub async fn dead_letters(&self, limit: usize) -> QueueResult<Vec<DeadLetter>> {
        self.with_reader(move |c| lane_table::dead_letters(c, limit))
            .await
    }

    /// Forgets a dead letter once its run is reconciled.
    pub async fn forget_dead_letter(&self, id: i64) -> QueueResult<()> {
        self.with_conn(move |c| lane_table::forget_dead_letter(c, id))
            .await
    }

    /// How many lane messages are waiting, in flight, and kept as done.
    pub async fn queue_stats(&self) -> QueueResult<QueueStats> {
        let now = self.now_ms();
        self.with_reader(move |c| lane_table::stats(c, now)).await
    }
}

#[async_trait]
impl LaneQueue for SqliteBackend {
    async fn enqueue(&self, message: &LaneMessage) -> QueueResult<()> {
        let (message, now) = (message.clone(), self.now_ms());
        let stored = self
            .with_conn::<_, QueueError>(move |c| lane_table::enqueue(c, &message, now))
            .await?;
        if stored {
            // One new message needs one receiver; waking every idle worker would have them all
            // race through a receive transaction for it.
            self.inner.wakeup.notify_one();
        }
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> QueueResult<Vec<Delivery>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + wait;
        loop {
            // Registered before looking, so a wake-up between the look and the wait is kept.
            let woken = self.inner.wakeup.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();

            let mut received = self.try_receive(max, visibility).await?;
            if !received.deliveries.is_empty() {
                self.inner.accepted.attach(&mut received.deliveries);
                // A wake-up `woken` got but did not use goes on to another waiter when it is
                // dropped (tokio forwards an unconsumed `notify_one`).
                return Ok(received.deliveries);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let mut nap = (deadline - now).min(RECHECK);
            if let Some(due_at) = received.next_due_at {
                let until_due = Duration::from_millis(due_at.saturating_sub(self.now_ms()) + 1);
                nap = nap.min(until_due);
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }

    async fn ack(&self, receipt: &Receipt) -> QueueResult<()> {
        let (receipt, now) = (receipt.clone(), self.now_ms());
        let prune =
            self.inner.acks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        self.with_conn::<_, QueueError>(move |c| {
            lane_table::ack(c, &receipt, now)?;
            if prune {
                lane_table::prune_done(c, now)?;
            }
            Ok(())
        })
        .await?;
        // No wake-up: an ack frees at most one delivery (the lane's next message, or the
        // tenant's slot under its in-flight cap), and the lane worker that acked receives again
        // right away; waking an idle one too only had two workers race a receive for it.
        Ok(())
    }

    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()> {
        let (receipt, now, visibility_ms) = (receipt.clone(), self.now_ms(), millis(visibility));
        self.with_conn::<_, QueueError>(move |c| {
            lane_table::set_visibility(c, &receipt, visibility_ms, now)
        })
        .await?;
        // A waiter recomputes when the next head is due (now, for a hand-back).
        self.inner.wakeup.notify_one();
        Ok(())
    }
}
