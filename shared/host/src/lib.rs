//! The wiring every host of agentlane shares — `agentlane serve` and the Lambda functions:
//! settings from the config file and the environment (SPEC §13), the backends, the model
//! router, the tools and the runner. Hosts stay thin.
//!
//! Backends are cargo features, so a host links only what it runs on: `embedded` (SQLite under
//! a data directory) and `aws` (DynamoDB + SQS FIFO). The Lambda functions enable only `aws`;
//! `agentlane serve` enables both and picks one with `AGENTLANE_BACKEND`.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod agent_secrets;
mod backends;
pub mod cron;
mod error;
mod file;
pub mod metrics;
pub mod provider_refresh;
mod provider_secrets;
mod resolve;
mod secret;
pub mod settings;

pub use backends::{BackendKind, Backends};
#[cfg(feature = "aws")]
pub use backends::{
    aws_dead_letters, backfill_aws_indexes, open_aws, open_aws_eraser, open_aws_keys, setup_aws,
};
#[cfg(feature = "embedded")]
pub use backends::{open_embedded, open_embedded_backend};
pub use error::ConfigError;
pub use provider_secrets::{ProviderSecrets, SECRET_ARN_ENV, SSM_PATH_ENV};
#[cfg(feature = "aws")]
pub use provider_secrets::{load_deployed, read_provider_secrets};
pub use resolve::CONFIG_ENV;
pub use secret::Secret;
pub use settings::{
    ApiSettings, AuthProfile, DEMO_MODEL, ModelSettings, ProviderKind, ProviderSettings,
    RETENTION_DAY_ENV, RunnerSettings, Settings, ToolSettings, env, env_ms, retention_policy,
};

use agentlane_agent::hooks::{HookRegistry, WebhookHook};
use agentlane_agent::models::Profile;
use agentlane_agent::{ModelRouter, Runner, RunnerConfig};
use agentlane_api::ApiKeys;
use agentlane_api::auth::{DEFAULT_KEY_CACHE_CAPACITY, DEFAULT_KEY_CACHE_TTL, StoreKeyCache};
use agentlane_providers::ModelProvider;
use agentlane_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use agentlane_providers::demo::DemoModel;
use agentlane_providers::openai::{OpenAiConfig, OpenAiProvider};
use agentlane_tools::ToolRegistry;
use agentlane_tools::current_time::CurrentTime;
use agentlane_tools::http_fetch::{HttpFetch, HttpFetchConfig};
use agentlane_tools::ssrf::SsrfPolicy;
use anyhow::Context;
use std::sync::Arc;

/// Settings from the process environment and the config file `AGENTLANE_CONFIG` names (the
/// environment wins over the file).
pub fn load() -> anyhow::Result<Settings> {
    let settings = Settings::load_with(|name| std::env::var(name).ok())?;
    if let Some(path) = &settings.config_path {
        tracing::debug!(path = %path.display(), "config file loaded");
    }
    Ok(settings)
}

