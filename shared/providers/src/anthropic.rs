//! The Anthropic Messages API, streaming, over reqwest — and compatible servers (llama-server,
//! aimock, proxies) through its base URL.

mod decode;
mod wire;

pub use wire::thinking_budget;
pub(crate) use wire::{fragment as wire_fragment, request_body as request_value, request_bytes};

use crate::config::{self, ConfigError};
use crate::endpoint::{Endpoint, Settings};
use crate::transport;
use crate::{ModelProvider, ModelRequest, ModelStream, ProviderError, StreamEvent};
use async_trait::async_trait;
use decode::{EventDecoder, Step};
use reqwest::header::{HeaderName, HeaderValue};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The official API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent by default.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// The output-token cap sent when the request has none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach one Messages API endpoint. `Debug` never shows the key or header values.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// The provider name, the part before `/` in `provider/model` (default `anthropic`).
    pub name: String,
    /// The server root, e.g. `https://api.anthropic.com` or `http://127.0.0.1:8080`; requests go
    /// to `{base_url}/v1/messages`. A base ending in `/v1` is accepted too.
    pub base_url: String,
    /// Sent as `x-api-key` when set.
    pub api_key: Option<String>,
    /// Sent as `anthropic-version`.
    pub anthropic_version: String,
    /// `max_tokens` when the request sets no `max_output_tokens`.
    pub max_tokens: u32,
    /// Runs on the user's own hardware (the runner then applies the longer idle timeout).
    pub self_hosted: bool,
    /// Time allowed to open the TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Time allowed for the whole call, streaming included (`None`: no limit here; the caller's
    /// idle watchdog and attempt timeout still apply).
    pub request_timeout: Option<Duration>,
    /// Extra headers sent with every request (e.g. `anthropic-beta`, a proxy's key).
    pub extra_headers: Vec<(String, String)>,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            name: "anthropic".to_owned(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            anthropic_version: DEFAULT_VERSION.to_owned(),
            max_tokens: DEFAULT_MAX_TOKENS,
            self_hosted: false,
            connect_timeout: Duration::from_secs(10),
            request_timeout: None,
            extra_headers: Vec::new(),
        }
    }
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.extra_headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("AnthropicConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("anthropic_version", &self.anthropic_version)
            .field("max_tokens", &self.max_tokens)
            .field("self_hosted", &self.self_hosted)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("extra_headers", &header_names)
            .finish()
    }
}

/// The Anthropic Messages provider. Cheap to clone (the HTTP client is shared).
#[derive(Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// Validates `config` and builds the HTTP client (once; reuse the provider).
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let (base, _) = config::base_url(&config.base_url)?;
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };

        let version = HeaderValue::from_str(&config.anthropic_version)
            .map_err(|_| ConfigError::Header("anthropic-version".to_owned()))?;
        let mut headers = vec![(HeaderName::from_static("anthropic-version"), version)];
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push((
                HeaderName::from_static("x-api-key"),
                config::key_value(key)?,
            ));
        }
        let endpoint = Endpoint::new(Settings {
            name: &config.name,
            base_url: &config.base_url,
            api_key: config.api_key.as_deref(),
            url,
            label: "messages request",
            extra_headers: &config.extra_headers,
            headers,
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
        })?;
        Ok(Self { config, endpoint })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint.debug(f, "AnthropicProvider", &self.config)
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn self_hosted(&self) -> bool {
        self.config.self_hosted
    }

    /// The request's cap (else the configured default), plus the thinking budget when
    /// extended thinking is on: the `max_tokens` sent.
    fn output_cap(&self, request: &ModelRequest) -> Option<u32> {
        Some(wire::sent_max_tokens(request, self.config.max_tokens))
    }

    /// Cancelling `cancel` before the answer starts returns an empty stream; cancelling it while
    /// streaming ends the stream. Either way the HTTP request is dropped at once.
    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        let body = wire::request_bytes(&request, self.config.max_tokens);
        let decoder = EventDecoder::new();
        self.endpoint
            .stream(&self.config.name, &request, body, cancel, decoder)
            .await
    }
}

impl transport::SseDecoder for EventDecoder {
    fn decode(
        &mut self,
        name: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        self.event(name, data, out).map(|step| step == Step::Done)
    }

    fn close(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        self.end()
    }

    fn whole(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        out.extend(EventDecoder::whole_message(body)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_key_and_header_values() {
        let provider = AnthropicProvider::new(AnthropicConfig {
            api_key: Some("sk-ant-secret-123".into()),
            extra_headers: vec![("x-proxy-key".into(), "hidden-456".into())],
            ..AnthropicConfig::default()
        })
        .unwrap();
        let shown = format!("{provider:?}");
        assert!(!shown.contains("sk-ant-secret-123"), "{shown}");
        assert!(!shown.contains("hidden-456"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn url_accepts_a_root_or_a_v1_base() {
        let url = |base: &str| {
            AnthropicProvider::new(AnthropicConfig {
                base_url: base.into(),
                ..AnthropicConfig::default()
            })
            .unwrap()
            .endpoint
            .url
        };
        assert_eq!(
            url(DEFAULT_BASE_URL),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/v1/messages"
        );
        assert_eq!(
            url("http://127.0.0.1:8080/v1/"),
            "http://127.0.0.1:8080/v1/messages"
        );
        assert_eq!(
            url("http://proxy/anthropic"),
            "http://proxy/anthropic/v1/messages"
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        let refused = |config: AnthropicConfig| AnthropicProvider::new(config).unwrap_err();
        assert!(matches!(
            refused(AnthropicConfig {
                base_url: "ftp://x".into(),
                ..AnthropicConfig::default()
            }),
            ConfigError::BaseUrl(_)
        ));
        assert_eq!(
            refused(AnthropicConfig {
                api_key: Some("a\nb".into()),
                ..AnthropicConfig::default()
            }),
            ConfigError::ApiKey
        );
        assert_eq!(
            refused(AnthropicConfig {
                anthropic_version: "2023\n".into(),
                ..AnthropicConfig::default()
            }),
            ConfigError::Header("anthropic-version".into())
        );
    }
}
