//! Shared set-up for the emulator tests: the endpoint (`AWS_ENDPOINT_URL`, default
//! `http://127.0.0.1:4566`), a hard failure when nothing answers there, and randomly named
//! tables and queues, fresh for every caller.

use agentlane_aws::aws_config::SdkConfig;
use agentlane_aws::aws_sdk_dynamodb::error::DisplayErrorContext;
use agentlane_aws::setup::{self, AwsConfig};
use agentlane_aws::{DynamoStore, SqsLaneQueue, ensure_resources, ensure_table};
use std::time::Duration;

/// Where the tests look for the emulator when `AWS_ENDPOINT_URL` is unset.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4566";

pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
}

/// The SDK configuration for the emulator; panics (fails the test) when it does not answer.
pub async fn sdk() -> SdkConfig {
    let endpoint = endpoint();
    let sdk = if std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| !v.is_empty()) {
        setup::sdk_config().await
    } else {
        setup::emulator_sdk_config(&endpoint).await
    };
    require_reachable(&sdk, &endpoint).await;
    sdk
}

/// Fails with instructions when no DynamoDB answers at `endpoint`.
pub async fn require_reachable(sdk: &SdkConfig, endpoint: &str) {
    let ddb = agentlane_aws::aws_sdk_dynamodb::Client::new(sdk);
    let answer = tokio::time::timeout(Duration::from_secs(15), ddb.list_tables().limit(1).send());
    match answer.await {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => panic!(
            "the AWS emulator at {endpoint} is not reachable: {}. Start it with \
             `localstack/start-emulator.sh` (or point AWS_ENDPOINT_URL at a running one).",
            DisplayErrorContext(&err)
        ),
        Err(_) => panic!(
            "the AWS emulator at {endpoint} is not reachable: no answer within 15 s. Start it \
             with `localstack/start-emulator.sh` (or point AWS_ENDPOINT_URL at a running one)."
        ),
    }
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Fresh, random resource names.
pub fn fresh_config() -> AwsConfig {
    let id = short_id();
    AwsConfig {
        table: format!("agentlane-test-{id}"),
        queue_name: format!("agentlane-test-{id}.fifo"),
        dlq_name: format!("agentlane-test-{id}-dlq.fifo"),
        ..AwsConfig::default()
    }
}

/// A store on a table of its own. Tables are not shared between tests: moto undoes a cancelled
/// transaction by restoring a copy of the whole table taken when the transaction began, which
/// would also undo other tests' concurrent writes to that table.
pub async fn store() -> DynamoStore {
    let sdk = sdk().await;
    let table = fresh_table(&sdk).await;
    DynamoStore::new(agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk), table)
}

/// A new table with a random name.
pub async fn fresh_table(sdk: &SdkConfig) -> String {
    let table = fresh_config().table;
    ensure_table(sdk, &table).await.expect("ensure_table");
    table
}

/// A queue nobody else uses (a new FIFO queue + DLQ, and a table).
pub async fn fresh_queue() -> SqsLaneQueue {
    let sdk = sdk().await;
    let resources = ensure_resources(&sdk, &fresh_config())
        .await
        .expect("ensure_resources for a test queue");
    SqsLaneQueue::new(
        agentlane_aws::aws_sdk_sqs::Client::new(&sdk),
        resources.queue_url,
    )
}
