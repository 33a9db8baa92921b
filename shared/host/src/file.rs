//! The schema of the TOML config file (`AGENTLANE_CONFIG`, SPEC §13). Every table rejects
//! unknown keys, so a typo is a start-up error naming the key and its line.
//! `agentlane.example.toml` at the crate root shows every key.

use crate::error::ConfigError;
use crate::secret::Secret;
use crate::settings::ProviderKind;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole file, as written (nothing merged or defaulted yet).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    /// Default model, `provider/model`.
    pub model: Option<String>,
    /// Tried in order when a model fails for good.
    pub fallback_models: Option<Vec<String>>,
    /// Keyed by the provider name used in `provider/model`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderEntry>,
    /// Keyed by `provider/model`.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntry>,
    #[serde(default)]
    pub runner: RunnerEntry,
    #[serde(default)]
    pub api: ApiEntry,
    #[serde(default)]
    pub tools: ToolsEntry,
    /// What tenants' agents may reach of this server (`[agents]`).
    #[serde(default)]
    pub agents: AgentsEntry,
    /// Limits of the HTTP edge (`[limits]`, `[limits.tenant]`, `[limits.tenants.<name>]`).
    #[serde(default)]
    pub limits: agentlane_api::Limits,
    /// Queue modes (`[queue]`).
    #[serde(default)]
    pub queue: QueueEntry,
    /// HTTP webhook hooks (`[[hooks]]`: name, url, points, priority, timeoutMs, secretHeader).
    #[serde(default)]
    pub hooks: Vec<agentlane_agent::hooks::WebhookConfig>,
    /// Prices in USD per million tokens, keyed by `provider/model` (`[prices."openai/gpt-4o"]`
    /// `input`, `output`, `cache_read`, `cache_write`): they replace or add to the built-in
    /// list prices.
    #[serde(default)]
    pub prices: BTreeMap<String, agentlane_core::spend::Price>,
}

/// `[queue]`: how messages to a busy session are handled (SPEC §4).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueEntry {
    /// The mode of a turn that names none on a session without its own default
    /// (`followup`, `collect`, `steer`, `interrupt` or an OpenClaw alias).
    pub default_mode: Option<String>,
    /// `collect` mode: the quiet window before a collect turn takes its messages, ms.
    pub collect_window_ms: Option<u64>,
}

/// `[providers.<name>]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderEntry {
    /// Defaults to the name when the name is `openai` or `anthropic`.
    pub kind: Option<ProviderKind>,
    pub base_url: Option<String>,
    /// Defaults to whether `base_url` is loopback or private.
    pub self_hosted: Option<bool>,
    /// Whole-request HTTP timeout; 0 means no limit.
    pub timeout_seconds: Option<u64>,
    /// Auth profiles, tried in this order.
    #[serde(default)]
    pub profiles: Vec<ProfileEntry>,
}

/// `[[providers.<name>.profiles]]`: one credential. Exactly one of `api_key_env` and `api_key`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileEntry {
    /// Recorded on attempts; defaults to `<provider>#<position>`.
    pub name: Option<String>,
    /// The environment variable holding the key (preferred: keeps the key out of the file).
    pub api_key_env: Option<String>,
    /// The key itself.
    pub api_key: Option<Secret>,
}

/// `[models."provider/model"]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelEntry {
    /// Tokens the model accepts.
    pub context_window: u64,
}

/// `[runner]`: each key also has an `AGENTLANE_*` environment override.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunnerEntry {
    pub lock_lease_ms: Option<u64>,
    pub lock_acquire_timeout_ms: Option<u64>,
    pub visibility_timeout_ms: Option<u64>,
    pub receive_wait_ms: Option<u64>,
    pub model_idle_timeout_ms: Option<u64>,
    pub retry_delay_scale: Option<f64>,
    pub max_tool_rounds: Option<u32>,
    pub system_prompt: Option<String>,
    /// Files whose text is added to every system prompt (relative to the config file).
    pub bootstrap_files: Option<Vec<String>>,
    pub history_max_turns: Option<u32>,
    pub max_failed_pickups: Option<u32>,
    pub transcript_cache_mb: Option<u32>,
    pub start_hold_ms: Option<u64>,
}

/// `[api]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApiEntry {
    pub max_message_bytes: Option<usize>,
    pub max_wait_ms: Option<u64>,
    /// The operator's key for `GET /metrics` (`AGENTLANE_METRICS_KEY` wins).
    pub metrics_key: Option<String>,
}

/// `[agents]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentsEntry {
    /// Environment variables an agent's `{"env": "VAR"}` may read (none by default; `AWS_*`,
    /// `AGENTLANE_*` and provider keys are refused at start-up).
    pub env_allow: Option<Vec<String>>,
}

/// `[tools]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsEntry {
    /// Hosts, IPs or CIDRs `http_fetch` may reach although private or loopback.
    pub http_fetch_allow: Option<Vec<String>>,
    /// `parallel` (the default: a batch's calls run concurrently) or `sequential` (one at a
    /// time, a steering checkpoint before each launch).
    pub execution: Option<String>,
}

impl ConfigFile {
    /// Parses `text`; errors carry `file`, the line and the column, and only TOML's message —
    /// never the offending source line, which could hold a key.
    pub(crate) fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e: toml::de::Error| {
            let (line, column) = e
                .span()
                .map_or((1, 1), |span| line_and_column(text, span.start));
            ConfigError::Parse {
                file: file.to_owned(),
                line,
                column,
                message: e.message().to_owned(),
            }
        })
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 6), (2, 1));
        assert_eq!(line_and_column(text, 9), (2, 4));
    }
}
