//! The AWS emulator (DynamoDB + SQS, `AWS_ENDPOINT_URL`, default `http://127.0.0.1:4566`) with a
//! fresh table and FIFO queue per test, the API in front of them, and the queue's messages as
//! the SQS event Lambda's event source mapping delivers.

use agentlane_api::{ApiConfig, ApiKeys, ApiState};
use agentlane_aws::aws_sdk_sqs::Client as SqsClient;
use agentlane_aws::aws_sdk_sqs::types::MessageSystemAttributeName;
use agentlane_aws::{AwsConfig, DynamoStore, SqsLaneQueue};
use agentlane_core::SystemClock;
use agentlane_host::Backends;
use aws_lambda_events::event::sqs::SqsEvent;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

const API_KEY: &str = "runner-test-key-0123456789";

/// A table and a FIFO queue of their own on the emulator.
pub struct Emulator {
    pub backends: Backends,
    sqs: SqsClient,
    queue_url: String,
}

impl Emulator {
    /// Creates the resources; fails the test when the emulator does not answer.
    pub async fn start() -> Self {
        let sdk = match std::env::var("AWS_ENDPOINT_URL") {
            Ok(url) if !url.is_empty() => agentlane_aws::sdk_config().await,
            _ => agentlane_aws::setup::emulator_sdk_config("http://127.0.0.1:4566").await,
        };
        let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let config = AwsConfig {
            table: format!("agentlane-runner-{id}"),
            queue_name: format!("agentlane-runner-{id}.fifo"),
            dlq_name: format!("agentlane-runner-{id}-dlq.fifo"),
            ..AwsConfig::default()
        };
        let resources = tokio::time::timeout(
            Duration::from_secs(30),
            agentlane_aws::ensure_resources(&sdk, &config),
        )
        .await
        .expect("the AWS emulator does not answer: start it with localstack/start-emulator.sh")
        .expect("creating the table and queue on the emulator");
        let sqs = SqsClient::new(&sdk);
        let store = DynamoStore::new(
            agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
            resources.table,
        );
        let backends = Backends {
            secrets: Arc::new(agentlane_secrets::Vault::new(
                Arc::new(store.clone()),
                Arc::new(agentlane_aws::kms::KmsKeyWrap::from_env(&sdk).unwrap()),
            )),
            store: Arc::new(store.clone()),
            processing: Arc::new(store.clone()),
            catalog: Arc::new(store.clone()),
            retention: Arc::new(store.clone()),
            keys: Arc::new(store.clone()),
            slots: Arc::new(store.clone()),
            spend: Arc::new(store.clone()),
            agents: Arc::new(store.clone()),
            cron: Arc::new(store),
            queue: Arc::new(SqsLaneQueue::new(sqs.clone(), resources.queue_url.clone())),
            clock: Arc::new(SystemClock),
            kind: agentlane_host::BackendKind::Aws,
        };
        Self {
            backends,
            sqs,
            queue_url: resources.queue_url,
        }
    }

    /// One API request as tenant `acme`; the status and the JSON body.
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let app = agentlane_api::app(ApiState {
            shared_slots: None,
            spend: None,
            store: self.backends.store.clone(),
            queue: self.backends.queue.clone(),
            clock: self.backends.clock.clone(),
            keys: ApiKeys::parse(&format!("acme:{API_KEY}")).unwrap(),
            config: ApiConfig::default(),
            cron: self.backends.cron.clone(),
            catalog: self.backends.catalog.clone(),
            agents: self.backends.agents.clone(),
            secrets: self.backends.secrets.clone(),
        });
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {API_KEY}"))
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Submits `message` on `session`; returns the run id.
    pub async fn submit(&self, session: &str, message: &str) -> String {
        let (status, body) = self
            .api(
                Method::POST,
                "/v1/agent",
                Some(json!({ "sessionKey": session, "message": message })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["runId"].as_str().unwrap().to_owned()
    }

    /// `GET /v1/runs/{id}`.
    pub async fn run(&self, run_id: &str) -> Value {
        let (status, body) = self
            .api(Method::GET, &format!("/v1/runs/{run_id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Receives what the queue delivers within `wait` (up to 10 messages, hidden for 30 s) and
    /// frames it as Lambda does: an SQS event whose records carry the system attributes.
    pub async fn receive_event(&self, wait: Duration) -> SqsEvent {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .wait_time_seconds(i32::try_from(wait.as_secs()).unwrap())
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let records: Vec<Value> = received
            .messages()
            .iter()
            .map(|m| {
                let attributes: serde_json::Map<String, Value> = m
                    .attributes()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                    .collect();
                json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:agentlane-turns.fifo",
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        serde_json::from_value(json!({ "Records": records })).unwrap()
    }
}
