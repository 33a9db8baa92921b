//! The ingress handler on real API Gateway HTTP API (payload 2.0) events: the same `app()` the
//! local server runs, reached through lambda_http's request conversion.

use agentlane_api::{ApiConfig, ApiKeys, ApiState};
use agentlane_core::{LaneQueue, SystemClock};
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

const EVENT: &str = include_str!("../fixtures/apigw-v2-post-agent.json");

async fn call(backend: &SqliteBackend, event: &str) -> (http::StatusCode, serde_json::Value) {
    let request = lambda_http::request::from_str(event)
        .unwrap()
        .map(|body| axum::body::Body::from(body.as_ref().to_vec()));
    let app = agentlane_api::app(ApiState {
        // As the ingress function: the stream and wait caps in the store.
        shared_slots: Some(Arc::new(backend.clone())),
        spend: Some(Arc::new(backend.clone())),
        store: Arc::new(backend.clone()),
        queue: Arc::new(backend.clone()),
        clock: Arc::new(SystemClock),
        cron: Arc::new(backend.clone()),
        catalog: Arc::new(backend.clone()),
        agents: Arc::new(backend.clone()),
        secrets: Arc::new(agentlane_secrets::Vault::new(
            Arc::new(backend.clone()),
            Arc::new(agentlane_secrets::LocalKeyFile::in_dir(
                backend.database_path().parent().unwrap(),
            )),
        )),
        keys: ApiKeys::parse("acme:ingress-test-key-0123456789").unwrap(),
        config: ApiConfig::default(),
    });
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_post_agent_event_is_accepted_and_enqueued_on_the_session_lane() {
    let backend = SqliteBackend::open_temporary().unwrap();
    let (status, body) = call(&backend, EVENT).await;
    assert_eq!(status, http::StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["sessionKey"], "lambda-demo");
    let run_id = body["runId"].as_str().unwrap();
    let delivered = backend
        .receive(10, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].message.lane.as_str(), "acme/lambda-demo");
    assert_eq!(delivered[0].message.body.run_id.as_str(), run_id);
}

#[tokio::test]
async fn an_event_with_a_wrong_key_is_refused_with_the_error_shape() {
    let backend = SqliteBackend::open_temporary().unwrap();
    let event = EVENT.replace("ingress-test-key-0123456789", "not-the-right-key-at-all");
    let (status, body) = call(&backend, &event).await;
    assert_eq!(status, http::StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "unauthorized");
}
