//! The settings a host runs with, merged from the config file and the environment (SPEC §13;
//! the merge lives in `resolve`). Every knob has a default so the first run needs no
//! configuration at all.

use crate::secret::Secret;
use agentlane_agent::RunnerConfig;
use agentlane_api::ApiConfig;
use anyhow::Context;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The demo model's full name, as recorded on runs.
pub const DEMO_MODEL: &str = "demo/agentlane-demo";

/// Everything configurable, file and environment merged (the environment wins).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file `AGENTLANE_CONFIG` named, if any.
    pub config_path: Option<PathBuf>,
    /// Providers, the default model, fallbacks and context windows.
    pub models: ModelSettings,
    /// Runner knobs (timeouts, retries, prompts, prices).
    pub runner: RunnerSettings,
    /// HTTP edge knobs (message size, waits, limits).
    pub api: ApiSettings,
    /// Built-in and configured tools.
    pub tools: ToolSettings,
    /// Webhook hooks from the config file.
    pub hooks: Vec<agentlane_agent::hooks::WebhookConfig>,
}

/// The model providers a host was configured with.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// Configured providers (OpenAI-compatible and/or Anthropic), from the file and the env.
    pub providers: Vec<ProviderSettings>,
    /// `provider/model`, e.g. `openai/gpt-4o-mini`; the demo model when no provider is
    /// configured.
    pub default_model: String,
    /// Tried in order when the model fails for good.
    pub fallback_models: Vec<String>,
    /// `provider/model` → tokens.
    pub context_windows: Vec<(String, u64)>,
    /// True when no provider is configured anywhere: the offline demo model answers.
    pub demo: bool,
    /// Pause between the demo model's chunks (`AGENTLANE_DEMO_DELAY_MS`).
    pub demo_chunk_delay: Duration,
    /// When the keys came from a secret store: their re-reading (the router's profiles then
    /// follow a rotated key).
    pub key_refresh: Option<crate::provider_refresh::KeyRefresh>,
}

/// The wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ProviderKind {
    /// OpenAI Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, ...).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// One provider: where it is and its credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    /// The wire protocol the provider speaks.
    pub kind: ProviderKind,
    /// The name before `/` in `provider/model`.
    pub name: String,
    /// The provider's API base URL (file `base_url`, or `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL`); `None`: the public endpoint.
    pub base_url: Option<String>,
    /// Auth profiles, tried in order; empty for a server that needs no key.
    pub profiles: Vec<AuthProfile>,
    /// Runs on the user's own hardware (longer idle timeout).
    pub self_hosted: bool,
    /// Whole-request HTTP timeout (`None`: no limit besides the runner's idle watchdog).
    pub timeout: Option<Duration>,
}

/// One credential of a provider; its name is recorded on every attempt that used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProfile {
    /// The profile's name, recorded on every attempt that used it.
    pub name: String,
    /// The API key (redacted in `Debug`).
    pub api_key: Secret,
}

