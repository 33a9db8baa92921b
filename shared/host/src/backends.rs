//! The store, the lane queue and the clock a host runs on, opened from the backend its
//! features provide.

use crate::settings::env;
#[cfg(any(feature = "embedded", feature = "aws"))]
use agentlane_core::SystemClock;
use agentlane_core::{Clock, LaneQueue, Store};
use anyhow::bail;
use std::sync::Arc;

/// The store, the lane queue and the clock a host runs on.
#[derive(Clone)]
pub struct Backends {
    /// Sessions, runs, transcripts and events.
    pub store: Arc<dyn Store>,
    /// The lane queue (one FIFO group per session).
    pub queue: Arc<dyn LaneQueue>,
    /// The clock every component reads.
    pub clock: Arc<dyn Clock>,
    /// Cron jobs (the same database or table as `store`).
    pub cron: Arc<dyn agentlane_core::cron::CronStore>,
    /// Agents (the same database or table).
    pub agents: Arc<dyn agentlane_core::AgentStore>,
    /// The processing sessions, for the stuck-session sweep (the same database or table).
    pub processing: Arc<dyn agentlane_core::ProcessingIndex>,
    /// A tenant's sessions and a session's runs as lists; a session's deletion (the same
    /// database or table).
    pub catalog: Arc<dyn agentlane_core::SessionCatalog>,
    /// The tenants with sessions and their stale sessions, for the retention sweep (the same
    /// database or table).
    pub retention: Arc<dyn agentlane_core::SessionRetention>,
    /// Store-backed API keys (`agentlane keys`; the same database or table).
    pub keys: Arc<dyn agentlane_core::KeyStore>,
    /// Per-tenant stream and wait slots shared by every process (the same database or table).
    pub slots: Arc<dyn agentlane_core::SlotStore>,
    /// Tenants' spend per period, for their budgets (the same database or table).
    pub spend: Arc<dyn agentlane_core::SpendLedger>,
    /// Tenants' secrets, sealed at rest (the same database or table; data keys wrapped by
    /// the data directory's key file, or by KMS on AWS).
    pub secrets: Arc<agentlane_secrets::Vault>,
    /// Which backend these are.
    pub kind: BackendKind,
}

/// Which backend `AGENTLANE_BACKEND` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// SQLite under the data directory (the default).
    Embedded,
    /// DynamoDB + SQS FIFO (AWS, LocalStack, or an emulator via `AWS_ENDPOINT_URL`).
    Aws,
}

impl BackendKind {
    /// The backend `AGENTLANE_BACKEND` names (`embedded` when unset).
    pub fn from_env() -> anyhow::Result<Self> {
        match env("AGENTLANE_BACKEND").as_deref() {
            None | Some("embedded") => Ok(Self::Embedded),
            Some("aws") => Ok(Self::Aws),
            Some(other) => bail!("AGENTLANE_BACKEND must be `embedded` or `aws`, got {other:?}"),
        }
    }
}

/// Opens the embedded backend under `data_dir` (created if missing).
#[cfg(feature = "embedded")]
pub fn open_embedded(data_dir: &std::path::Path) -> anyhow::Result<Backends> {
    Ok(open_embedded_backend(data_dir)?.0)
}

/// Like [`open_embedded`], with the SQLite backend itself (e.g. for its dead-letter table).
#[cfg(feature = "embedded")]
pub fn open_embedded_backend(
    data_dir: &std::path::Path,
) -> anyhow::Result<(Backends, agentlane_store_sqlite::SqliteBackend)> {
    use agentlane_store_sqlite::SqliteBackend;
    use anyhow::Context;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    let backend = SqliteBackend::open(data_dir)
        .with_context(|| format!("cannot open the embedded store in {}", data_dir.display()))?;
    // The queue dead-letters a message one failed delivery after the runner's poison cap, so
    // the pickup that ends a poisoned run `poisoned` still comes.
    let cap = std::env::var("AGENTLANE_MAX_FAILED_PICKUPS").ok();
    if let Some(cap) = cap.and_then(|v| v.trim().parse::<u32>().ok()) {
        backend.set_max_failed_deliveries(cap.saturating_add(1));
    }
    // The backend is also the lane queue below: an accept queues its run in its own commit.
    backend.queue_accepted_turns();
    let backends = Backends {
        store: Arc::new(backend.clone()),
        cron: Arc::new(backend.clone()),
        agents: Arc::new(backend.clone()),
        processing: Arc::new(backend.clone()),
        catalog: Arc::new(backend.clone()),
        retention: Arc::new(backend.clone()),
        keys: Arc::new(backend.clone()),
        slots: Arc::new(backend.clone()),
        spend: Arc::new(backend.clone()),
        queue: Arc::new(backend.clone()),
        clock: Arc::new(SystemClock),
        secrets: Arc::new(
            agentlane_secrets::Vault::new(
                Arc::new(backend.clone()),
                Arc::new(agentlane_secrets::LocalKeyFile::in_dir(data_dir)),
            )
            .with_ttl(crate::settings::secret_cache_ttl()?),
        ),
        kind: BackendKind::Embedded,
    };
    Ok((backends, backend))
}

