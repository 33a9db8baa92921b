//! OpenAI Chat Completions, streaming, over reqwest — and every OpenAI-compatible server (vLLM,
//! Ollama, LiteLLM, llama.cpp, aimock) through its base URL.

mod decode;
mod wire;

use crate::config;
use crate::endpoint::{Endpoint, Settings};
use crate::transport;
use crate::{ModelProvider, ModelRequest, ModelStream, ProviderError, StreamEvent};
use async_trait::async_trait;
use decode::{ChunkDecoder, Step};
use reqwest::header;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
pub(crate) use wire::MaxTokensField;
pub(crate) use wire::{message as wire_message, request_body as request_value, request_bytes};

/// Re-exported from [`crate::config`], where every HTTP provider shares it.
pub use crate::config::ConfigError;

/// The official API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach one OpenAI-compatible endpoint. `Debug` never shows the key.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The provider name, the part before `/` in `provider/model` (default `openai`).
    pub name: String,
    /// Up to and including the version segment, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Runs on the user's own hardware (the runner then applies the longer idle timeout).
    pub self_hosted: bool,
    /// Time allowed to open the TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Time allowed for the whole call, streaming included (`None`: no limit here; the caller's
    /// idle watchdog and attempt timeout still apply).
    pub request_timeout: Option<Duration>,
    /// Extra headers sent with every request (e.g. `OpenAI-Organization`, a proxy's key).
    pub extra_headers: Vec<(String, String)>,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            name: "openai".to_owned(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            self_hosted: false,
            connect_timeout: Duration::from_secs(10),
            request_timeout: None,
            extra_headers: Vec::new(),
        }
    }
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.extra_headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("OpenAiConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("self_hosted", &self.self_hosted)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("extra_headers", &header_names)
            .finish()
    }
}

/// The OpenAI Chat Completions provider. Cheap to clone (the HTTP client is shared).
#[derive(Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    endpoint: Endpoint,
    max_tokens: MaxTokensField,
}

impl OpenAiProvider {
    /// Validates `config` and builds the HTTP client (once; reuse the provider).
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let (base, parsed) = config::base_url(&config.base_url)?;
        let max_tokens = if parsed.host_str() == Some("api.openai.com") {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        };

        let mut headers = Vec::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push((
                header::AUTHORIZATION,
                config::key_value(&format!("Bearer {key}"))?,
            ));
        }
        let endpoint = Endpoint::new(Settings {
            name: &config.name,
            base_url: &config.base_url,
            api_key: config.api_key.as_deref(),
            url: format!("{base}/chat/completions"),
            label: "chat completions request",
            extra_headers: &config.extra_headers,
            headers,
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
        })?;
        Ok(Self {
            config,
            endpoint,
            max_tokens,
        })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint.debug(f, "OpenAiProvider", &self.config)
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn self_hosted(&self) -> bool {
        self.config.self_hosted
    }

    /// Cancelling `cancel` before the answer starts returns an empty stream; cancelling it while
    /// streaming ends the stream. Either way the HTTP request is dropped at once.
    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        let body = wire::request_bytes(&request, self.max_tokens);
        let decoder = ChunkDecoder::new();
        self.endpoint
            .stream(&self.config.name, &request, body, cancel, decoder)
            .await
    }
}

impl transport::SseDecoder for ChunkDecoder {
    fn decode(
        &mut self,
        _name: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        self.data(data, out).map(|step| step == Step::Done)
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        out.extend(self.end()?);
        Ok(())
    }

    /// A whole answer is one chunk whose choices carry `message` instead of `delta`.
    fn whole(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        self.data(body, out)?;
        self.close(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_key_and_header_values() {
        let provider = OpenAiProvider::new(OpenAiConfig {
            api_key: Some("sk-secret-123".into()),
            extra_headers: vec![("x-proxy-key".into(), "hidden-456".into())],
            ..OpenAiConfig::default()
        })
        .unwrap();
        let shown = format!("{provider:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(!shown.contains("hidden-456"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn bad_configs_are_refused() {
        let bad_url = OpenAiConfig {
            base_url: "ftp://x/v1".into(),
            ..OpenAiConfig::default()
        };
        assert!(matches!(
            OpenAiProvider::new(bad_url),
            Err(ConfigError::BaseUrl(_))
        ));
        let bad_key = OpenAiConfig {
            api_key: Some("a\nb".into()),
            ..OpenAiConfig::default()
        };
        assert_eq!(
            OpenAiProvider::new(bad_key).unwrap_err(),
            ConfigError::ApiKey
        );
    }
}