/// Runner knobs; `None` keeps [`RunnerConfig`]'s default (SPEC §12).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunnerSettings {
    /// Session lock lease (`AGENTLANE_LOCK_LEASE_MS`); default 30 s.
    pub lock_lease: Option<Duration>,
    /// How long a turn waits for a busy session's lock (`AGENTLANE_LOCK_ACQUIRE_TIMEOUT_MS`); default 60 s.
    pub lock_acquire_timeout: Option<Duration>,
    /// Queue visibility of a delivery being worked on (`AGENTLANE_VISIBILITY_TIMEOUT_MS`); default 30 s.
    pub visibility_timeout: Option<Duration>,
    /// How long one queue receive waits (`AGENTLANE_RECEIVE_WAIT_MS`); default 1 s.
    pub receive_wait: Option<Duration>,
    /// Applies to cloud and self-hosted providers alike when set.
    pub model_idle_timeout: Option<Duration>,
    /// Multiplies every model-retry backoff (`AGENTLANE_RETRY_DELAY_SCALE`); default 1.0.
    pub retry_delay_scale: Option<f64>,
    /// Tool rounds one turn may run before it fails (`AGENTLANE_MAX_TOOL_ROUNDS`, at least 1); default 64.
    pub max_tool_rounds: Option<u32>,
    /// Base system prompt (`AGENTLANE_SYSTEM_PROMPT`); `None` keeps the built-in one.
    pub system_prompt: Option<String>,
    /// Bootstrap context files: `(path as configured, text)`.
    pub bootstrap_context: Vec<(String, String)>,
    /// Only the last N user turns are sent to the model (`AGENTLANE_HISTORY_MAX_TURNS`); `None`: all.
    pub history_max_turns: Option<u32>,
    /// `AGENTLANE_MAX_FAILED_PICKUPS`.
    pub max_failed_pickups: Option<u32>,
    /// `AGENTLANE_TRANSCRIPT_CACHE_MB` / `runner.transcript_cache_mb` (0: off).
    pub transcript_cache_mb: Option<u32>,
    /// How long a fresh turn's start may wait for its next write (`AGENTLANE_START_HOLD_MS` /
    /// `runner.start_hold_ms`; 0: written at once); default 200 ms.
    pub start_hold: Option<Duration>,
    /// `[queue] collect_window_ms` / `AGENTLANE_COLLECT_WINDOW_MS`.
    pub collect_window: Option<Duration>,
    /// `[tools] execution = "sequential"` / `AGENTLANE_TOOL_EXECUTION=sequential`.
    pub sequential_tools: Option<bool>,
    /// `[prices."provider/model"]`: over the built-in list prices.
    pub prices: std::collections::BTreeMap<String, agentlane_core::spend::Price>,
}

/// HTTP edge knobs; `None` keeps the host's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiSettings {
    /// Largest `message`, in bytes (`AGENTLANE_MAX_MESSAGE_BYTES`); default 256 KiB.
    pub max_message_bytes: Option<usize>,
    /// Cap on `agent.wait`.
    pub max_wait: Option<Duration>,
    /// Limits of the HTTP edge (`[limits]`; `AGENTLANE_ALLOWED_MODELS` replaces
    /// `allowed_models`).
    pub limits: agentlane_api::Limits,
    /// `[queue] default_mode` / `AGENTLANE_DEFAULT_QUEUE_MODE`: the mode of a turn that names
    /// none on a session without its own default (`None`: `followup`).
    pub default_queue_mode: Option<agentlane_core::QueueMode>,
    /// `AGENTLANE_METRICS_KEY` / `[api] metrics_key`: the operator's key for `GET /metrics`.
    pub metrics_key: Option<agentlane_api::OperatorKey>,
}

/// Tool knobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSettings {
    /// Hosts, IPs or CIDRs `http_fetch` may reach although private or loopback.
    pub http_fetch_allow: Vec<String>,
    /// The environment variables tenants' agents may reference (`AGENTLANE_AGENT_ENV_ALLOW`,
    /// `[agents] env_allow`; none by default).
    pub agent_env_allow: agentlane_core::EnvGrants,
}

impl Settings {
    /// The runner settings; the idle timeout default follows the default model's provider.
    pub fn runner_config(&self) -> RunnerConfig {
        self.runner.config(self.models.self_hosted_default())
    }

    /// The API settings; `default_max_wait` caps `agent.wait` unless configured (behind API
    /// Gateway, requests end at 30 s).
    pub fn api_config(&self, default_max_wait: Duration) -> ApiConfig {
        let mut config = self.api.config(self.models.demo, default_max_wait);
        config.agent_env_allow = self.tools.agent_env_allow.clone();
        // Without an explicit allow-list a tenant may ask for the default model and its
        // fallbacks only.
        config.configured_models = std::iter::once(self.models.default_model.clone())
            .chain(self.models.fallback_models.iter().cloned())
            .collect();
        config.prices =
            agentlane_core::spend::PriceTable::builtin().with_overrides(&self.runner.prices);
        config
    }
}

