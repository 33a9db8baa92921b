//! Configuration and resource set-up: the SDK configuration (with zero-config emulator
//! defaults), and the table and FIFO queues the adapters need, created when absent.

use crate::store::{CRON_DUE_INDEX, PROCESSING_INDEX, TTL_ATTRIBUTE};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    Projection, ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
    TimeToLiveStatus,
};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;
use std::time::Duration;

/// Default table name.
pub const DEFAULT_TABLE: &str = "agentlane";
/// Default FIFO queue name.
pub const DEFAULT_QUEUE_NAME: &str = "agentlane-turns.fifo";
/// Default receives before a message moves to the dead-letter queue. It must exceed the
/// hand-backs a 48 h run needs (one per 15-minute Lambda invocation: 192).
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 250;
/// Default queue visibility timeout (seconds).
pub const DEFAULT_VISIBILITY_TIMEOUT_SECS: u32 = 60;
/// Message retention of both queues: SQS's maximum, 14 days.
const RETENTION_SECS: u32 = 14 * 24 * 3600;
/// How long `ensure_resources` waits for a new table to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// Static credentials used against an emulator when none are configured.
pub const EMULATOR_ACCESS_KEY: &str = "test";
/// Region used against an emulator when none is configured.
pub const EMULATOR_REGION: &str = "us-east-1";

/// Set-up and configuration failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// A configuration value is unusable.
    #[error("invalid AWS configuration: {0}")]
    InvalidConfig(String),
    /// An AWS call failed.
    #[error("{operation} failed: {message}")]
    Aws {
        /// The API operation, e.g. `CreateTable`.
        operation: &'static str,
        /// The error with its causes.
        message: String,
    },
    /// A resource did not become ready in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

fn aws_error<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> SetupError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    move |err| SetupError::Aws {
        operation,
        message: DisplayErrorContext(&err).to_string(),
    }
}

/// Names and settings of the AWS resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsConfig {
    /// The DynamoDB table (`AGENTLANE_TABLE`, default `agentlane`).
    pub table: String,
    /// The FIFO queue's name (`AGENTLANE_QUEUE_NAME`, default `agentlane-turns.fifo`).
    pub queue_name: String,
    /// A queue managed elsewhere (`AGENTLANE_QUEUE_URL`): used as is, no queue is created.
    pub queue_url: Option<String>,
    /// The FIFO dead-letter queue's name (`AGENTLANE_DLQ_NAME`, default: the queue name with
    /// `-dlq` before `.fifo`).
    pub dlq_name: String,
    /// Receives before a message moves to the DLQ (`AGENTLANE_MAX_RECEIVE_COUNT`, 1–1000).
    pub max_receive_count: u32,
    /// The queue's default visibility timeout in seconds (`AGENTLANE_VISIBILITY_TIMEOUT`).
    pub visibility_timeout_secs: u32,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            table: DEFAULT_TABLE.to_owned(),
            queue_name: DEFAULT_QUEUE_NAME.to_owned(),
            queue_url: None,
            dlq_name: dlq_name_for(DEFAULT_QUEUE_NAME),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
        }
    }
}

/// `name.fifo` → `name-dlq.fifo`.
pub fn dlq_name_for(queue_name: &str) -> String {
    let stem = queue_name.strip_suffix(".fifo").unwrap_or(queue_name);
    format!("{stem}-dlq.fifo")
}

