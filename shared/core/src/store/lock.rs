//! The session write lock: owner + lease + fencing token, kept on the session record.

use super::StoreResult;
use crate::ids::{SessionKey, TenantId};
use crate::session::{Fence, LockAttempt};
use async_trait::async_trait;

/// Taking, keeping and giving back a session's write lock. A lock is live while its owner is set
/// and its lease has not ended ([`Session::lock_is_live`](crate::Session::lock_is_live)); a fence
/// is current while the session names its owner and token
/// ([`Session::is_fenced_by`](crate::Session::is_fenced_by)).
#[async_trait]
pub trait SessionLock: Send + Sync + 'static {
    /// One try: take the lock if it is not live at `now`; the fencing token grows by one with
    /// every acquisition. Not reentrant: the same owner gets `Held` too. `NotFound` when the key
    /// has no session.
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt>;

    /// Extends the lease to `now + lease_ms`; `FenceLost` if the fence is no longer current.
    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()>;

    /// Releases the lock; `FenceLost` if it was not ours any more.
    async fn release_lock(&self, fence: &Fence) -> StoreResult<()>;
}