impl ModelSettings {
    /// Whether the default model's provider runs on the user's own hardware.
    pub fn self_hosted_default(&self) -> bool {
        let provider = self.default_model.split('/').next().unwrap_or_default();
        self.providers
            .iter()
            .any(|p| p.name == provider && p.self_hosted)
    }
}

impl RunnerSettings {
    /// [`RunnerConfig`] with these settings applied; `self_hosted` picks the idle-timeout
    /// default for cloud providers.
    pub fn config(&self, self_hosted: bool) -> RunnerConfig {
        let d = RunnerConfig::default();
        let idle_default = if self_hosted {
            d.model_idle_timeout_self_hosted
        } else {
            d.model_idle_timeout
        };
        RunnerConfig {
            lock_lease: self.lock_lease.unwrap_or(d.lock_lease),
            lock_acquire_timeout: self.lock_acquire_timeout.unwrap_or(d.lock_acquire_timeout),
            visibility_timeout: self.visibility_timeout.unwrap_or(d.visibility_timeout),
            receive_wait: self.receive_wait.unwrap_or(d.receive_wait),
            model_idle_timeout: self.model_idle_timeout.unwrap_or(idle_default),
            model_idle_timeout_self_hosted: self
                .model_idle_timeout
                .unwrap_or(d.model_idle_timeout_self_hosted),
            retry_delay_scale: self.retry_delay_scale.unwrap_or(d.retry_delay_scale),
            max_tool_rounds: self.max_tool_rounds.unwrap_or(d.max_tool_rounds),
            bootstrap_context: self.bootstrap_context.clone(),
            history_max_turns: self.history_max_turns,
            max_failed_pickups: self.max_failed_pickups.unwrap_or(d.max_failed_pickups),
            transcript_cache_bytes: self
                .transcript_cache_mb
                .map_or(d.transcript_cache_bytes, |mb| (mb as usize) << 20),
            collect_window: self.collect_window.unwrap_or(d.collect_window),
            start_hold: self.start_hold.unwrap_or(d.start_hold),
            sequential_tools: self.sequential_tools.unwrap_or(d.sequential_tools),
            prices: d.prices.clone().with_overrides(&self.prices),
            system_prompt: self
                .system_prompt
                .clone()
                .unwrap_or(d.system_prompt.clone()),
            ..d
        }
    }
}

impl ApiSettings {
    /// [`ApiConfig`] with these settings applied. The body limit keeps its 64 KiB headroom
    /// over the message limit.
    pub fn config(&self, demo_mode: bool, default_max_wait: Duration) -> ApiConfig {
        let d = ApiConfig::default();
        let max_wait_ms = self.max_wait.unwrap_or(default_max_wait).as_millis() as u64;
        let max_message_bytes = self.max_message_bytes.unwrap_or(d.max_message_bytes);
        ApiConfig {
            demo_mode,
            max_wait_ms,
            default_wait_ms: d.default_wait_ms.min(max_wait_ms),
            max_message_bytes,
            max_body_bytes: max_message_bytes
                .saturating_add(d.max_body_bytes - d.max_message_bytes),
            limits: self.limits.clone(),
            default_queue_mode: self.default_queue_mode,
            metrics_key: self.metrics_key.clone(),
            ..d
        }
    }
}

/// A value read from the environment (`None` when unset or empty).
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A duration in milliseconds from the environment.
pub fn env_ms(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match env(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .with_context(|| format!("{name} must be a number of milliseconds, got {v:?}")),
    }
}

/// How long a process uses a tenant secret it opened before reading it again
/// (`AGENTLANE_SECRET_CACHE_TTL_MS`, default 30 s, at most 60 s: a replaced or deleted value
/// reaches every process and Lambda instance within a minute).
pub fn secret_cache_ttl() -> anyhow::Result<Duration> {
    let ttl = env_ms(
        "AGENTLANE_SECRET_CACHE_TTL_MS",
        agentlane_secrets::vault::DEFAULT_TTL,
    )?;
    if ttl > agentlane_secrets::vault::MAX_TTL {
        anyhow::bail!(
            "AGENTLANE_SECRET_CACHE_TTL_MS is at most 60000 (a new value must reach every process within a minute)"
        );
    }
    Ok(ttl)
}

