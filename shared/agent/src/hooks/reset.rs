//! `session_end` (reason `reset`) for resets made through the API: a store decorator the
//! process that serves the API wraps its store in, since the API itself knows no hooks.

use super::{HookContext, HookPoint, HookRegistry, SessionEndEvent, SessionEndReason};
use agentlane_core::{
    Layered, Session, SessionId, SessionKey, Store, StoreLayer, StoreResult, TenantId,
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
    Arc::new(Layered(EndOnReset {
        inner: store,
        hooks,
    }))
}

struct EndOnReset {
    inner: Arc<dyn Store>,
    hooks: HookRegistry,
}

#[async_trait]
impl StoreLayer for EndOnReset {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
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
