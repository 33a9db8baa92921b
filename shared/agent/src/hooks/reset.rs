//! `session_end` (reason `reset`) for resets made through the API: a store decorator the
//! process that serves the API wraps its store in, since the API itself knows no hooks.

use super::{HookContext, HookPoint, HookRegistry, SessionEndEvent, SessionEndReason};
use agentlane_core::{
    AcceptOutcome, Commit, Event, Fence, FencedWriter, HistoryReader, LockAttempt, NewTurn, Run,
    RunId, Session, SessionId, SessionKey, SessionLock, Store, StoreResult, TenantId,
    TranscriptEntry, TurnIntake,
};
use async_trait::async_trait;
use std::sync::Arc;

/// `store` as is, except that a successful `reset_session` raises `session_end` (reason
/// `reset`, on the session id that ended) through `hooks`. Without a `session_end` hook the
/// store is returned unwrapped.
pub fn session_end_on_reset(store: Arc<dyn Store>, hooks: HookRegistry) -> Arc<dyn Store> {
    if !hooks.has(HookPoint::SessionEnd) {
        return store;
    }
    Arc::new(EndOnReset {
        inner: store,
        hooks,
    })
}

struct EndOnReset {
    inner: Arc<dyn Store>,
    hooks: HookRegistry,
}

#[async_trait]
impl TurnIntake for EndOnReset {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.inner.accept_turn(turn).await
    }

    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.inner.request_abort(tenant, run_id).await
    }

    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        // The id that ends: read before, kept only if this reset is the very next generation.
        let before = self.inner.get_session(tenant, key).await?;
        let session = self
            .inner
            .reset_session(tenant, key, new_session_id, now)
            .await?;
        if let Some(before) = before.filter(|b| b.generation + 1 == session.generation) {
            let ctx = HookContext {
                tenant: tenant.clone(),
                session_key: key.clone(),
                session_id: before.session_id,
                run_id: None,
            };
            let event = SessionEndEvent {
                reason: SessionEndReason::Reset,
            };
            self.hooks.session_end(&ctx, event).await;
        }
        Ok(session)
    }
}

#[async_trait]
impl HistoryReader for EndOnReset {
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.inner.get_run(tenant, run_id).await
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        self.inner.get_session(tenant, key).await
    }

    async fn read_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.inner
            .read_transcript(tenant, session_id, after, limit)
            .await
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        self.inner.read_events(tenant, run_id, after, limit).await
    }

    async fn abort_requested(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<bool> {
        self.inner.abort_requested(tenant, run_id).await
    }

    async fn next_event_seq(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<u64> {
        self.inner.next_event_seq(tenant, run_id).await
    }
}

#[async_trait]
impl SessionLock for EndOnReset {
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        self.inner
            .acquire_lock(tenant, key, owner, lease_ms, now)
            .await
    }

    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        self.inner.renew_lock(fence, lease_ms, now).await
    }

    async fn release_lock(&self, fence: &Fence) -> StoreResult<()> {
        self.inner.release_lock(fence).await
    }
}

#[async_trait]
impl FencedWriter for EndOnReset {
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.inner.commit(fence, commit).await
    }
}
