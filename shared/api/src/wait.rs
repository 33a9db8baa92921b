//! Waiting for a run to change: `agent.wait` and the SSE event stream.
//!
//! A [`RunWatch`] subscribes to the run on the process's [`Notifier`] before the first read.
//! While the run is live in this process it sleeps until the next commit signals it — no
//! polling. Otherwise (queued, or running in another process) it re-reads on a backoff that
//! starts at [`FIRST_BACKOFF`] and doubles up to a cap, and still wakes early on a signal.
//! Waiting never changes the run.
//!
//! An `agent.wait` takes its place among the tenant's shared wait slots only once it
//! outlives [`SHARED_WAIT_GRACE`]: a wait answered within it (a short turn, a run already
//! ended) makes no slot writes in the store.

use crate::admission::{SHARED_WAIT_GRACE, Slot};
use crate::error::ApiError;
use crate::notify::{Notifier, Subscription};
use agentlane_core::{HistoryReader, Run, RunId, RunStatus, StoreError, TenantId};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// First pause between two reads of a run that is not live in this process.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(2);
/// Longest pause between two reads of a run `agent.wait` polls.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(250);
/// A run live in this process is re-read this often even without a signal: a safety net for a
/// runner that stopped without a final commit (its lease then passes to another process).
pub(crate) const LIVE_RECHECK: Duration = Duration::from_secs(5);
/// Longest poll pause when this process's runner commits through the notifier: a queued run's
/// pickup here is signalled, so polls only catch runners of other processes.
pub(crate) const CONNECTED_MAX_BACKOFF: Duration = Duration::from_secs(1);
/// First poll pause when this process's runner commits through the notifier: a run it picks
/// up is signalled at once (and then not polled), so the first read need not come within
/// milliseconds; it only catches a runner of another process (each read is a request on
/// DynamoDB, and a pickup there takes a few of them).
pub(crate) const CONNECTED_FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Why [`RunWatch::next_end`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// A change that may end the wait was signalled.
    Signal,
    /// A poll is due (the run is not live here, or its live recheck came).
    Tick,
    /// The time given came first: nothing was signalled and no poll is due.
    Until,
}

