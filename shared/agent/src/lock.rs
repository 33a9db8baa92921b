//! The session write lock as the runner uses it: acquire with backoff until a deadline, then keep
//! the lease alive with a heartbeat until the run ends.

use agentlane_core::backoff::jittered;
use agentlane_core::{
    Clock, Fence, LockAttempt, Session, SessionKey, SessionLock, StoreError, TenantId,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// Someone else held it for the whole acquire timeout.
    #[error("session busy: lock held by {owner} until {until}")]
    Busy {
        /// The current holder's id.
        owner: String,
        /// When the holder's lease ends, ms since the epoch.
        until: u64,
    },
    /// The store failed while taking the lock.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Tries to take the lock until `timeout`, sleeping 50 ms growing to 1 s (jittered ±20 %)
/// between tries. Transient store errors are retried within the same deadline. Returns the
/// fence and the session as the acquire left it.
pub async fn acquire(
    store: &dyn SessionLock,
    clock: &dyn Clock,
    tenant: &TenantId,
    key: &SessionKey,
    owner: &str,
    lease: Duration,
    timeout: Duration,
) -> Result<(Fence, Box<Session>), AcquireError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(50);
    loop {
        let last = match store
            .acquire_lock(tenant, key, owner, lease.as_millis() as u64, clock.now_ms())
            .await
        {
            Ok(LockAttempt::Acquired(fence, session)) => return Ok((fence, session)),
            Ok(LockAttempt::Held { owner, until }) => AcquireError::Busy { owner, until },
            Err(e) if e.is_transient() => AcquireError::Store(e),
            Err(e) => return Err(e.into()),
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(last);
        }
        let sleep = jittered(pause).min(deadline - now);
        tokio::time::sleep(sleep).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Renews the lease every third of it. If the fence is lost, cancels `lost` and stops.
/// Stops when `stop` is cancelled.
pub fn spawn_heartbeat(
    store: Arc<dyn SessionLock>,
    clock: Arc<dyn Clock>,
    fence: Fence,
    lease: Duration,
    lost: CancellationToken,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = (lease / 3).max(Duration::from_millis(20));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            match store
                .renew_lock(&fence, lease.as_millis() as u64, clock.now_ms())
                .await
            {
                Ok(()) => {}
                Err(StoreError::FenceLost) => {
                    tracing::warn!(session = %fence.session_key.fingerprint(), "session lock lost; stopping the run");
                    lost.cancel();
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "lock renewal failed; will retry"),
            }
        }
    })
}
