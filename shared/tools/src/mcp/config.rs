//! One MCP server as an agent lists it, checked; and the redaction of its header values.

use crate::oauth::ClientCredentials;
use std::time::Duration;

/// `tools/call` time limit when the agent names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `tools/call` time limit an agent may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest server name (the prefix of its tools' names).
pub const MAX_SERVER_NAME_LEN: usize = 32;
/// Longest tool name the model APIs accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_LEN: usize = 64;
/// Between the server name and the MCP tool name in an agentlane tool name.
pub const SEPARATOR: &str = "__";

/// An MCP server reached over Streamable HTTP.
///
/// `Debug` shows header names only: values are secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Prefix of its tools' names (`<name>__<tool>`); see [`check_server_name`].
    pub name: String,
    /// The MCP endpoint, e.g. `https://mcp.example/mcp`; checked by the SSRF guard.
    pub url: String,
    /// Sent with every request, values already resolved from their secret references.
    pub headers: Vec<(String, String)>,
    /// Only these MCP tools (by their server-side name) are offered; `None`: all.
    pub allowed_tools: Option<Vec<String>>,
    /// Limit of one `tools/call` (and of connecting and listing); at most [`MAX_TIMEOUT`].
    pub timeout: Duration,
    /// OAuth 2.0 client credentials: every request carries `Authorization: Bearer <token>`
    /// (from the pool's [`TokenCache`](crate::oauth::TokenCache)), and a `401` drops the token
    /// and sends the request once more with a new one. No `Authorization` header may be
    /// configured beside it. Its secret never shows.
    pub auth: Option<ClientCredentials>,
}

impl McpServerConfig {
    /// A server with no headers, every tool allowed and the default timeout.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            headers: Vec::new(),
            allowed_tools: None,
            timeout: DEFAULT_TIMEOUT,
            auth: None,
        }
    }

    /// Checks the name, the URL's syntax, the header names and values and the timeout (not
    /// the SSRF policy: [`McpPool::tools`](super::McpPool::tools) applies it). Messages carry
    /// no header values.
    pub fn validate(&self) -> Result<(), String> {
        check_server_name(&self.name)?;
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| format!("MCP server {:?}: invalid url: {e}", self.name))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "MCP server {:?}: the url must be http or https",
                self.name
            ));
        }
        for (name, value) in &self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "MCP server {:?}: invalid header name {name:?}",
                    self.name
                ));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "MCP server {:?}: the value of header {name:?} is not a valid header value",
                    self.name
                ));
            }
        }
        if let Some(auth) = &self.auth {
            auth.check()
                .map_err(|why| format!("MCP server {:?}: auth: {why}", self.name))?;
            if self
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            {
                return Err(format!(
                    "MCP server {:?}: auth cannot be combined with an Authorization header",
                    self.name
                ));
            }
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(format!(
                "MCP server {:?}: timeout must be between 1 ms and {} s",
                self.name,
                MAX_TIMEOUT.as_secs()
            ));
        }
        Ok(())
    }
}

/// Replaces every (non-empty) header value in `text` by `[redacted]`, longest first.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))] // used by the MCP client
pub(crate) fn redact(headers: &[(String, String)], text: &str) -> String {
    let mut values: Vec<&str> = headers
        .iter()
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = text.to_owned();
    for value in values {
        if out.contains(value) {
            out = out.replace(value, "[redacted]");
        }
        // A bearer token is also a secret without its scheme.
        if let Some((_, token)) = value.split_once(' ')
            && token.len() >= 8
            && out.contains(token)
        {
            out = out.replace(token, "[redacted]");
        }
    }
    out
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, _)| (name.as_str(), "[redacted]"))
            .collect();
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("allowed_tools", &self.allowed_tools)
            .field("timeout", &self.timeout)
            .field("auth", &self.auth)
            .finish()
    }
}

/// A server name: `[a-zA-Z0-9_-]{1,32}` without `__` (the separator of its tools' names).
pub fn check_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME_LEN {
        return Err(format!(
            "MCP server name {name:?} must be 1 to {MAX_SERVER_NAME_LEN} characters"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "MCP server name {name:?} may contain only letters, digits, '_' and '-'"
        ));
    }
    if name.contains(SEPARATOR) {
        return Err(format!(
            "MCP server name {name:?} must not contain \"{SEPARATOR}\" (it separates the server \
             from the tool in tool names)"
        ));
    }
    Ok(())
}

/// `<server>__<tool>` when it fits the model APIs' rule `^[a-zA-Z0-9_-]{1,64}$`.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))] // used by the MCP client
pub(crate) fn prefixed_name(server: &str, tool: &str) -> Option<String> {
    let name = format!("{server}{SEPARATOR}{tool}");
    let fits = !tool.is_empty()
        && name.len() <= MAX_TOOL_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    fits.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names() {
        for ok in ["everything", "a", "my-server_2", &"x".repeat(32)] {
            assert!(check_server_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            &"x".repeat(33),
            "a__b",
            "__",
            "has space",
            "dot.ted",
            "é",
        ] {
            assert!(check_server_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixed_names() {
        assert_eq!(
            prefixed_name("everything", "get-sum").as_deref(),
            Some("everything__get-sum")
        );
        assert_eq!(prefixed_name("s", "has.dot"), None);
        assert_eq!(prefixed_name("s", "has space"), None);
        assert_eq!(prefixed_name("s", ""), None);
        assert!(prefixed_name("s", &"t".repeat(61)).is_some());
        assert_eq!(prefixed_name("s", &"t".repeat(62)), None);
    }

    #[test]
    fn validate_and_debug_hide_header_values() {
        let mut config = McpServerConfig::new("srv", "https://mcp.example/mcp");
        config.headers = vec![("Authorization".into(), "Bearer sekrit-token-1".into())];
        assert!(config.validate().is_ok());
        let debug = format!("{config:?}");
        assert!(!debug.contains("sekrit"), "{debug}");
        assert!(debug.contains("Authorization"), "{debug}");

        config.headers = vec![("X-Key".into(), "sekrit\nvalue".into())];
        let err = config.validate().unwrap_err();
        assert!(!err.contains("sekrit"), "{err}");

        config.headers.clear();
        config.timeout = Duration::from_secs(301);
        assert!(config.validate().is_err());
        config.timeout = Duration::ZERO;
        assert!(config.validate().is_err());
        config.timeout = MAX_TIMEOUT;
        assert!(config.validate().is_ok());
        config.url = "ftp://mcp.example/".into();
        assert!(config.validate().is_err());
    }

    #[test]
    fn redaction() {
        let headers = vec![
            (
                "Authorization".to_owned(),
                "Bearer abcdefgh12345".to_owned(),
            ),
            ("X-Empty".to_owned(), String::new()),
        ];
        assert_eq!(
            redact(&headers, "got Bearer abcdefgh12345 and abcdefgh12345"),
            "got [redacted] and [redacted]"
        );
        assert_eq!(redact(&headers, "nothing here"), "nothing here");
    }
}