/// Sleeps until one run may have changed.
pub(crate) struct RunWatch {
    notifier: Notifier,
    subscription: Subscription,
    tenant: TenantId,
    run_id: RunId,
    backoff: Duration,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl RunWatch {
    /// Subscribes to `run_id`; read the run only after this. `max_backoff` caps the poll
    /// pause (raised to [`CONNECTED_MAX_BACKOFF`] when the notifier is connected).
    pub(crate) fn new(
        notifier: &Notifier,
        tenant: &TenantId,
        run_id: &RunId,
        max_backoff: Duration,
    ) -> Self {
        let (first_backoff, max_backoff) = if notifier.is_connected() {
            (
                CONNECTED_FIRST_BACKOFF,
                max_backoff.max(CONNECTED_MAX_BACKOFF),
            )
        } else {
            (FIRST_BACKOFF, max_backoff)
        };
        Self {
            notifier: notifier.clone(),
            subscription: notifier.subscribe(tenant, run_id),
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            backoff: first_backoff,
            first_backoff,
            max_backoff: max_backoff.max(first_backoff),
        }
    }

    /// The run's terminal record, when this process's commit of it was signalled since the
    /// watch began: the answer, with no read of the run.
    pub(crate) fn final_run(&self) -> Option<Arc<Run>> {
        self.subscription.final_run()
    }

    /// Something changed: the next poll pause starts short again.
    pub(crate) fn saw_change(&mut self) {
        self.backoff = self.first_backoff;
    }

    /// Returns when a change that may end a wait was signalled (not progress or events of a
    /// running run), at the next poll tick (runs not live here), or at `until`, whichever
    /// comes first: what `agent.wait` sleeps on, so it reads the run once at its end instead
    /// of after every commit. A run that becomes live here meanwhile (this process's runner
    /// picked it up) is not polled any more: its end will be signalled.
    pub(crate) async fn next_end(&mut self, until: Option<Instant>) -> Woke {
        loop {
            let wake = self.wake(until);
            tokio::select! {
                ended = self.subscription.may_have_ended() => if ended {
                    return Woke::Signal;
                },
                () = tokio::time::sleep_until(wake) => {
                    return if until.is_some_and(|until| wake >= until) {
                        Woke::Until
                    } else {
                        Woke::Tick
                    };
                }
            }
        }
    }

    fn wake(&mut self, until: Option<Instant>) -> Instant {
        let pause = if self.notifier.is_live_here(&self.tenant, &self.run_id) {
            LIVE_RECHECK
        } else {
            let pause = self.backoff;
            self.backoff = (self.backoff * 2).min(self.max_backoff);
            pause
        };
        let wake = Instant::now() + pause;
        until.map_or(wake, |until| wake.min(until))
    }

    /// Returns when the run was signalled, at the next poll tick (runs not live here), or at
    /// `until`, whichever comes first.
    pub(crate) async fn next_change(&mut self, until: Option<Instant>) {
        let wake = self.wake(until);
        tokio::select! {
            () = self.subscription.changed() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// The run once terminal, or as last read when `timeout` ends first. `NotFound` when the tenant
/// has no such run. `slot` is the wait's: its place in the store is taken only once the wait
/// outlives [`SHARED_WAIT_GRACE`].
pub(crate) async fn wait_for_run(
    store: &dyn HistoryReader,
    notifier: &Notifier,
    wait: WaitFor<'_>,
    slot: &mut Slot,
) -> Result<Arc<Run>, ApiError> {
    wait_past_pause(store, notifier, wait, 0, slot).await
}

/// The run a wait is for, and how long it may last.
pub(crate) struct WaitFor<'a> {
    /// The run's tenant.
    pub(crate) tenant: &'a TenantId,
    /// The run.
    pub(crate) run_id: &'a RunId,
    /// How long the wait may last.
    pub(crate) timeout: Duration,
}

/// As [`wait_for_run`], but a pause counts as an end only when its id is above `past`: the
/// wait of a client that answered pause `past` goes on until the run ends or pauses again.
pub(crate) async fn wait_past_pause(
    store: &dyn HistoryReader,
    notifier: &Notifier,
    wait: WaitFor<'_>,
    past: u32,
    slot: &mut Slot,
) -> Result<Arc<Run>, ApiError> {
    let WaitFor {
        tenant,
        run_id,
        timeout,
    } = wait;
    let start = Instant::now();
    let deadline = start + timeout;
    let grace_ends = start + SHARED_WAIT_GRACE;
    let mut watch = RunWatch::new(notifier, tenant, run_id, MAX_BACKOFF);
    // The first look reads the run's progress only (`agent.wait` right after `agent` finds it
    // queued or running), or nothing when this process has just accepted it into its own
    // queue with nothing that may end the wait signalled since; the whole run is read once it
    // may have ended, or at the deadline.
    let (first_status, mut run) = if notifier.accepted_here(tenant, run_id) {
        (RunStatus::Queued, None)
    } else {
        let progress = store
            .run_progress(tenant, run_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("run {run_id}")))?;
        let run = if progress.only_waits() {
            None
        } else {
            Some(read_run(store, tenant, run_id).await?)
        };
        (progress.status, run)
    };
    loop {
        if let Some(read) = run.take() {
            let paused = read.status == RunStatus::RequiresAction
                && read.required_action.as_ref().is_some_and(|a| a.id > past);
            if read.status.is_terminal() || paused {
                return Ok(Arc::new(read));
            }
            if let Some(ended) = carried_end(store, &read).await? {
                return Ok(Arc::new(ended));
            }
            run = Some(read);
        }
        if Instant::now() >= deadline {
            return match run {
                Some(read) => Ok(Arc::new(read)),
                None => read_run(store, tenant, run_id).await.map(Arc::new),
            };
        }
        let until = if slot.is_deferred() {
            deadline.min(grace_ends)
        } else {
            deadline
        };
        let woke = watch.next_end(Some(until)).await;
        if let Some(ended) = watch.final_run() {
            return Ok(ended);
        }
        if slot.is_deferred() && Instant::now() >= grace_ends {
            // The wait outlived its grace: it counts against the tenant's cap from now on.
            slot.hold_shared().await?;
            if woke == Woke::Until && Instant::now() < deadline {
                // Nothing was signalled and no poll is due: the run as read stands.
                continue;
            }
        }
        match store.get_run(tenant, run_id).await {
            Ok(Some(latest)) => {
                let before = run.as_ref().map_or(first_status, |read| read.status);
                if latest.status != before {
                    watch.saw_change();
                }
                run = Some(latest);
            }
            Ok(None) => return Err(ApiError::not_found(format!("run {run_id}"))),
            // A throttled read is retried at the next tick; the deadline still holds.
            Err(StoreError::Throttled(reason)) => {
                tracing::debug!(%reason, "run read throttled while waiting");
            }
            Err(other) => return Err(other.into()),
        }
    }
}

/// The whole run; `not_found` when the tenant has no such run.
async fn read_run(
    store: &dyn HistoryReader,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Run, ApiError> {
    store
        .get_run(tenant, run_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {run_id}")))
}

/// A run steered into another resolves with the run that carried it (SPEC §2): once the
/// carrier ended, `run` as it will end (the carrier's status, payloads, error and end time),
/// before its own message comes to record that. `None` while it was not carried or the
/// carrier still runs.
async fn carried_end(store: &dyn HistoryReader, run: &Run) -> Result<Option<Run>, ApiError> {
    let Some(carrier_id) = &run.into_run_id else {
        return Ok(None);
    };
    let carrier = match store.get_run(&run.tenant, carrier_id).await {
        Ok(Some(carrier)) if carrier.status.is_terminal() => carrier,
        Ok(_) | Err(StoreError::Throttled(_)) => return Ok(None),
        Err(other) => return Err(other.into()),
    };
    Ok(Some(Run {
        status: carrier.status,
        liveness_state: carrier.liveness_state,
        ended_at: carrier.ended_at,
        error: carrier.error,
        payloads: carrier.payloads,
        ..run.clone()
    }))
}
