//! Keeps the secret values a run resolved out of everything it writes: a tool's answer, an
//! error message, a warning. Each value (and its JSON-escaped form, as an endpoint echoing a
//! header inside a JSON body writes it) becomes `[redacted:<name>]` before the text reaches
//! the transcript, the model's context, the events or the logs.

use crate::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use std::borrow::Cow;
use std::sync::Arc;

/// The secret values of one run, by the name each is shown as.
#[derive(Clone, Default)]
pub struct Redactor {
    /// `(value, replacement)`, longest value first (a value inside a longer one is replaced
    /// as part of the longer one).
    pairs: Arc<Vec<(String, String)>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("values", &self.pairs.len())
            .finish()
    }
}

impl Redactor {
    /// Replaces each `(name, value)`'s value with `[redacted:<name>]`. Empty values are
    /// ignored.
    pub fn new<I, N, V>(secrets: I) -> Self
    where
        I: IntoIterator<Item = (N, V)>,
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let mut pairs = Vec::new();
        for (name, value) in secrets {
            let (name, value) = (name.as_ref(), value.as_ref());
            if value.is_empty() {
                continue;
            }
            let replacement = format!("[redacted:{name}]");
            let escaped = serde_json::to_string(value)
                .ok()
                .and_then(|quoted| Some(quoted.get(1..quoted.len() - 1)?.to_owned()));
            if let Some(escaped) = escaped.filter(|e| e != value) {
                pairs.push((escaped, replacement.clone()));
            }
            pairs.push((value.to_owned(), replacement));
        }
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.0 == b.0);
        Self {
            pairs: Arc::new(pairs),
        }
    }

    /// No value to redact.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `text` with every value replaced.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (value, replacement) in self.pairs.iter() {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), replacement));
            }
        }
        out
    }

    /// Every tool of `tools`, its answers and errors redacted (`tools` itself when there is
    /// nothing to redact).
    pub fn wrap(&self, tools: ToolRegistry) -> ToolRegistry {
        if self.is_empty() {
            return tools;
        }
        let mut wrapped = ToolRegistry::new();
        for spec in tools.specs().iter() {
            if let Some(inner) = tools.get(&spec.name) {
                wrapped.register(Arc::new(Redacting {
                    inner,
                    redactor: self.clone(),
                }));
            }
        }
        wrapped
    }

    fn error(&self, error: ToolError) -> ToolError {
        let fix = |s: String| self.redact(&s).into_owned();
        match error {
            ToolError::InvalidArguments(s) => ToolError::InvalidArguments(fix(s)),
            ToolError::Blocked(s) => ToolError::Blocked(fix(s)),
            ToolError::Failed(s) => ToolError::Failed(fix(s)),
            // A timeout or a cancellation carries no text.
            other @ (ToolError::Timeout(_) | ToolError::Cancelled) => other,
        }
    }
}

/// A tool whose answers and errors pass through a [`Redactor`].
struct Redacting {
    inner: Arc<dyn Tool>,
    redactor: Redactor,
}

#[async_trait]
impl Tool for Redacting {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    async fn call(&self, arguments: &str, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        match self.inner.call(arguments, ctx).await {
            Ok(out) => Ok(ToolOutput {
                content: self.redactor.redact(&out.content).into_owned(),
            }),
            Err(e) => Err(self.redactor.error(e)),
        }
    }

    fn sequential(&self) -> bool {
        self.inner.sequential()
    }

    fn timeout(&self) -> Option<std::time::Duration> {
        self.inner.timeout()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn values_become_their_names_longest_first_and_json_escaped_too() {
        let r = Redactor::new([
            ("TOKEN", "sk-live-123"),
            ("PREFIX", "sk-live"),
            ("QUOTED", r#"a"b\c"#),
            ("EMPTY", ""),
        ]);
        let cases = [
            (
                "Authorization: Bearer sk-live-123",
                "Authorization: Bearer [redacted:TOKEN]",
            ),
            ("only sk-live here", "only [redacted:PREFIX] here"),
            (r#"{"echo":"a\"b\\c"}"#, r#"{"echo":"[redacted:QUOTED]"}"#),
            (r#"raw a"b\c"#, "raw [redacted:QUOTED]"),
            ("nothing secret", "nothing secret"),
            ("sk-live-123sk-live-123", "[redacted:TOKEN][redacted:TOKEN]"),
        ];
        for (text, want) in cases {
            assert_eq!(r.redact(text), want, "{text}");
        }
        assert!(matches!(r.redact("plain"), Cow::Borrowed(_)));
        assert!(Redactor::new([("E", "")]).is_empty());
        assert_eq!(format!("{r:?}"), "Redactor { values: 4 }");
    }

    #[test]
    fn error_messages_are_redacted_and_textless_errors_kept() {
        let r = Redactor::new([("K", "hunter2")]);
        assert_eq!(
            r.error(ToolError::Failed("HTTP 500: bad key hunter2".into())),
            ToolError::Failed("HTTP 500: bad key [redacted:K]".into())
        );
        assert_eq!(r.error(ToolError::Cancelled), ToolError::Cancelled);
    }
}