/// The model router: the configured providers with their auth profiles (in order, names as
/// configured), the fallback chain, the context windows, plus the demo model (the default only
/// without a provider).
pub fn model_router(models: &ModelSettings) -> anyhow::Result<ModelRouter> {
    let mut router = ModelRouter::new(models.default_model.clone())
        .with_fallbacks(models.fallback_models.clone());
    for p in &models.providers {
        let profiles = if p.profiles.is_empty() {
            vec![Profile {
                name: format!("{}#1", p.name),
                provider: provider_client(p, None)?,
            }]
        } else {
            p.profiles
                .iter()
                .map(|profile| {
                    let provider: Arc<dyn ModelProvider> = match &models.key_refresh {
                        Some(refresh) => Arc::new(provider_refresh::RotatingProvider::new(
                            p,
                            profile,
                            refresh.clone(),
                            provider_client,
                        )?),
                        None => provider_client(p, Some(&profile.api_key))?,
                    };
                    Ok(Profile {
                        name: profile.name.clone(),
                        provider,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        };
        router = router.with_profiles(p.name.clone(), profiles);
    }
    for (model, tokens) in &models.context_windows {
        router = router.with_context_window(model.clone(), *tokens);
    }
    Ok(router.with_provider(Arc::new(DemoModel::with_chunk_delay(
        models.demo_chunk_delay,
    ))))
}

/// A client of provider `p` using `api_key`.
pub(crate) fn provider_client(
    p: &ProviderSettings,
    api_key: Option<&Secret>,
) -> anyhow::Result<Arc<dyn ModelProvider>> {
    let api_key = api_key.map(|k| k.expose().to_owned());
    let context = || format!("provider {:?} ({:?})", p.name, p.kind);
    Ok(match p.kind {
        ProviderKind::OpenAi => {
            let mut config = OpenAiConfig {
                name: p.name.clone(),
                api_key,
                self_hosted: p.self_hosted,
                request_timeout: p.timeout,
                ..OpenAiConfig::default()
            };
            if let Some(url) = &p.base_url {
                config.base_url = url.clone();
            }
            Arc::new(OpenAiProvider::new(config).with_context(context)?)
        }
        ProviderKind::Anthropic => {
            let mut config = AnthropicConfig {
                name: p.name.clone(),
                api_key,
                self_hosted: p.self_hosted,
                request_timeout: p.timeout,
                ..AnthropicConfig::default()
            };
            if let Some(url) = &p.base_url {
                config.base_url = url.clone();
            }
            Arc::new(AnthropicProvider::new(config).with_context(context)?)
        }
    })
}

/// The tools offered to the model; `tools.http_fetch_allow` lists hosts, IPs or CIDRs
/// `http_fetch` may reach although they are private or loopback.
pub fn tool_registry(tools: &ToolSettings) -> ToolRegistry {
    let policy = SsrfPolicy {
        allow_hosts: tools.http_fetch_allow.clone(),
        ..SsrfPolicy::default()
    };
    ToolRegistry::new()
        .with(Arc::new(CurrentTime::new()))
        .with(Arc::new(HttpFetch::new(HttpFetchConfig {
            policy,
            ..HttpFetchConfig::default()
        })))
}

/// The hooks `settings` configure (webhooks).
pub fn hook_registry(settings: &Settings) -> anyhow::Result<HookRegistry> {
    let mut hooks = HookRegistry::new();
    for webhook in &settings.hooks {
        let name = webhook.name.clone();
        hooks.register(Arc::new(
            WebhookHook::new(webhook.clone())
                .with_context(|| format!("hooks: webhook {name:?}"))?,
        ));
    }
    Ok(hooks)
}

/// The store the API serves from: `backends.store`, raising `session_end` (reason `reset`)
/// through the configured hooks when a session is reset.
pub fn api_store(
    backends: &Backends,
    settings: &Settings,
) -> anyhow::Result<Arc<dyn agentlane_core::Store>> {
    Ok(agentlane_agent::hooks::session_end_on_reset(
        backends.store.clone(),
        hook_registry(settings)?,
    ))
}

/// The shortest transcript the runner caches on the embedded backend: a session's first turn
/// (a question and its answer) is not kept, so 10,000 idle one-turn sessions cost the cache no
/// memory (they held 10.5 MiB when every transcript was kept), and a session that comes back
/// for a second turn is kept from then on. Reading a transcript back is cheap on SQLite but
/// not free: after any write a reader connection starts from an empty page cache, and with 16
/// as the floor (stop 35) the reads of the sessions below it were 5.6-9.9 % of `bench --http`'s
/// samples (stop 36). On DynamoDB every transcript is cached, since each reload is a billed
/// request.
pub const EMBEDDED_TRANSCRIPT_CACHE_MIN_ENTRIES: usize = 3;

/// The runner over `backends` with `settings`.
pub fn runner_with(backends: &Backends, settings: &Settings) -> anyhow::Result<Runner> {
    let hooks = hook_registry(settings)?;
    let policy = SsrfPolicy {
        allow_hosts: settings.tools.http_fetch_allow.clone(),
        ..SsrfPolicy::default()
    };
    let secrets = agent_secrets::HostSecrets::new(
        backends.secrets.clone(),
        settings.tools.agent_env_allow.clone(),
    );
    let agents = agentlane_agent::agents::AgentResolver::new(
        backends.agents.clone(),
        Arc::new(secrets),
        policy,
    );
    Ok(Runner::new(
        backends.store.clone(),
        backends.clock.clone(),
        model_router(&settings.models)?,
        tool_registry(&settings.tools),
        RunnerConfig {
            transcript_cache_min_entries: match backends.kind {
                BackendKind::Embedded => EMBEDDED_TRANSCRIPT_CACHE_MIN_ENTRIES,
                BackendKind::Aws => 0,
            },
            ..settings.runner_config()
        },
    )
    .with_hooks(hooks)
    .with_agents(Arc::new(agents))
    .with_tenant_budgets(backends.spend.clone(), settings.api.limits.budgets()))
}

/// API keys from `AGENTLANE_API_KEYS` (`tenant:key,...`).
pub fn api_keys_from_env() -> anyhow::Result<Option<ApiKeys>> {
    env("AGENTLANE_API_KEYS")
        .map(|spec| ApiKeys::parse(&spec).map_err(|e| anyhow::anyhow!("AGENTLANE_API_KEYS: {e}")))
        .transpose()
}

/// The API keys a host authenticates with: `configured` (the environment's, the generated
/// local key) first, then the store-backed keys of `backends` (`agentlane keys create`), whose
/// answers are cached for `AGENTLANE_API_KEY_CACHE_TTL_MS` (default 30 s: a revoked key stops
/// working within it), at most `AGENTLANE_API_KEY_CACHE_SIZE` (default 10,000) of them.
pub fn api_keys_with_store(
    backends: &Backends,
    configured: Option<ApiKeys>,
) -> anyhow::Result<ApiKeys> {
    let ttl = env_ms("AGENTLANE_API_KEY_CACHE_TTL_MS", DEFAULT_KEY_CACHE_TTL)?;
    let capacity = match env("AGENTLANE_API_KEY_CACHE_SIZE") {
        None => DEFAULT_KEY_CACHE_CAPACITY,
        Some(v) => v.trim().parse::<usize>().with_context(|| {
            format!("AGENTLANE_API_KEY_CACHE_SIZE must be a whole number, got {v:?}")
        })?,
    };
    Ok(configured
        .unwrap_or_default()
        .with_store(StoreKeyCache::new(backends.keys.clone(), ttl, capacity)))
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
