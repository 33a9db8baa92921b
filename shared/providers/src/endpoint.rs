//! The HTTP side both HTTP providers share once their configuration is read: the client (built
//! once, with the default headers and connect timeout), the URL calls are posted to, and sending
//! a call whose answer streams back through [`transport::stream`]. What goes in the body and how
//! the answer decodes stay with each provider.

use crate::config::{self, ConfigError};
use crate::transport::{self, SseDecoder};
use crate::{ModelRequest, ModelStream, ProviderError};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where one provider's calls go. Cheap to clone (the HTTP client is shared).
#[derive(Clone)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    /// The URL every call is posted to.
    pub(crate) url: String,
    /// What the debug log calls one call (`messages request`).
    label: &'static str,
    request_timeout: Option<Duration>,
}

/// How to build an [`Endpoint`] (the parts of a provider's configuration it needs).
pub(crate) struct Settings<'a> {
    pub url: String,
    pub label: &'static str,
    /// The configuration's extra headers, every value marked sensitive.
    pub extra_headers: &'a [(String, String)],
    /// The provider's own headers (its key, its API version), set over the extra ones.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub connect_timeout: Duration,
    pub request_timeout: Option<Duration>,
}

impl Endpoint {
    /// Builds the client from `settings`.
    pub(crate) fn new(settings: Settings<'_>) -> Result<Self, ConfigError> {
        let mut headers = HeaderMap::new();
        config::insert_headers(&mut headers, settings.extra_headers)?;
        for (name, value) in settings.headers {
            headers.insert(name, value);
        }
        Ok(Self {
            client: config::client(headers, settings.connect_timeout)?,
            url: settings.url,
            label: settings.label,
            request_timeout: settings.request_timeout,
        })
    }

    /// Posts `body` (made from `request` for `provider`) and returns the answer's events as
    /// `decoder` decodes them (see [`transport::stream`]).
    pub(crate) async fn stream(
        &self,
        provider: &str,
        request: &ModelRequest,
        body: &serde_json::Value,
        cancel: CancellationToken,
        decoder: impl SseDecoder,
    ) -> Result<ModelStream, ProviderError> {
        tracing::debug!(
            provider = %provider,
            model = %request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            "{}",
            self.label
        );
        let builder = self.client.post(&self.url).json(body);
        transport::stream(builder, self.request_timeout, cancel, decoder).await
    }

    /// Formats a provider as `name { config, url, .. }`: never the client or its headers.
    pub(crate) fn debug(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        name: &str,
        config: &dyn std::fmt::Debug,
    ) -> std::fmt::Result {
        f.debug_struct(name)
            .field("config", config)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}
