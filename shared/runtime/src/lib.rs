//! The wiring every host of agentlane shares — `agentlane serve` and the three Lambda
//! functions: settings from the environment (SPEC §13), the backends (embedded SQLite or
//! DynamoDB + SQS), the model router, the tools and the runner. Hosts stay thin.

pub mod settings;

pub use settings::{DEMO_MODEL, ModelSettings, ProviderKind, ProviderSettings, env, env_ms};

use agentlane_agent::models::Profile;
use agentlane_agent::{ModelRouter, Runner, RunnerConfig};
use agentlane_api::{ApiConfig, ApiKeys};
use agentlane_aws::{AwsConfig, DynamoStore, Resources, SqsLaneQueue};
use agentlane_core::{Clock, LaneQueue, Store, SystemClock};
use agentlane_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use agentlane_providers::demo::DemoModel;
use agentlane_providers::openai::{OpenAiConfig, OpenAiProvider};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_tools::ToolRegistry;
use agentlane_tools::current_time::CurrentTime;
use agentlane_tools::http_fetch::{HttpFetch, HttpFetchConfig};
use agentlane_tools::ssrf::SsrfPolicy;
use anyhow::{Context, bail};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The store, the lane queue and the clock a host runs on.
#[derive(Clone)]
pub struct Backends {
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn LaneQueue>,
    pub clock: Arc<dyn Clock>,
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
    pub fn from_env() -> anyhow::Result<Self> {
        match env("AGENTLANE_BACKEND").as_deref() {
            None | Some("embedded") => Ok(Self::Embedded),
            Some("aws") => Ok(Self::Aws),
            Some(other) => bail!("AGENTLANE_BACKEND must be `embedded` or `aws`, got {other:?}"),
        }
    }
}

/// Opens the embedded backend under `data_dir` (created if missing).
pub fn open_embedded(data_dir: &Path) -> anyhow::Result<Backends> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    let backend = SqliteBackend::open(data_dir)
        .with_context(|| format!("cannot open the embedded store in {}", data_dir.display()))?;
    Ok(Backends {
        store: Arc::new(backend.clone()),
        queue: Arc::new(backend),
        clock: Arc::new(SystemClock),
    })
}

/// Opens the AWS backend named by the environment (`AGENTLANE_TABLE`, `AGENTLANE_QUEUE_URL` or
/// `AGENTLANE_QUEUE_NAME`, standard SDK settings). Creates nothing.
pub async fn open_aws() -> anyhow::Result<Backends> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = AwsConfig::from_env()?;
    let queue_url = agentlane_aws::resolve_queue_url(&sdk, &config).await?;
    Ok(Backends {
        store: Arc::new(DynamoStore::new(
            agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
            config.table,
        )),
        queue: Arc::new(SqsLaneQueue::new(
            agentlane_aws::aws_sdk_sqs::Client::new(&sdk),
            queue_url,
        )),
        clock: Arc::new(SystemClock),
    })
}

/// Creates the table and queues named by the environment when absent (idempotent).
pub async fn setup_aws() -> anyhow::Result<Resources> {
    let sdk = agentlane_aws::sdk_config().await;
    let config = AwsConfig::from_env()?;
    Ok(agentlane_aws::ensure_resources(&sdk, &config).await?)
}

/// The runner settings from the environment (defaults: SPEC §12).
pub fn runner_config(self_hosted: bool) -> anyhow::Result<RunnerConfig> {
    let d = RunnerConfig::default();
    let idle_default = if self_hosted {
        d.model_idle_timeout_self_hosted
    } else {
        d.model_idle_timeout
    };
    Ok(RunnerConfig {
        lock_lease: env_ms("AGENTLANE_LOCK_LEASE_MS", d.lock_lease)?,
        lock_acquire_timeout: env_ms("AGENTLANE_LOCK_ACQUIRE_TIMEOUT_MS", d.lock_acquire_timeout)?,
        visibility_timeout: env_ms("AGENTLANE_VISIBILITY_TIMEOUT_MS", d.visibility_timeout)?,
        receive_wait: env_ms("AGENTLANE_RECEIVE_WAIT_MS", d.receive_wait)?,
        retry_delay_scale: match env("AGENTLANE_RETRY_DELAY_SCALE") {
            None => d.retry_delay_scale,
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .with_context(|| {
                    format!("AGENTLANE_RETRY_DELAY_SCALE must be a number >= 0, got {v:?}")
                })?,
        },
        model_idle_timeout: env_ms("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", idle_default)?,
        model_idle_timeout_self_hosted: env_ms(
            "AGENTLANE_MODEL_IDLE_TIMEOUT_MS",
            d.model_idle_timeout_self_hosted,
        )?,
        ..d
    })
}

