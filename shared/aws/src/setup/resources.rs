//! Creating the table and queues when absent (idempotent).

use super::{AwsConfig, SetupError, aws_error};
use crate::store::{
    CRON_DUE_INDEX, PENDING_INDEX, PROCESSING_INDEX, SESSION_RUNS_INDEX, SESSIONS_INDEX,
    TTL_ATTRIBUTE,
};
use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;
use std::time::Duration;

/// How long `ensure_resources` waits for a new table to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause between two looks at a table that is not yet ACTIVE.
const TABLE_ACTIVE_POLL: Duration = Duration::from_millis(250);
/// Message retention of both queues: SQS's maximum, 14 days.
const RETENTION_SECS: u32 = 14 * 24 * 3600;
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
    /// The KMS key of tenant secrets (the configured one, or `alias/<table>-secrets`).
    pub secrets_key: super::SecretsKey,
}

/// Creates what is missing, idempotently: the table (on-demand, `PK`/`SK`, the `processing`
/// and `cronDue` GSIs, TTL on `expiresAt`), the FIFO dead-letter queue and the FIFO queue
/// (explicit deduplication ids, redrive to the DLQ), the KMS key of tenant secrets (symmetric,
/// rotated yearly, aliased `alias/<table>-secrets`; a configured `AGENTLANE_SECRETS_KMS_KEY` is
/// checked instead). Existing resources are left as they are.
pub async fn ensure_resources(
    sdk: &SdkConfig,
    config: &AwsConfig,
) -> Result<Resources, SetupError> {
    config.validate()?;
    ensure_table(sdk, &config.table).await?;
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
    let secrets_key = super::secrets_key::ensure_secrets_key(sdk, config).await?;
    Ok(Resources {
        table: config.table.clone(),
        queue_url,
        dlq_url,
        secrets_key,
    })
}

/// The queue URL to use without creating anything: the configured URL, else the URL of the
/// queue named `queue_name` (an error that says to run `agentlane setup-aws` when absent).
pub async fn resolve_queue_url(sdk: &SdkConfig, config: &AwsConfig) -> Result<String, SetupError> {
    if let Some(url) = &config.queue_url {
        return Ok(url.clone());
    }
    let sqs = aws_sdk_sqs::Client::new(sdk);
    match sqs
        .get_queue_url()
        .queue_name(&config.queue_name)
        .send()
        .await
    {
        Ok(out) => out.queue_url.ok_or_else(|| SetupError::Aws {
            operation: "GetQueueUrl",
            message: "the answer had no queue URL".into(),
        }),
        Err(err) => {
            let missing = err
                .as_service_error()
                .and_then(|e| e.code())
                .is_some_and(|c| c.contains("NonExistentQueue"));
            if missing {
                Err(SetupError::InvalidConfig(format!(
                    "queue {} does not exist: run `agentlane setup-aws` first",
                    config.queue_name
                )))
            } else {
                Err(aws_error("GetQueueUrl")(err))
            }
        }
    }
}

/// The GSIs added after the table's first design, as (name, partition key (S), sort key (N)):
/// [`ensure_table`] adds the missing ones to an older table.
const LATER_INDEXES: [(&str, &str, &str); 3] = [
    (PENDING_INDEX, "pendPk", "pendAt"),
    (SESSIONS_INDEX, "sessTenant", "updatedAt"),
    (SESSION_RUNS_INDEX, "runSession", "sessionSeq"),
];

/// Creates the table when absent (on-demand, `PK`/`SK`, the `processing`, `cronDue`,
/// `pending`, `sessions` and `sessionRuns` GSIs; an older table gets the later ones added),
/// waits until it is active and enables TTL on `expiresAt`. Idempotent.
pub async fn ensure_table(sdk: &SdkConfig, table: &str) -> Result<(), SetupError> {
    let probe = AwsConfig {
        table: table.to_owned(),
        ..AwsConfig::default()
    };
    probe.validate()?;
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    create_table_if_absent(&ddb, table).await?;
    for (name, hash, range) in LATER_INDEXES {
        ensure_index(&ddb, table, name, hash, range).await?;
    }
    ensure_ttl(&ddb, table).await
}

