//! Why a run stops from outside its loop, and the helpers that notice: the abort poll, the lost
//! lock, a shutdown, and the run's deadline all feed one [`StopSignal`].

use agentlane_core::{RunId, Store, TenantId};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why a run was stopped from outside its loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An abort request (API or CLI) stopped the run.
    Abort,
    /// The session was reset after the run was accepted: it ends `aborted` (`session_reset`)
    /// without reading or writing the new session.
    SessionReset,
    /// The run exceeded its run timeout (48 h by default, SPEC §12).
    Timeout,
    /// The session lock's lease was lost to another worker; the run is abandoned without writing.
    LockLost,
    /// The process is shutting down; the run is handed back for another worker.
    Shutdown,
}

/// A cancellation token that remembers the first reason it was cancelled for.
#[derive(Clone, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
}

impl StopSignal {
    /// Stops the run for `reason` (the first reason given is kept).
    pub fn trigger(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.token.cancel();
    }

    /// Why the run was stopped; `None` while it was not.
    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }

    /// Cancelled when the run is stopped.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// What the watcher task listens to.
pub(super) struct Watch {
    pub store: Arc<dyn Store>,
    pub tenant: TenantId,
    pub run_id: RunId,
    pub abort_poll: Duration,
    /// Cancelled by the lock heartbeat when the lock was lost.
    pub lost: CancellationToken,
    /// The process is shutting down.
    pub shutdown: CancellationToken,
    /// Cancelled when the pickup is over: the watcher ends.
    pub helpers: CancellationToken,
}

/// Abort polling, lock loss and shutdown all feed the run's stop signal.
pub(super) fn spawn_watcher(watch: Watch, stop: StopSignal) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = watch.helpers.cancelled() => return,
                _ = watch.lost.cancelled() => { stop.trigger(StopReason::LockLost); return; }
                _ = watch.shutdown.cancelled() => { stop.trigger(StopReason::Shutdown); return; }
                _ = tokio::time::sleep(watch.abort_poll) => {}
            }
            if let Ok(true) = watch
                .store
                .abort_requested(&watch.tenant, &watch.run_id)
                .await
            {
                stop.trigger(StopReason::Abort);
                return;
            }
        }
    })
}

/// Stops the run with [`StopReason::Timeout`] after `wait`. Abort the handle when the loop
/// ends first.
pub(super) fn spawn_deadline(wait: Duration, stop: StopSignal) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        stop.trigger(StopReason::Timeout);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_is_kept() {
        let stop = StopSignal::default();
        assert_eq!(stop.reason(), None);
        stop.trigger(StopReason::Abort);
        stop.trigger(StopReason::Timeout);
        assert_eq!(stop.reason(), Some(StopReason::Abort));
        assert!(stop.token().is_cancelled());
    }
}
