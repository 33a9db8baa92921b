//! The one redaction every text leaving the provider layer goes through (issue 25 §3): an
//! [`Endpoint`](crate::endpoint) applies its [`Redactor`] to every error it returns, so an
//! upstream that echoes the request's headers (some proxies do) or a connection error naming the
//! internal URL cannot put a key or an address into a run's error, its attempt ledger, its events
//! or the logs.
//!
//! What is replaced, in order: the configured secrets (the provider's key, extra header values)
//! by `[redacted]`; the provider's base URL, its origin and its `host:port` by the provider's
//! name; then, whatever their origin, the values of `Authorization`/`Proxy-Authorization`/
//! `x-api-key`/`api-key` headers, `Bearer …` tokens, `sk-…`-shaped keys (`sk-ant-…`, `sk-proj-…`)
//! and the credentials of `scheme://user:pass@` URLs. The result is cut to [`TEXT_LIMIT`] bytes,
//! never inside a word (a key cut in half would still leak its first half).

use crate::ProviderError;
use regex::Regex;
use std::sync::LazyLock;

/// The most of a provider's text (an error body excerpt, a whole error message) that leaves the
/// provider layer, in bytes.
pub const TEXT_LIMIT: usize = 2048;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not replaced literally (they would match ordinary words); the
/// patterns still catch key-shaped ones.
const MIN_SECRET_LEN: usize = 6;

/// `(pattern, replacement)`, applied in order after the literal replacements.
static PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // Credentials in a URL: `https://user:pass@host` → `https://[redacted]@host`.
        (
            r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@:]+(?::[^\s/@]*)?@",
            "${1}[redacted]@",
        ),
        // A credential header's value, as `name: value`, `"name":"value"` or `name=value`
        // (quotes possibly JSON-escaped); the value runs to the end of the quoted string or line.
        (
            r#"(?i)\b((?:proxy-)?authorization|x-api-key|api[-_]key)(\\?["']?\s*[:=]\s*\\?["']?)[^"'\\\r\n,;}\]]+"#,
            "${1}${2}[redacted]",
        ),
        // A bearer token wherever it appears.
        (r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/=]+", "Bearer [redacted]"),
        // OpenAI- and Anthropic-shaped keys (`sk-…`, `sk-proj-…`, `sk-ant-…`).
        (r"\bsk-[A-Za-z0-9_\-]{6,}", "[redacted]"),
    ]
    .into_iter()
    .filter_map(|(pattern, replacement)| Some((Regex::new(pattern).ok()?, replacement)))
    .collect()
});

/// Redacts the texts of one provider: knows its configured secrets, its URL and its name.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Literal secrets, longest first (so a secret containing another goes whole).
    secrets: Vec<String>,
    /// `(text, replacement)`: the base URL, its origin and `host:port`, each → the name.
    addresses: Vec<(String, String)>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for provider `name` at `base_url`, hiding `secrets` (its key, the values of
    /// its extra headers).
    pub fn new<'a>(name: &str, base_url: &str, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(str::trim)
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .map(str::to_owned)
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let mut addresses = Vec::new();
        let base = base_url.trim().trim_end_matches('/');
        if !base.is_empty() {
            addresses.push((base.to_owned(), name.to_owned()));
        }
        if let Ok(url) = reqwest::Url::parse(base) {
            let normalised = url.as_str().trim_end_matches('/').to_owned();
            addresses.push((normalised, name.to_owned()));
            let origin = url.origin().ascii_serialization();
            if origin != "null" {
                addresses.push((origin, name.to_owned()));
            }
            if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
                addresses.push((format!("{host}:{port}"), name.to_owned()));
            }
        }
        addresses.retain(|(text, _)| !text.is_empty());
        addresses.sort_by_key(|(text, _)| std::cmp::Reverse(text.len()));
        addresses.dedup();
        Self { secrets, addresses }
    }

    /// `text` with every secret, credential and provider address replaced, cut to
    /// [`TEXT_LIMIT`] bytes.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        for (address, name) in &self.addresses {
            if out.contains(address.as_str()) {
                out = out.replace(address.as_str(), name);
            }
        }
        cut(&redact_patterns(&out), TEXT_LIMIT)
    }

    /// `error` with its message redacted (see [`Redactor::text`]).
    pub fn error(&self, mut error: ProviderError) -> ProviderError {
        error.message = self.text(&error.message);
        error
    }
}

/// `text` with the credential patterns replaced (no configured secrets known).
pub fn redact_patterns(text: &str) -> String {
    let mut out = std::borrow::Cow::Borrowed(text);
    for (pattern, replacement) in PATTERNS.iter() {
        if let std::borrow::Cow::Owned(replaced) = pattern.replace_all(&out, *replacement) {
            out = std::borrow::Cow::Owned(replaced);
        }
    }
    out.into_owned()
}