/// Adds the sparse GSI `name` (`hash` S / `range` N) to a table created before it existed,
/// and waits until it is active (DynamoDB builds one new index at a time). A no-op on a table
/// that has it.
async fn ensure_index(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    name: &str,
    hash: &str,
    range: &str,
) -> Result<(), SetupError> {
    let index_status = |out: &aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput| {
        out.table
            .as_ref()
            .and_then(|t| t.global_secondary_indexes.as_ref())
            .and_then(|gsis| {
                gsis.iter()
                    .find(|g| g.index_name.as_deref() == Some(name))
                    .map(|g| g.index_status.clone())
            })
    };
    let describe = || ddb.describe_table().table_name(table).send();
    let out = describe().await.map_err(aws_error("DescribeTable"))?;
    if index_status(&out).is_none() {
        let gsi = sparse_index(name, hash, range)?;
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(name)
            .set_key_schema(Some(gsi.key_schema().to_vec()))
            .set_projection(gsi.projection().cloned())
            .build()
            .map_err(|e| SetupError::InvalidConfig(e.to_string()))?;
        let updated = ddb
            .update_table()
            .table_name(table)
            .attribute_definitions(attribute(hash, ScalarAttributeType::S)?)
            .attribute_definitions(attribute(range, ScalarAttributeType::N)?)
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder().create(create).build(),
            )
            .send()
            .await;
        match updated {
            Ok(_) => tracing::info!(table, index = name, "added a GSI"),
            // Someone else is adding it.
            Err(err)
                if err.as_service_error().and_then(|e| e.code())
                    == Some("ResourceInUseException") => {}
            Err(err) => return Err(aws_error("UpdateTable")(err)),
        }
    }
    let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        let out = describe().await.map_err(aws_error("DescribeTable"))?;
        match index_status(&out) {
            Some(Some(IndexStatus::Active) | None) => return Ok(()),
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(SetupError::Timeout(format!(
                    "the {name} index of {table} is not ACTIVE after {TABLE_ACTIVE_TIMEOUT:?}"
                )));
            }
            _ => tokio::time::sleep(agentlane_core::backoff::jittered(TABLE_ACTIVE_POLL)).await,
        }
    }
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
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
        )
        .build()
        .map_err(|e| SetupError::InvalidConfig(e.to_string()))
}

async fn table_status(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Option<TableStatus>, SetupError> {
    match ddb.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table.and_then(|t| t.table_status)),
        Err(err)
            if err.as_service_error().and_then(|e| e.code())
                == Some("ResourceNotFoundException") =>
        {
            Ok(None)
        }
        Err(err) => Err(aws_error("DescribeTable")(err)),
    }
}

async fn create_table_if_absent(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), SetupError> {
    if table_status(ddb, table).await?.is_none() {
        let created = ddb
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attribute("PK", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("SK", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("procPk", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("procAt", ScalarAttributeType::N)?)
            .attribute_definitions(attribute("pendPk", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("pendAt", ScalarAttributeType::N)?)
            .attribute_definitions(attribute("dueBucket", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("dueAt", ScalarAttributeType::N)?)
            .attribute_definitions(attribute("sessTenant", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("updatedAt", ScalarAttributeType::N)?)
            .attribute_definitions(attribute("runSession", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("sessionSeq", ScalarAttributeType::N)?)
            .key_schema(key("PK", KeyType::Hash)?)
            .key_schema(key("SK", KeyType::Range)?)
            .global_secondary_indexes(sparse_index(PROCESSING_INDEX, "procPk", "procAt")?)
            .global_secondary_indexes(sparse_index(CRON_DUE_INDEX, "dueBucket", "dueAt")?)
            .global_secondary_indexes(sparse_index(PENDING_INDEX, "pendPk", "pendAt")?)
            .global_secondary_indexes(sparse_index(SESSIONS_INDEX, "sessTenant", "updatedAt")?)
            .global_secondary_indexes(sparse_index(
                SESSION_RUNS_INDEX,
                "runSession",
                "sessionSeq",
            )?)
            .send()
            .await;
        match created {
            Ok(_) => tracing::info!(table, "created DynamoDB table"),
            // Someone else created it in the meantime.
            Err(err)
                if err.as_service_error().and_then(|e| e.code())
                    == Some("ResourceInUseException") => {}
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
            // Jittered, so set-ups started together (a fleet of cold starts) poll apart.
            _ => tokio::time::sleep(agentlane_core::backoff::jittered(TABLE_ACTIVE_POLL)).await,
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
            let code = err
                .as_service_error()
                .and_then(|e| e.code())
                .unwrap_or_default();
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
    out.queue_url.ok_or_else(|| SetupError::Aws {
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
        (
            QueueAttributeName::ContentBasedDeduplication,
            "false".to_owned(),
        ),
        (
            QueueAttributeName::MessageRetentionPeriod,
            RETENTION_SECS.to_string(),
        ),
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
    attributes.insert(
        QueueAttributeName::DeduplicationScope,
        "messageGroup".into(),
    );
    attributes.insert(
        QueueAttributeName::FifoThroughputLimit,
        "perMessageGroupId".into(),
    );
    let queue = create_queue(sqs, &config.queue_name, attributes).await?;
    Ok((queue, dlq))
}
