//! Building an HTTP provider from its configuration: base-URL checks, default headers (values
//! marked sensitive, so they never show in reqwest's debug output) and the shared client.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;

/// A configuration a provider cannot be built from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("base URL {0:?} is not an http(s) URL")]
    /// The base URL does not parse or is not http(s).
    BaseUrl(String),
    /// The header's name; its value is never shown (it may be a key).
    #[error("header {0:?} has an invalid name or value")]
    Header(String),
    #[error("the API key contains characters not allowed in a header")]
    /// The key cannot be sent in a header.
    ApiKey,
    #[error("could not build the HTTP client: {0}")]
    /// reqwest refused the client settings.
    Client(String),
}

/// `base_url` without trailing slashes, checked to be an http(s) URL.
pub(crate) fn base_url(base_url: &str) -> Result<(String, reqwest::Url), ConfigError> {
    let base = base_url.trim_end_matches('/');
    let parsed = reqwest::Url::parse(base).map_err(|_| ConfigError::BaseUrl(base.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::BaseUrl(base.to_owned()));
    }
    Ok((base.to_owned(), parsed))
}

/// Adds `(name, value)` pairs to `headers`, every value marked sensitive.
pub(crate) fn insert_headers(
    headers: &mut HeaderMap,
    pairs: &[(String, String)],
) -> Result<(), ConfigError> {
    for (name, value) in pairs {
        let bad = || ConfigError::Header(name.clone());
        let name_ = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
        value.set_sensitive(true);
        headers.insert(name_, value);
    }
    Ok(())
}

/// A sensitive header value carrying a key.
pub(crate) fn key_value(value: &str) -> Result<HeaderValue, ConfigError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ConfigError::ApiKey)?;
    value.set_sensitive(true);
    Ok(value)
}

/// The client every request of one provider goes through.
pub(crate) fn client(
    headers: HeaderMap,
    connect_timeout: Duration,
) -> Result<reqwest::Client, ConfigError> {
    reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|e| ConfigError::Client(e.to_string()))
}
