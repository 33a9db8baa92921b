//! AWS backends of agentlane: [`DynamoStore`] (the `Store` on one DynamoDB table) and
//! [`SqsLaneQueue`] (the `LaneQueue` on one SQS FIFO queue), plus [`setup`]: SDK configuration
//! and idempotent creation of the table and queues.
//!
//! ```no_run
//! # async fn wire() -> Result<(), agentlane_aws::SetupError> {
//! use agentlane_aws::{AwsConfig, DynamoStore, SqsLaneQueue, ensure_resources, sdk_config};
//!
//! let sdk = sdk_config().await;
//! let resources = ensure_resources(&sdk, &AwsConfig::from_env()?).await?;
//! let store = DynamoStore::new(agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk), resources.table);
//! let queue = SqsLaneQueue::new(agentlane_aws::aws_sdk_sqs::Client::new(&sdk), resources.queue_url);
//! # let _ = (store, queue);
//! # Ok(())
//! # }
//! ```
//!
//! Against an emulator, run `localstack/start-emulator.sh` and set
//! `AWS_ENDPOINT_URL=http://127.0.0.1:4566`; credentials and region then default to test values.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

mod hash;
pub mod kms;
pub mod queue;
pub mod secrets;
pub mod setup;
pub mod store;

pub use queue::{SqsDeadLetters, SqsLaneQueue, delivery_from_parts};
pub use setup::{
    AwsConfig, Resources, SetupError, ensure_resources, ensure_table, resolve_queue_url, sdk_config,
};
pub use store::{DynamoStore, IndexBackfill};

/// The SDK crates, so users need no direct dependency of their own.
pub use aws_config;
pub use aws_sdk_dynamodb;
pub use aws_sdk_kms;
pub use aws_sdk_secretsmanager;
pub use aws_sdk_sqs;
pub use aws_sdk_ssm;
