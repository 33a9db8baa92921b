//! AWS backends of agentlane: [`DynamoStore`] (the `Store` on one DynamoDB table) and
//! [`SqsLaneQueue`] (the `LaneQueue` on one SQS FIFO queue), plus [`setup`]: SDK configuration
//! and idempotent creation of the table and queues.
//!
//! ```ignore
//! let sdk = agentlane_aws::setup::sdk_config().await;
//! let config = agentlane_aws::setup::AwsConfig::from_env()?;
//! let resources = agentlane_aws::setup::ensure_resources(&sdk, &config).await?;
//! let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), resources.table);
//! let queue = SqsLaneQueue::new(aws_sdk_sqs::Client::new(&sdk), resources.queue_url);
//! ```
//!
//! Against an emulator, run `localstack/start-emulator.sh` and set
//! `AWS_ENDPOINT_URL=http://127.0.0.1:4566`; credentials and region then default to test values.

mod hash;
pub mod queue;
pub mod setup;
pub mod store;

pub use queue::{SqsLaneQueue, delivery_from_parts};
pub use setup::{AwsConfig, Resources, SetupError, ensure_resources, sdk_config};
pub use store::DynamoStore;

/// The SDK crates, so users need no direct dependency of their own.
pub use aws_config;
pub use aws_sdk_dynamodb;
pub use aws_sdk_sqs;
