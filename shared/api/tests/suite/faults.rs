//! Backend failures seen from the client: throttling is a 429, other failures a 500 that
//! reveals nothing of the cause.

use crate::common::*;
use agentlane_api::ApiConfig;
use agentlane_core::{
    AcceptOutcome, Commit, Event, Fence, FencedWriter, HistoryReader, LockAttempt, NewTurn, Run,
    RunId, Session, SessionId, SessionKey, SessionLock, Store, StoreError, StoreResult, TenantId,
    TranscriptEntry, TurnIntake,
};
use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};

/// Delegates to the real store, except that every call fails with `failure` while it is set.
struct Faulty {
    inner: Arc<dyn Store>,
    failure: Switch,
}

/// The failure every store call answers while set.
type Switch = Arc<Mutex<Option<StoreError>>>;

impl Faulty {
    fn check(&self) -> StoreResult<()> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl TurnIntake for Faulty {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.check()?;
        self.inner.accept_turn(turn).await
    }
    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.check()?;
        self.inner.request_abort(tenant, run_id).await
    }
    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        self.check()?;
        self.inner
            .reset_session(tenant, key, new_session_id, now)
            .await
    }
}

#[async_trait]
impl HistoryReader for Faulty {
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.check()?;
        self.inner.get_run(tenant, run_id).await
    }
    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        self.check()?;
        self.inner.get_session(tenant, key).await
    }
    async fn read_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.check()?;
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
        self.check()?;
        self.inner.read_events(tenant, run_id, after, limit).await
    }
}

#[async_trait]
impl SessionLock for Faulty {
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        self.check()?;
        self.inner
            .acquire_lock(tenant, key, owner, lease_ms, now)
            .await
    }
    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        self.check()?;
        self.inner.renew_lock(fence, lease_ms, now).await
    }
    async fn release_lock(&self, fence: &Fence) -> StoreResult<()> {
        self.check()?;
        self.inner.release_lock(fence).await
    }
}

#[async_trait]
impl FencedWriter for Faulty {
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.check()?;
        self.inner.commit(fence, commit).await
    }
}

async fn harness() -> (Harness, Switch) {
    let failure: Switch = Arc::default();
    let switch = failure.clone();
    let h = Harness::build(ApiConfig::default(), move |inner| {
        Arc::new(Faulty {
            inner,
            failure: switch,
        })
    })
    .await;
    (h, failure)
}

#[tokio::test]
async fn a_throttled_store_answers_429_with_retry_after() {
    let (h, failure) = harness().await;
    *failure.lock().unwrap() = Some(StoreError::Throttled("slow down".into()));
    let reply = h
        .post(
            "/v1/agent",
            ACME_KEY,
            json!({"sessionKey": "main", "message": "hi"}),
        )
        .await;
    reply.assert_error(429, "rate_limited");
    assert_eq!(reply.headers["retry-after"], "1");
}

#[tokio::test]
async fn a_failing_store_answers_500_without_internals() {
    let (h, failure) = harness().await;
    let run_id = h.submit(ACME_KEY, "main", "hi").await["runId"].clone();
    *failure.lock().unwrap() = Some(StoreError::Unavailable(
        "disk /srv/agentlane/db is full".into(),
    ));
    for reply in [
        h.get(&format!("/v1/runs/{}", run_id.as_str().unwrap()), ACME_KEY)
            .await,
        h.get("/v1/sessions/main", ACME_KEY).await,
        h.post("/v1/agent.wait", ACME_KEY, json!({"runId": run_id}))
            .await,
    ] {
        reply.assert_error(500, "internal");
        assert!(!reply.text.contains("/srv"), "{}", reply.text);
    }
    // Recovered, the same run reads back.
    *failure.lock().unwrap() = None;
    let reply = h
        .get(&format!("/v1/runs/{}", run_id.as_str().unwrap()), ACME_KEY)
        .await;
    assert_eq!(reply.json["runId"], run_id);
}

#[tokio::test]
async fn a_store_busy_error_is_session_busy() {
    let (h, failure) = harness().await;
    h.submit(ACME_KEY, "main", "hi").await;
    *failure.lock().unwrap() = Some(StoreError::Busy);
    h.post("/v1/sessions/main/reset", ACME_KEY, json!({}))
        .await
        .assert_error(409, "session_busy");
}