/// The length of a `retention_days` day: a real day, unless the test-only
/// `AGENTLANE_RETENTION_DAY_MS` shortens it (end-to-end tests watch sessions expire in seconds).
pub const RETENTION_DAY_ENV: &str = "AGENTLANE_RETENTION_DAY_MS";

/// Every tenant's session retention from `[limits]`, a day lasting [`RETENTION_DAY_ENV`].
pub fn retention_policy(settings: &Settings) -> anyhow::Result<agentlane_core::RetentionPolicy> {
    let day = env_ms(RETENTION_DAY_ENV, agentlane_core::store::DAY)?;
    if day.is_zero() {
        anyhow::bail!("{RETENTION_DAY_ENV} must be at least 1");
    }
    Ok(settings.api.limits.retention(day))
}

/// Loopback or private base URLs are self-hosted servers (vLLM, Ollama, llama.cpp).
pub(crate) fn is_self_hosted(base_url: &str) -> bool {
    let host = base_url
        .split("://")
        .nth(1)
        .unwrap_or(base_url)
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    host == "localhost"
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| match ip {
            std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_private(),
            std::net::IpAddr::V6(v6) => v6.is_loopback(),
        })
}

/// Agents one tenant may have: `AGENTLANE_MAX_AGENTS` (default 100).
pub fn max_agents_from_env() -> anyhow::Result<u32> {
    match env("AGENTLANE_MAX_AGENTS") {
        None => Ok(agentlane_core::agent::DEFAULT_MAX_AGENTS),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| anyhow::anyhow!("AGENTLANE_MAX_AGENTS must be a whole number, got {v:?}")),
    }
}

/// Secrets one tenant may have: `AGENTLANE_MAX_SECRETS` (default 100).
pub fn max_secrets_from_env() -> anyhow::Result<u32> {
    match env("AGENTLANE_MAX_SECRETS") {
        None => Ok(agentlane_core::tenant_secret::DEFAULT_MAX_SECRETS),
        Some(v) => v.trim().parse::<u32>().map_err(|_| {
            anyhow::anyhow!("AGENTLANE_MAX_SECRETS must be a whole number, got {v:?}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_hosted_detection() {
        assert!(is_self_hosted("http://127.0.0.1:11434/v1"));
        assert!(is_self_hosted("http://localhost:8000/v1"));
        assert!(is_self_hosted("http://192.168.1.5/v1"));
        assert!(!is_self_hosted("https://api.openai.com/v1"));
    }

    #[test]
    fn unset_runner_settings_keep_the_spec_defaults() {
        let d = RunnerConfig::default();
        let cloud = RunnerSettings::default().config(false);
        assert_eq!(cloud.model_idle_timeout, d.model_idle_timeout);
        assert_eq!(cloud.lock_lease, d.lock_lease);
        let local = RunnerSettings::default().config(true);
        assert_eq!(local.model_idle_timeout, d.model_idle_timeout_self_hosted);
    }

    #[test]
    fn api_body_limit_follows_the_message_limit() {
        let api = ApiSettings {
            max_message_bytes: Some(1000),
            max_wait: Some(Duration::from_secs(10)),
            limits: agentlane_api::Limits::default(),
            default_queue_mode: None,
            metrics_key: None,
        }
        .config(true, Duration::from_secs(25));
        assert_eq!(api.max_message_bytes, 1000);
        assert_eq!(api.max_body_bytes, 1000 + 64 * 1024);
        assert_eq!(api.max_wait_ms, 10_000);
        assert_eq!(api.default_wait_ms, 10_000);
        assert!(api.demo_mode);
    }
}
