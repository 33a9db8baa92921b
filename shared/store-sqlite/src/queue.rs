//! `LaneQueue` for `SqliteBackend`: the table operations of [`lane_table`] plus long polling.
//!
//! `receive` looks once, and when nothing is due waits for a wake-up (an enqueue or a
//! visibility change in this process wakes one waiting receiver), for the moment the next
//! in-flight head becomes due, or for [`RECHECK`], whichever comes first, until its `wait` runs
//! out. A look that could only find nothing again is skipped ([`crate::looks`]).

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

    /// One look for up to `max` deliveries, unless the last empty look still stands (then
    /// nothing, and when the next message becomes due).
    async fn try_receive(&self, max: usize, visibility: Duration) -> QueueResult<Received> {
        if let Some(next_due_at) = self.inner.looks.known_empty(self.now_ms()) {
            return Ok(Received {
                deliveries: Vec::new(),
                next_due_at,
                dead_lettered: false,
                more_due: false,
            });
        }
        self.look(max, visibility, None).await
    }

    /// One write: acks `ack` when given, then marks up to `max` due heads in flight; remembers
    /// an empty look, and counts a dead-lettering, or a due head left behind (`max` reached),
    /// as a change.
    async fn look(
        &self,
        max: usize,
        visibility: Duration,
        ack: Option<Receipt>,
    ) -> QueueResult<Received> {
        let (visibility_ms, now) = (millis(visibility), self.now_ms());
        let max_failed = self.inner.max_failed_deliveries.load(Ordering::Relaxed);
        let prune = ack.is_some() && self.prune_due();
        let fair = self.inner.fair.clone();
        let accepted = self.inner.accepted.clone();
        let lock_on_receive = self
            .inner
            .lock_on_receive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let before = self.inner.looks.before_look();
        let received = self
            .with_conn::<_, QueueError>(move |c| {
                let tx = c.savepoint()?;
                if let Some(receipt) = &ack {
                    lane_table::ack_in(&tx, receipt, now)?;
                    if prune {
                        lane_table::prune_done(&tx, now)?;
                    }
                }
                let mut fair = fair.lock().unwrap_or_else(PoisonError::into_inner);
                let mut received =
                    lane_table::receive(&tx, max, visibility_ms, max_failed, now, &mut fair)?;
                drop(fair);
                accepted.attach(&tx, &mut received.deliveries);
                if let Some((owner, lease_ms)) = &lock_on_receive {
                    for delivery in &mut received.deliveries {
                        delivery.lock = lane_table::lock_for(&tx, delivery, owner, *lease_ms, now);
                    }
                }
                tx.commit()?;
                Ok(received)
            })
            .await?;
        if received.dead_lettered || received.more_due {
            // What it left may be due now: the next receive looks.
            self.inner.looks.changed();
        } else if received.deliveries.is_empty() {
            // An ack in the same write needs no change counted: this look saw what it freed.
            self.inner.looks.looked_empty(before, received.next_due_at);
        }
        Ok(received)
    }

    /// Whether this ack prunes the done messages (once every [`PRUNE_EVERY`] acks).
    fn prune_due(&self) -> bool {
        self.inner.acks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1
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
            // No change counted ([`crate::looks`]): the wake-up makes one receiver look. One
            // new message needs one receiver; waking every idle worker would have them all
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
        // Whether this receive was woken (or its nap ended) since it last looked: then it looks,
        // whatever the last empty look says.
        let mut woke = false;
        loop {
            // Registered before looking, so a wake-up between the look and the wait is kept.
            let woken = self.inner.wakeup.notified();
            tokio::pin!(woken);
            // `true`: a wake-up was waiting for a receiver (an enqueue with none waiting).
            woke |= woken.as_mut().enable();

            let received = if woke {
                self.look(max, visibility, None).await?
            } else {
                self.try_receive(max, visibility).await?
            };
            if !received.deliveries.is_empty() {
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
            woke = true;
        }
    }

    async fn ack(&self, receipt: &Receipt) -> QueueResult<()> {
        let (receipt, now) = (receipt.clone(), self.now_ms());
        let prune = self.prune_due();
        self.with_conn::<_, QueueError>(move |c| {
            lane_table::ack(c, &receipt, now)?;
            if prune {
                lane_table::prune_done(c, now)?;
            }
            Ok(())
        })
        .await?;
        // It may have freed the lane's next message or its tenant's slot: the next receive
        // looks. No wake-up: an ack frees at most one delivery, and the lane worker that acked
        // receives again right away; waking an idle one too only had two workers race a
        // receive for it.
        self.inner.looks.changed();
        Ok(())
    }

    async fn ack_and_receive(
        &self,
        receipt: &Receipt,
        max: usize,
        visibility: Duration,
    ) -> QueueResult<Vec<Delivery>> {
        if max == 0 {
            self.ack(receipt).await?;
            return Ok(Vec::new());
        }
        let received = self.look(max, visibility, Some(receipt.clone())).await?;
        Ok(received.deliveries)
    }

    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()> {
        let (receipt, now, visibility_ms) = (receipt.clone(), self.now_ms(), millis(visibility));
        self.with_conn::<_, QueueError>(move |c| {
            lane_table::set_visibility(c, &receipt, visibility_ms, now)
        })
        .await?;
        // A waiter looks, and recomputes when the next head is due (now, for a hand-back).
        self.inner.wakeup.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_conformance::fixtures;
    use agentlane_core::Lane;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_receive_skips_the_look_only_while_nothing_can_have_become_due() {
        let dir = tempfile::tempdir().unwrap();
        let queue = SqliteBackend::open(dir.path()).unwrap();
        let tenant = fixtures::tenant();
        let message = || fixtures::message(&Lane::for_session(&tenant, &fixtures::session_key()));
        let (visibility, now) = (Duration::from_secs(30), Duration::ZERO);
        assert!(queue.receive(1, visibility, now).await.unwrap().is_empty());
        let writes = queue.writes_sent();
        assert!(queue.receive(1, visibility, now).await.unwrap().is_empty());
        assert_eq!(queue.writes_sent(), writes, "nothing changed: no look");

        // Another process's enqueue is not counted here: found within RECHECK.
        let other = SqliteBackend::open(dir.path()).unwrap();
        let first = message();
        other.enqueue(&first).await.unwrap();
        let started = Instant::now();
        let got_first = queue
            .receive(1, visibility, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(got_first[0].message, first);
        assert!(started.elapsed() < RECHECK + Duration::from_millis(500));

        // This process's enqueue is found at once, right after an empty look.
        assert!(queue.receive(1, visibility, now).await.unwrap().is_empty());
        let second = message();
        queue.enqueue(&second).await.unwrap();
        let got = queue.receive(1, visibility, now).await.unwrap();
        assert_eq!(got[0].message, second);

        // An ack whose look finds nothing: the next receive does not look either.
        let next = queue
            .ack_and_receive(&got[0].receipt, 1, visibility)
            .await
            .unwrap();
        assert!(next.is_empty());
        let writes = queue.writes_sent();
        assert!(queue.receive(1, visibility, now).await.unwrap().is_empty());
        assert_eq!(queue.writes_sent(), writes);

        // Two enqueues while nobody waits leave one wake-up: the receive that takes it gets
        // the first message and leaves the second due, so the next receive looks.
        assert!(queue.receive(1, visibility, now).await.unwrap().is_empty());
        let (third, fourth) = (message(), message());
        queue.enqueue(&third).await.unwrap();
        queue.enqueue(&fourth).await.unwrap();
        let got = queue.receive(1, visibility, now).await.unwrap();
        assert_eq!(got[0].message, third);
        let got = queue.receive(1, visibility, now).await.unwrap();
        assert_eq!(got.len(), 1, "the fourth found at once");
        assert_eq!(got[0].message, fourth);

        // A hand-back wakes a receiver: the handed-back message is found at once.
        queue
            .set_visibility(&got_first[0].receipt, Duration::ZERO)
            .await
            .unwrap();
        let again = queue.receive(1, visibility, now).await.unwrap();
        assert_eq!(again[0].message, first);
    }
}