impl AwsConfig {
    /// From the process environment (see the field docs for the variables).
    pub fn from_env() -> Result<Self, SetupError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any variable source; empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SetupError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let number = |name: &str, default: u32| -> Result<u32, SetupError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|_| {
                    SetupError::InvalidConfig(format!("{name}={v:?} is not a whole number"))
                }),
            }
        };
        let queue_name = get("AGENTLANE_QUEUE_NAME").unwrap_or_else(|| DEFAULT_QUEUE_NAME.into());
        let config = Self {
            table: get("AGENTLANE_TABLE").unwrap_or_else(|| DEFAULT_TABLE.into()),
            dlq_name: get("AGENTLANE_DLQ_NAME").unwrap_or_else(|| dlq_name_for(&queue_name)),
            queue_name,
            queue_url: get("AGENTLANE_QUEUE_URL"),
            max_receive_count: number("AGENTLANE_MAX_RECEIVE_COUNT", DEFAULT_MAX_RECEIVE_COUNT)?,
            visibility_timeout_secs: number(
                "AGENTLANE_VISIBILITY_TIMEOUT",
                DEFAULT_VISIBILITY_TIMEOUT_SECS,
            )?,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks names and numbers against AWS's rules.
    pub fn validate(&self) -> Result<(), SetupError> {
        let invalid = |msg: String| Err(SetupError::InvalidConfig(msg));
        let table_ok = (3..=255).contains(&self.table.len())
            && self
                .table
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !table_ok {
            return invalid(format!(
                "table name {:?} must be 3-255 characters of [A-Za-z0-9_.-]",
                self.table
            ));
        }
        for name in [&self.queue_name, &self.dlq_name] {
            let stem = name.strip_suffix(".fifo").unwrap_or_default();
            let ok = !stem.is_empty()
                && name.len() <= 80
                && stem.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !ok {
                return invalid(format!(
                    "queue name {name:?} must be a FIFO queue name: up to 80 characters of \
                     [A-Za-z0-9_-] ending in .fifo"
                ));
            }
        }
        if self.queue_name == self.dlq_name {
            return invalid("the queue and its dead-letter queue need different names".into());
        }
        if !(1..=1000).contains(&self.max_receive_count) {
            return invalid(format!(
                "max_receive_count {} must be 1-1000",
                self.max_receive_count
            ));
        }
        if self.visibility_timeout_secs > 43_200 {
            return invalid(format!(
                "visibility timeout {} s exceeds SQS's 43200 s",
                self.visibility_timeout_secs
            ));
        }
        Ok(())
    }
}

/// What to add to the standard configuration chain when pointing at an emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EmulatorFallbacks {
    static_credentials: bool,
    default_region: bool,
}

/// With `AWS_ENDPOINT_URL` set and nothing else configured, an emulator is meant: use static
/// test credentials and `us-east-1` rather than probing instance metadata. `profile_files` says
/// whether `~/.aws/config` or `~/.aws/credentials` exist.
fn emulator_fallbacks(lookup: &dyn Fn(&str) -> Option<String>, profile_files: bool) -> EmulatorFallbacks {
    let set = |name: &str| lookup(name).is_some_and(|v| !v.is_empty());
    if !set("AWS_ENDPOINT_URL") {
        return EmulatorFallbacks {
            static_credentials: false,
            default_region: false,
        };
    }
    let credentials_configured = profile_files
        || [
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_CONFIG_FILE",
        ]
        .into_iter()
        .any(set);
    let region_configured =
        profile_files || set("AWS_REGION") || set("AWS_DEFAULT_REGION") || set("AWS_PROFILE");
    EmulatorFallbacks {
        static_credentials: !credentials_configured,
        default_region: !region_configured,
    }
}

fn profile_files_exist() -> bool {
    std::env::var_os("HOME").is_some_and(|home| {
        let dir = std::path::Path::new(&home).join(".aws");
        dir.join("config").exists() || dir.join("credentials").exists()
    })
}

fn emulator_credentials() -> Credentials {
    Credentials::new(EMULATOR_ACCESS_KEY, EMULATOR_ACCESS_KEY, None, None, "agentlane-emulator")
}

/// The SDK configuration from the standard sources (`AWS_ENDPOINT_URL`, `AWS_REGION`,
/// credentials chain, profiles). When `AWS_ENDPOINT_URL` is set and no credentials (or region)
/// are configured, static test credentials (and `us-east-1`) are used, so an emulator works with
/// zero configuration.
pub async fn sdk_config() -> SdkConfig {
    let lookup = |name: &str| std::env::var(name).ok();
    let fallbacks = emulator_fallbacks(&lookup, profile_files_exist());
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if fallbacks.static_credentials {
        loader = loader.credentials_provider(emulator_credentials());
    }
    if fallbacks.default_region {
        loader = loader.region(Region::new(EMULATOR_REGION));
    }
    loader.load().await
}

/// A configuration for an emulator at `endpoint` (e.g. `http://127.0.0.1:4566`): static test
/// credentials and `us-east-1`, whatever the environment says.
pub async fn emulator_sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(EMULATOR_REGION))
        .credentials_provider(emulator_credentials())
        .load()
        .await
}

/// The resources the adapters use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// The table name.
    pub table: String,
    /// The FIFO queue's URL.
    pub queue_url: String,
    /// The dead-letter queue's URL; `None` when the queue is managed elsewhere
    /// ([`AwsConfig::queue_url`]).
    pub dlq_url: Option<String>,
}

