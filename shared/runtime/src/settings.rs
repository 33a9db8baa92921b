//! Settings of `serve`, read from the environment (SPEC §13). Every knob has a default so the
//! first run needs no configuration at all.

use anyhow::{Context, bail};
use std::time::Duration;

/// The model providers a host was configured with.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// Configured providers (OpenAI-compatible and/or Anthropic).
    pub providers: Vec<ProviderSettings>,
    /// `AGENTLANE_MODEL`, e.g. `openai/gpt-4o-mini`; defaults to the demo model when no provider
    /// is configured.
    pub default_model: String,
    /// `AGENTLANE_FALLBACK_MODELS`: tried in order when the model fails for good.
    pub fallback_models: Vec<String>,
    /// `AGENTLANE_CONTEXT_WINDOWS`: `provider/model=tokens` pairs.
    pub context_windows: Vec<(String, u64)>,
    /// True when no provider is configured: the offline demo model answers.
    pub demo: bool,
    pub demo_chunk_delay: Duration,
}

/// The wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

/// One provider: where it is and its credentials (one auth profile each, tried in order).
#[derive(Clone)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    /// The name before `/` in `provider/model`.
    pub name: String,
    pub base_url: Option<String>,
    pub api_keys: Vec<String>,
    pub self_hosted: bool,
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_keys", &format!("<{} redacted>", self.api_keys.len()))
            .field("self_hosted", &self.self_hosted)
            .finish()
    }
}

/// `{PREFIX}_BASE_URL`, `{PREFIX}_API_KEY` and `{PREFIX}_API_KEYS` (comma-separated extra auth
/// profiles); `None` when none is set.
fn provider_from_env(kind: ProviderKind, name: &str, prefix: &str) -> Option<ProviderSettings> {
    let base_url = env(&format!("{prefix}_BASE_URL"));
    let mut api_keys: Vec<String> = env(&format!("{prefix}_API_KEY")).into_iter().collect();
    for key in env(&format!("{prefix}_API_KEYS"))
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        if !api_keys.iter().any(|k| k == key) {
            api_keys.push(key.to_owned());
        }
    }
    if base_url.is_none() && api_keys.is_empty() {
        return None;
    }
    Some(ProviderSettings {
        kind,
        name: name.to_owned(),
        self_hosted: base_url.as_deref().is_some_and(is_self_hosted),
        base_url,
        api_keys,
    })
}

fn model_list(name: &str) -> anyhow::Result<Vec<String>> {
    let list: Vec<String> = env(name)
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|m| !m.contains('/')) {
        bail!("{name} must list provider/model names, got {bad:?}");
    }
    Ok(list)
}

fn context_windows() -> anyhow::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for pair in env("AGENTLANE_CONTEXT_WINDOWS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (model, tokens) = pair
            .split_once('=')
            .context("AGENTLANE_CONTEXT_WINDOWS entries are provider/model=tokens")?;
        let tokens = tokens
            .trim()
            .parse::<u64>()
            .with_context(|| format!("AGENTLANE_CONTEXT_WINDOWS: {tokens:?} is not a number"))?;
        out.push((model.trim().to_owned(), tokens));
    }
    Ok(out)
}

/// The demo model's full name, as recorded on runs.
pub const DEMO_MODEL: &str = "demo/agentlane-demo";

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

impl ModelSettings {
    pub fn from_env() -> anyhow::Result<Self> {
        let providers: Vec<ProviderSettings> = [
            provider_from_env(ProviderKind::OpenAi, "openai", "OPENAI"),
            provider_from_env(ProviderKind::Anthropic, "anthropic", "ANTHROPIC"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let demo = providers.is_empty();
        let default_model = match (env("AGENTLANE_MODEL"), providers.first()) {
            (Some(m), _) => m,
            (None, None) => DEMO_MODEL.to_owned(),
            (None, Some(p)) if p.kind == ProviderKind::Anthropic => {
                "anthropic/claude-3-5-haiku-latest".to_owned()
            }
            (None, Some(_)) => "openai/gpt-4o-mini".to_owned(),
        };
        if !default_model.contains('/') {
            bail!("AGENTLANE_MODEL must be provider/model, got {default_model:?}");
        }
        Ok(Self {
            providers,
            default_model,
            fallback_models: model_list("AGENTLANE_FALLBACK_MODELS")?,
            context_windows: context_windows()?,
            demo,
            demo_chunk_delay: env_ms("AGENTLANE_DEMO_DELAY_MS", Duration::from_millis(30))?,
        })
    }

    /// Whether the default model's provider runs on the user's own hardware.
    pub fn self_hosted_default(&self) -> bool {
        let provider = self.default_model.split('/').next().unwrap_or_default();
        self.providers
            .iter()
            .any(|p| p.name == provider && p.self_hosted)
    }
}

/// Loopback or private base URLs are self-hosted servers (vLLM, Ollama, llama.cpp).
fn is_self_hosted(base_url: &str) -> bool {
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
}
