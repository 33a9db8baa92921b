//! Backend failures seen from the client: throttling is a 429, an outage a 503 with
//! `Retry-After` (and `/readyz` says so), other failures a 500; none reveals the cause.

use crate::common::*;
use agentlane_api::ApiConfig;
use agentlane_core::{Layered, Store, StoreCall, StoreError, StoreLayer, StoreResult};
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

#[async_trait]
impl StoreLayer for Faulty {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn before(&self, _call: StoreCall) -> StoreResult<()> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

async fn harness() -> (Harness, Switch) {
    let failure: Switch = Arc::default();
    let switch = failure.clone();
    // A reset retries a busy session for this long before answering `session_busy`.
    let config = ApiConfig {
        reset_wait_ms: 200,
        ..ApiConfig::default()
    };
    let h = Harness::build(config, move |inner| {
        Arc::new(Layered(Faulty {
            inner,
            failure: switch,
        }))
    })
    .await;
    (h, failure)
}

#[tokio::test]
async fn a_throttled_store_answers_429_with_retry_after() {
    let (h, failure) = harness().await;
    *failure.lock().unwrap() = Some(StoreError::Throttled("slow down".into()));
    let reply = h
        .agent(ACME_KEY, json!({"sessionKey": "main", "message": "hi"}))
        .await;
    reply.assert_error(429, "rate_limited");
    assert_eq!(reply.headers["retry-after"], "1");
}

#[tokio::test]
async fn a_store_outage_answers_503_with_retry_after_and_no_internals() {
    let (h, failure) = harness().await;
    let run_id = h.submit(ACME_KEY, "main", "hi").await["runId"].clone();
    *failure.lock().unwrap() = Some(StoreError::Unavailable(
        "disk /srv/agentlane/db is full".into(),
    ));
    for reply in [
        h.get(&format!("/v1/runs/{}", run_id.as_str().unwrap()), ACME_KEY)
            .await,
        h.get("/v1/sessions/main", ACME_KEY).await,
        h.wait(ACME_KEY, json!({"runId": run_id})).await,
        h.agent(ACME_KEY, json!({"sessionKey": "main", "message": "hi"}))
            .await,
    ] {
        reply.assert_error(503, "unavailable");
        assert_eq!(reply.headers["retry-after"], "5", "{}", reply.text);
        assert!(!reply.text.contains("/srv"), "{}", reply.text);
    }
    // AND the readiness probe says so, while the liveness probe does not look at the store
    let ready = h.get("/readyz", "").await;
    ready.assert_error(503, "unavailable");
    assert_eq!(ready.headers["retry-after"], "5");
    assert_eq!(h.get("/healthz", "").await.status.as_u16(), 200);
    // Recovered, the same run reads back and the process is ready again.
    *failure.lock().unwrap() = None;
    let reply = h
        .get(&format!("/v1/runs/{}", run_id.as_str().unwrap()), ACME_KEY)
        .await;
    assert_eq!(reply.json["runId"], run_id);
    let ready = h.get("/readyz", "").await;
    assert_eq!(
        (ready.status.as_u16(), ready.json.clone()),
        (200, json!({"ok": true}))
    );
}

#[tokio::test]
async fn a_corrupt_record_is_still_a_500_without_internals() {
    let (h, failure) = harness().await;
    *failure.lock().unwrap() = Some(StoreError::Corrupt("row in /srv/agentlane/db".into()));
    let reply = h.get("/v1/sessions/main", ACME_KEY).await;
    reply.assert_error(500, "internal");
    assert!(!reply.text.contains("/srv"), "{}", reply.text);
    assert!(reply.headers.get("retry-after").is_none());
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