/// Opens the AWS backend named by the environment (`AGENTLANE_TABLE`, `AGENTLANE_QUEUE_URL` or
/// `AGENTLANE_QUEUE_NAME`, `AGENTLANE_TENANT_LANES`, standard SDK settings). Creates nothing.
#[cfg(feature = "aws")]
pub async fn open_aws() -> anyhow::Result<Backends> {
    use agentlane_aws::{AwsConfig, DynamoStore, SqsLaneQueue};
    let sdk = agentlane_aws::sdk_config().await;
    let config = AwsConfig::from_env()?;
    let queue_url = agentlane_aws::resolve_queue_url(&sdk, &config).await?;
    let store = DynamoStore::new(
        agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
        config.table,
    );
    // The KMS key tenant secrets' data keys are made under (AGENTLANE_SECRETS_KMS_KEY).
    let secrets = Arc::new(
        agentlane_secrets::Vault::new(
            Arc::new(store.clone()),
            Arc::new(agentlane_aws::kms::KmsKeyWrap::from_env(&sdk)?),
        )
        .with_ttl(crate::settings::secret_cache_ttl()?),
    );
    Ok(Backends {
        secrets,
        store: Arc::new(store.clone()),
        processing: Arc::new(store.clone()),
        catalog: Arc::new(store.clone()),
        retention: Arc::new(store.clone()),
        keys: Arc::new(store.clone()),
        slots: Arc::new(store.clone()),
        spend: Arc::new(store.clone()),
        agents: Arc::new(store.clone()),
        cron: Arc::new(store),
        queue: Arc::new(
            SqsLaneQueue::new(agentlane_aws::aws_sdk_sqs::Client::new(&sdk), queue_url)
                .with_tenant_lanes(config.tenant_lanes),
        ),
        clock: Arc::new(SystemClock),
        kind: BackendKind::Aws,
    })
}

/// The lane queue's SQS dead-letter queue, for the sweep (SPEC §10): `AGENTLANE_DLQ_URL`, else
/// the queue named `AGENTLANE_DLQ_NAME` (default: the lane queue's name with `-dlq`) when it
/// exists. `None` when there is none: the sweep then reads no dead letters.
#[cfg(feature = "aws")]
pub async fn aws_dead_letters() -> anyhow::Result<Option<agentlane_aws::SqsDeadLetters>> {
    let sdk = agentlane_aws::sdk_config().await;
    let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    if let Some(url) = std::env::var("AGENTLANE_DLQ_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        return Ok(Some(agentlane_aws::SqsDeadLetters::new(sqs, url.trim())));
    }
    let config = agentlane_aws::AwsConfig::from_env()?;
    match sqs
        .get_queue_url()
        .queue_name(&config.dlq_name)
        .send()
        .await
    {
        Ok(out) => Ok(out
            .queue_url
            .map(|url| agentlane_aws::SqsDeadLetters::new(sqs, url))),
        Err(e) => {
            tracing::warn!(
                queue = %config.dlq_name,
                error = %agentlane_aws::aws_sdk_sqs::error::DisplayErrorContext(&e),
                "no dead-letter queue found; the sweep reads no dead letters (set AGENTLANE_DLQ_URL)"
            );
            Ok(None)
        }
    }
}

/// The store-backed API keys of the AWS backend named by the environment (`AGENTLANE_TABLE`,
/// standard SDK settings): the table only, no queue (for `agentlane keys`).
#[cfg(feature = "aws")]
pub async fn open_aws_keys() -> anyhow::Result<Arc<dyn agentlane_core::KeyStore>> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = agentlane_aws::AwsConfig::from_env()?;
    Ok(Arc::new(agentlane_aws::DynamoStore::new(
        agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
        config.table,
    )))
}

/// The tenant eraser of the AWS backend named by the environment (`AGENTLANE_TABLE`, standard
/// SDK settings): the table only, no queue. Creates nothing.
#[cfg(feature = "aws")]
pub async fn open_aws_eraser() -> anyhow::Result<Arc<dyn agentlane_core::TenantEraser>> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = agentlane_aws::AwsConfig::from_env()?;
    Ok(Arc::new(agentlane_aws::DynamoStore::new(
        agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
        config.table,
    )))
}

/// Creates the table and queues named by the environment when absent (idempotent).
#[cfg(feature = "aws")]
pub async fn setup_aws() -> anyhow::Result<agentlane_aws::Resources> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = agentlane_aws::AwsConfig::from_env()?;
    Ok(agentlane_aws::ensure_resources(&sdk, &config).await?)
}

/// Adds the index attributes (`sessTenant`, `runSession`) and tenant-registry items that items
/// written before them lack, on the table named by the environment (scans it: an operator's
/// one-off, `agentlane setup-aws --backfill-indexes`).
#[cfg(feature = "aws")]
pub async fn backfill_aws_indexes() -> anyhow::Result<agentlane_aws::IndexBackfill> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = agentlane_aws::AwsConfig::from_env()?;
    let store = agentlane_aws::DynamoStore::new(
        agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
        config.table,
    );
    Ok(store.backfill_indexes().await?)
}