/// The model router: the configured providers (one auth profile per API key), the fallback
/// chain, the context windows, plus the demo model (the default only without a provider).
pub fn model_router(models: &ModelSettings) -> anyhow::Result<ModelRouter> {
    let mut router = ModelRouter::new(models.default_model.clone())
        .with_fallbacks(models.fallback_models.clone());
    for p in &models.providers {
        let keys: Vec<Option<String>> = if p.api_keys.is_empty() {
            vec![None]
        } else {
            p.api_keys.iter().cloned().map(Some).collect()
        };
        let mut profiles = Vec::with_capacity(keys.len());
        for (i, api_key) in keys.into_iter().enumerate() {
            let provider: Arc<dyn agentlane_providers::ModelProvider> = match p.kind {
                ProviderKind::OpenAi => {
                    let mut config = OpenAiConfig {
                        name: p.name.clone(),
                        api_key,
                        self_hosted: p.self_hosted,
                        ..OpenAiConfig::default()
                    };
                    if let Some(url) = &p.base_url {
                        config.base_url = url.clone();
                    }
                    Arc::new(
                        OpenAiProvider::new(config).context("OPENAI_BASE_URL / OPENAI_API_KEY")?,
                    )
                }
                ProviderKind::Anthropic => {
                    let mut config = AnthropicConfig {
                        name: p.name.clone(),
                        api_key,
                        self_hosted: p.self_hosted,
                        ..AnthropicConfig::default()
                    };
                    if let Some(url) = &p.base_url {
                        config.base_url = url.clone();
                    }
                    Arc::new(
                        AnthropicProvider::new(config)
                            .context("ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY")?,
                    )
                }
            };
            profiles.push(Profile {
                name: format!("{}#{}", p.name, i + 1),
                provider,
            });
        }
        router = router.with_profiles(p.name.clone(), profiles);
    }
    for (model, tokens) in &models.context_windows {
        router = router.with_context_window(model.clone(), *tokens);
    }
    Ok(router.with_provider(Arc::new(DemoModel::with_chunk_delay(
        models.demo_chunk_delay,
    ))))
}

/// The tools offered to the model; `AGENTLANE_HTTP_FETCH_ALLOW` lists hosts, IPs or CIDRs
/// `http_fetch` may reach although they are private or loopback.
pub fn tool_registry() -> ToolRegistry {
    let mut policy = SsrfPolicy::default();
    if let Some(allow) = env("AGENTLANE_HTTP_FETCH_ALLOW") {
        policy.allow_hosts = allow
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
    }
    ToolRegistry::new()
        .with(Arc::new(CurrentTime::new()))
        .with(Arc::new(HttpFetch::new(HttpFetchConfig {
            policy,
            ..HttpFetchConfig::default()
        })))
}

/// The runner over `backends`, configured from the environment.
pub fn runner(backends: &Backends) -> anyhow::Result<(Runner, ModelSettings)> {
    let models = ModelSettings::from_env()?;
    let self_hosted = models.self_hosted_default();
    let runner = Runner::new(
        backends.store.clone(),
        backends.clock.clone(),
        model_router(&models)?,
        tool_registry(),
        runner_config(self_hosted)?,
    );
    Ok((runner, models))
}

/// API keys from `AGENTLANE_API_KEYS` (`tenant:key,...`).
pub fn api_keys_from_env() -> anyhow::Result<Option<ApiKeys>> {
    env("AGENTLANE_API_KEYS")
        .map(|spec| ApiKeys::parse(&spec).map_err(|e| anyhow::anyhow!("AGENTLANE_API_KEYS: {e}")))
        .transpose()
}

/// The API settings for the configured models. `AGENTLANE_MAX_WAIT_MS` caps `agent.wait`
/// (default `default_max_wait`: behind API Gateway, requests end at 30 s).
pub fn api_config(models: &ModelSettings, default_max_wait: Duration) -> anyhow::Result<ApiConfig> {
    let d = ApiConfig::default();
    let max_wait_ms = env_ms("AGENTLANE_MAX_WAIT_MS", default_max_wait)?.as_millis() as u64;
    Ok(ApiConfig {
        demo_mode: models.demo,
        max_wait_ms,
        default_wait_ms: d.default_wait_ms.min(max_wait_ms),
        ..d
    })
}

/// Logs to stderr; JSON lines when `json` (Lambda/CloudWatch). Filter from `AGENTLANE_LOG`.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTLANE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().without_time().try_init()
    } else {
        builder.try_init()
    };
}
