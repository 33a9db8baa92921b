//! A credential that never shows in `Debug` output or logs.

use serde::Deserialize;

/// An API key. `Debug` prints `<redacted>`; there is no `Display`, so the only way to the value
/// is [`Secret::expose`], at the one place a client is built with it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The key itself, for building a provider client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