/// Creates what is missing, idempotently: the table (on-demand, `PK`/`SK`, the `processing`
/// and `cronDue` GSIs, TTL on `expiresAt`), the FIFO dead-letter queue and the FIFO queue
/// (explicit deduplication ids, redrive to the DLQ). Existing resources are left as they are.
pub async fn ensure_resources(sdk: &SdkConfig, config: &AwsConfig) -> Result<Resources, SetupError> {
    config.validate()?;
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    ensure_table(&ddb, &config.table).await?;
    ensure_ttl(&ddb, &config.table).await?;
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let (queue_url, dlq_url) = match &config.queue_url {
        Some(url) => {
            check_queue(&sqs, url).await?;
            (url.clone(), None)
        }
        None => {
            let (queue, dlq) = ensure_queues(&sqs, config).await?;
            (queue, Some(dlq))
        }
    };
    Ok(Resources {
        table: config.table.clone(),
        queue_url,
        dlq_url,
    })
}

fn attribute(name: &str, kind: ScalarAttributeType) -> Result<AttributeDefinition, SetupError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(kind)
        .build()
        .map_err(|e| SetupError::InvalidConfig(e.to_string()))
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, SetupError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| SetupError::InvalidConfig(e.to_string()))
}

fn sparse_index(name: &str, hash: &str, range: &str) -> Result<GlobalSecondaryIndex, SetupError> {
    GlobalSecondaryIndex::builder()
        .index_name(name)
        .key_schema(key(hash, KeyType::Hash)?)
        .key_schema(key(range, KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .map_err(|e| SetupError::InvalidConfig(e.to_string()))
}

async fn table_status(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Option<TableStatus>, SetupError> {
    match ddb.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table.and_then(|t| t.table_status)),
        Err(err) if err.as_service_error().and_then(|e| e.code()) == Some("ResourceNotFoundException") => {
            Ok(None)
        }
        Err(err) => Err(aws_error("DescribeTable")(err)),
    }
}

async fn ensure_table(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), SetupError> {
    if table_status(ddb, table).await?.is_none() {
        let created = ddb
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attribute("PK", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("SK", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("procPk", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("procAt", ScalarAttributeType::N)?)
            .attribute_definitions(attribute("dueBucket", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("dueAt", ScalarAttributeType::N)?)
            .key_schema(key("PK", KeyType::Hash)?)
            .key_schema(key("SK", KeyType::Range)?)
            .global_secondary_indexes(sparse_index(PROCESSING_INDEX, "procPk", "procAt")?)
            .global_secondary_indexes(sparse_index(CRON_DUE_INDEX, "dueBucket", "dueAt")?)
            .send()
            .await;
        match created {
            Ok(_) => tracing::info!(table, "created DynamoDB table"),
            // Someone else created it in the meantime.
            Err(err) if err.as_service_error().and_then(|e| e.code()) == Some("ResourceInUseException") => {}
            Err(err) => return Err(aws_error("CreateTable")(err)),
        }
    }
    let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        match table_status(ddb, table).await? {
            Some(TableStatus::Active) => return Ok(()),
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(SetupError::Timeout(format!(
                    "table {table} is not ACTIVE after {TABLE_ACTIVE_TIMEOUT:?}"
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn ensure_ttl(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), SetupError> {
    let described = ddb
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(aws_error("DescribeTimeToLive"))?;
    let current = described.time_to_live_description;
    let status = current.as_ref().and_then(|d| d.time_to_live_status.clone());
    let attribute = current.as_ref().and_then(|d| d.attribute_name.clone());
    match status {
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling) => {
            if attribute.as_deref() == Some(TTL_ATTRIBUTE) {
                Ok(())
            } else {
                Err(SetupError::InvalidConfig(format!(
                    "table {table} has TTL on {attribute:?}; agentlane needs it on {TTL_ATTRIBUTE}"
                )))
            }
        }
        _ => {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(TTL_ATTRIBUTE)
                .build()
                .map_err(|e| SetupError::InvalidConfig(e.to_string()))?;
            ddb.update_time_to_live()
                .table_name(table)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(aws_error("UpdateTimeToLive"))?;
            Ok(())
        }
    }
}

async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<Option<String>, SetupError> {
    match sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => Ok(out.queue_url),
        Err(err) => {
            let code = err.as_service_error().and_then(|e| e.code()).unwrap_or_default();
            if code.ends_with("QueueDoesNotExist") || code.ends_with("NonExistentQueue") {
                Ok(None)
            } else {
                Err(aws_error("GetQueueUrl")(err))
            }
        }
    }
}

async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<String, SetupError> {
    let out = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .map_err(aws_error("CreateQueue"))?;
    tracing::info!(queue = name, "created SQS FIFO queue");
    out.queue_url
        .ok_or_else(|| SetupError::Aws {
            operation: "CreateQueue",
            message: format!("no URL returned for {name}"),
        })
}

async fn check_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<(), SetupError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::FifoQueue)
        .send()
        .await
        .map_err(aws_error("GetQueueAttributes"))?;
    let fifo = out
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::FifoQueue).cloned());
    if fifo.as_deref() == Some("true") {
        Ok(())
    } else {
        Err(SetupError::InvalidConfig(format!(
            "queue {url} is not a FIFO queue"
        )))
    }
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String, SetupError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(aws_error("GetQueueAttributes"))?;
    out.attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| SetupError::Aws {
            operation: "GetQueueAttributes",
            message: format!("no QueueArn for {url}"),
        })
}

fn fifo_attributes() -> HashMap<QueueAttributeName, String> {
    HashMap::from([
        (QueueAttributeName::FifoQueue, "true".to_owned()),
        (QueueAttributeName::ContentBasedDeduplication, "false".to_owned()),
        (QueueAttributeName::MessageRetentionPeriod, RETENTION_SECS.to_string()),
    ])
}

/// The queue and its DLQ (URLs), created when absent.
async fn ensure_queues(
    sqs: &aws_sdk_sqs::Client,
    config: &AwsConfig,
) -> Result<(String, String), SetupError> {
    let dlq = match queue_url(sqs, &config.dlq_name).await? {
        Some(url) => url,
        None => create_queue(sqs, &config.dlq_name, fifo_attributes()).await?,
    };
    if let Some(url) = queue_url(sqs, &config.queue_name).await? {
        return Ok((url, dlq));
    }
    let redrive = serde_json::json!({
        "deadLetterTargetArn": queue_arn(sqs, &dlq).await?,
        "maxReceiveCount": config.max_receive_count,
    });
    let mut attributes = fifo_attributes();
    attributes.insert(
        QueueAttributeName::VisibilityTimeout,
        config.visibility_timeout_secs.to_string(),
    );
    attributes.insert(QueueAttributeName::RedrivePolicy, redrive.to_string());
    // High-throughput FIFO: deduplication and throughput limits per message group (lane).
    attributes.insert(QueueAttributeName::DeduplicationScope, "messageGroup".into());
    attributes.insert(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId".into());
    let queue = create_queue(sqs, &config.queue_name, attributes).await?;
    Ok((queue, dlq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn defaults_without_environment() {
        let config = AwsConfig::from_lookup(env(&[])).unwrap_or_default();
        assert_eq!(config, AwsConfig::default());
        assert_eq!(config.table, "agentlane");
        assert_eq!(config.queue_name, "agentlane-turns.fifo");
        assert_eq!(config.dlq_name, "agentlane-turns-dlq.fifo");
        assert_eq!(config.queue_url, None);
    }

    #[test]
    fn environment_overrides_and_derives_the_dlq_name() {
        let config = AwsConfig::from_lookup(env(&[
            ("AGENTLANE_TABLE", "table-1"),
            ("AGENTLANE_QUEUE_NAME", "q1.fifo"),
            ("AGENTLANE_QUEUE_URL", ""),
            ("AGENTLANE_MAX_RECEIVE_COUNT", "7"),
        ]));
        assert_eq!(
            config,
            Ok(AwsConfig {
                table: "table-1".into(),
                queue_name: "q1.fifo".into(),
                queue_url: None,
                dlq_name: "q1-dlq.fifo".into(),
                max_receive_count: 7,
                visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
            })
        );
    }

    #[test]
    fn invalid_settings_are_refused() {
        for pairs in [
            &[("AGENTLANE_QUEUE_NAME", "standard-queue")][..],
            &[("AGENTLANE_TABLE", "a")][..],
            &[("AGENTLANE_MAX_RECEIVE_COUNT", "0")][..],
            &[("AGENTLANE_MAX_RECEIVE_COUNT", "lots")][..],
            &[("AGENTLANE_DLQ_NAME", "agentlane-turns.fifo")][..],
        ] {
            let lookup = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            assert!(
                matches!(AwsConfig::from_lookup(lookup), Err(SetupError::InvalidConfig(_))),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn emulator_fallbacks_apply_only_to_an_unconfigured_endpoint() {
        let none = EmulatorFallbacks {
            static_credentials: false,
            default_region: false,
        };
        assert_eq!(emulator_fallbacks(&env(&[]), false), none);
        assert_eq!(
            emulator_fallbacks(&env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]), false),
            EmulatorFallbacks {
                static_credentials: true,
                default_region: true,
            }
        );
        assert_eq!(
            emulator_fallbacks(
                &env(&[
                    ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
                    ("AWS_ACCESS_KEY_ID", "AKIA"),
                    ("AWS_REGION", "eu-west-1"),
                ]),
                false
            ),
            none
        );
        assert_eq!(
            emulator_fallbacks(&env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]), true),
            none
        );
    }
}
