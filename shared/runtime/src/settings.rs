//! Settings of `serve`, read from the environment (SPEC §13). Every knob has a default so the
//! first run needs no configuration at all.

use anyhow::{Context, bail};
use std::time::Duration;

/// The model providers `serve` was configured with.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// `OPENAI_BASE_URL` / `OPENAI_API_KEY`, when either is set.
    pub openai: Option<OpenAiSettings>,
    /// `AGENTLANE_MODEL`, e.g. `openai/gpt-4o-mini`; defaults to the demo model when no provider
    /// is configured.
    pub default_model: String,
    /// True when no provider is configured: the offline demo model answers.
    pub demo: bool,
    pub demo_chunk_delay: Duration,
}

#[derive(Clone)]
pub struct OpenAiSettings {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub self_hosted: bool,
}

impl std::fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("self_hosted", &self.self_hosted)
            .finish()
    }
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
        let openai = match (env("OPENAI_BASE_URL"), env("OPENAI_API_KEY")) {
            (None, None) => None,
            (base_url, api_key) => Some(OpenAiSettings {
                self_hosted: base_url.as_deref().is_some_and(is_self_hosted),
                base_url,
                api_key,
            }),
        };
        let demo = openai.is_none();
        let default_model = match (env("AGENTLANE_MODEL"), demo) {
            (Some(m), _) => m,
            (None, true) => DEMO_MODEL.to_owned(),
            (None, false) => "openai/gpt-4o-mini".to_owned(),
        };
        if !default_model.contains('/') {
            bail!("AGENTLANE_MODEL must be provider/model, got {default_model:?}");
        }
        Ok(Self {
            openai,
            default_model,
            demo,
            demo_chunk_delay: env_ms("AGENTLANE_DEMO_DELAY_MS", Duration::from_millis(30))?,
        })
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