/// `text` cut to at most `limit` bytes, never inside a word: a word the limit falls in is
/// dropped whole, and `…` marks the cut.
pub fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let inside_word = text[end..]
        .chars()
        .next()
        .is_some_and(|c| !c.is_whitespace());
    if inside_word {
        end = text[..end].rfind(char::is_whitespace).map_or(0, |at| {
            at + text[at..].chars().next().map_or(1, char::len_utf8)
        });
    }
    format!("{}…", text[..end].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "plain-key-0123456789";

    fn redactor() -> Redactor {
        Redactor::new(
            "corp",
            "http://10.1.2.3:8080/v1/",
            [KEY, "proxy-secret-42", "", "ab"],
        )
    }

    #[test]
    fn redaction_table() {
        let cases: &[(&str, &str)] = &[
            // The configured key, wherever it appears (it is not key-shaped).
            (
                "HTTP 401: invalid key plain-key-0123456789 given",
                "HTTP 401: invalid key [redacted] given",
            ),
            ("extra proxy-secret-42.", "extra [redacted]."),
            // Header values, in the shapes proxies echo them.
            (
                "Authorization: Bearer abc.def-ghi",
                "Authorization: [redacted]",
            ),
            (
                r#"{"headers":{"authorization":"Basic dXNlcjpwYXNz","x":1}}"#,
                r#"{"headers":{"authorization":"[redacted]","x":1}}"#,
            ),
            (
                r#"{\"x-api-key\":\"whatever-it-is\"}"#,
                r#"{\"x-api-key\":\"[redacted]\"}"#,
            ),
            ("X-Api-Key=opaque123; path", "X-Api-Key=[redacted]; path"),
            (
                "proxy-authorization: Digest x",
                "proxy-authorization: [redacted]",
            ),
            // Bearer tokens and sk-shaped keys on their own.
            ("sent bearer tok_9f8e7d6c", "sent Bearer [redacted]"),
            (
                "key sk-proj-AbC123xyz789 is wrong",
                "key [redacted] is wrong",
            ),
            (
                "key 'sk-ant-api03-Zz_9-yy' is wrong",
                "key '[redacted]' is wrong",
            ),
            // Words that merely contain `sk-` stay.
            ("a task-force of disk-io", "a task-force of disk-io"),
            // Credentials in URLs.
            (
                "proxy https://alice:s3cret@proxy.example/x failed",
                "proxy https://[redacted]@proxy.example/x failed",
            ),
            (
                "see http://token@host.example",
                "see http://[redacted]@host.example",
            ),
            // The provider's own address becomes its name.
            (
                "error sending request for url (http://10.1.2.3:8080/v1/chat/completions)",
                "error sending request for url (corp/chat/completions)",
            ),
            (
                "tcp connect error to 10.1.2.3:8080: refused",
                "tcp connect error to corp: refused",
            ),
            // Other URLs and ordinary text are left alone.
            (
                "see https://status.example.com/incidents",
                "see https://status.example.com/incidents",
            ),
            ("HTTP 500: boom", "HTTP 500: boom"),
        ];
        let r = redactor();
        for (input, want) in cases {
            assert_eq!(r.text(input), *want, "{input}");
        }
    }

    #[test]
    fn secrets_too_short_to_match_literally_are_ignored() {
        let r = Redactor::new("x", "", ["abc", "  "]);
        assert_eq!(r.text("abc abc"), "abc abc");
    }

    #[test]
    fn long_texts_are_cut_to_the_limit_never_inside_a_word() {
        // A key starting just before the limit is dropped whole, not cut in half.
        let filler = "word ".repeat(TEXT_LIMIT / 5 - 2);
        let text = format!("{filler}opaque-token-that-is-not-configured and more");
        let out = cut(&text, TEXT_LIMIT);
        assert!(out.len() <= TEXT_LIMIT, "{}", out.len());
        assert!(out.ends_with("word…"), "{}", &out[out.len() - 20..]);
        assert!(!out.contains("opaque"));
        // Short texts are untouched; a single huge word is dropped.
        assert_eq!(cut("short", TEXT_LIMIT), "short");
        assert_eq!(cut(&"x".repeat(TEXT_LIMIT + 1), TEXT_LIMIT), "…");
        // Multi-byte text is cut on a character boundary.
        let wide = "é ".repeat(TEXT_LIMIT);
        let out = cut(&wide, TEXT_LIMIT);
        assert!(out.len() <= TEXT_LIMIT);
        // And the redactor cuts what it returns.
        let long = format!("HTTP 500: {}", "blah ".repeat(2000));
        assert!(redactor().text(&long).len() <= TEXT_LIMIT);
    }

    #[test]
    fn an_error_keeps_its_class_and_loses_its_secrets() {
        let e = ProviderError::from_http(
            401,
            &format!(r#"{{"error":{{"message":"bad key {KEY}","type":"auth"}}}}"#),
            None,
        );
        let redacted = redactor().error(e.clone());
        assert_eq!(redacted.reason, e.reason);
        assert_eq!(redacted.status, Some(401));
        assert_eq!(redacted.message, "HTTP 401: bad key [redacted] (auth)");
    }
}
