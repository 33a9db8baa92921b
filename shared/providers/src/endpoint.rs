//! The HTTP side both HTTP providers share once their configuration is read: the client (built
//! once, with the default headers and connect timeout), the URL calls are posted to, and sending
//! a call whose answer streams back through [`transport::stream`]. What goes in the body and how
//! the answer decodes stay with each provider.
//!
//! [`Endpoint::stream`] is the single exit of an HTTP provider: every error it returns, before
//! the answer or inside its stream, passes through the endpoint's [`Redactor`] (no key, header
//! value or provider address leaves; texts cut to 2 KiB).

use crate::config::{self, ConfigError};
use crate::redact::Redactor;
use crate::transport::{self, SseDecoder};
use crate::{ModelRequest, ModelStream, ProviderError};
use futures::StreamExt;
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
    /// Applied to every error that leaves this endpoint.
    redactor: Redactor,
}

/// How to build an [`Endpoint`] (the parts of a provider's configuration it needs).
pub(crate) struct Settings<'a> {
    /// The provider's name: what its address is replaced by in error texts.
    pub name: &'a str,
    /// The configured base URL (hidden from error texts).
    pub base_url: &'a str,
    /// The provider's key (hidden from error texts, whatever its shape).
    pub api_key: Option<&'a str>,
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
        let secrets = settings
            .api_key
            .into_iter()
            .chain(settings.extra_headers.iter().map(|(_, v)| v.as_str()));
        Ok(Self {
            redactor: Redactor::new(settings.name, settings.base_url, secrets),
            client: config::client(headers, settings.connect_timeout)?,
            url: settings.url,
            label: settings.label,
            request_timeout: settings.request_timeout,
        })
    }

    /// Posts `body` (JSON text made from `request` for `provider`) and returns the answer's events as
    /// `decoder` decodes them (see [`transport::stream`]). Every error, the refusal and any
    /// inside the stream, is redacted here.
    pub(crate) async fn stream(
        &self,
        provider: &str,
        request: &ModelRequest,
        body: String,
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
        // What `RequestBuilder::json` would send: the same bytes and content type.
        let builder = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let redactor = self.redactor.clone();
        match transport::stream(builder, self.request_timeout, cancel, decoder).await {
            Ok(events) => Ok(events
                .map(move |item| item.map_err(|e| redactor.error(e)))
                .boxed()),
            Err(e) => Err(self.redactor.error(e)),
        }
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
