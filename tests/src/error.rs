//! The one error type of the harness: every failure says what was being done and, for a child
//! process, what it printed.

use std::path::PathBuf;

/// Why a harness step failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// `tools/aimock/node_modules` is missing: the test must fail, never skip.
    #[error(
        "aimock is not installed (no {path}): run scripts/test (or: npm ci --prefix tools/aimock)"
    )]
    AimockNotInstalled {
        /// The CLI script we looked for.
        path: PathBuf,
    },
    /// An OpenAI SDK of `tools/openai-clients` is missing: the test must fail, never skip.
    #[error(
        "the OpenAI {sdk} SDK is not installed ({missing}): run scripts/test, which installs it"
    )]
    SdkNotInstalled {
        /// `python` or `node`.
        sdk: &'static str,
        /// What was looked for.
        missing: String,
    },
    /// An SDK client script failed (it raised, or printed no JSON).
    #[error(
        "the OpenAI {sdk} client's scenario {scenario} failed ({status}):\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}"
    )]
    Sdk {
        /// `python` or `node`.
        sdk: &'static str,
        /// The scenario run.
        scenario: String,
        /// How the process ended.
        status: String,
        /// What it wrote to stderr (truncated).
        stderr: String,
        /// What it wrote to stdout (truncated).
        stdout: String,
    },
    /// A child process could not be spawned at all.
    #[error("could not start {what}: {source}")]
    Spawn {
        /// Which process.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A child process exited or stayed silent instead of printing its ready line.
    #[error(
        "{what} did not become ready: {reason}\n--- {what} stderr (tail) ---\n{stderr}\n--- {what} stdout (tail) ---\n{stdout}"
    )]
    NotReady {
        /// Which process.
        what: String,
        /// Exited (with which status) or timed out.
        reason: String,
        /// The end of what it wrote to stderr.
        stderr: String,
        /// The end of what it wrote to stdout.
        stdout: String,
    },
    /// A local file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An HTTP request to the server under test failed before any status came back.
    #[error("{method} {url}: {source}")]
    Http {
        /// The request method.
        method: String,
        /// The full URL.
        url: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// The server answered with another status than the one the call expects.
    #[error("{request}: expected HTTP {expected}, got {status}: {body}")]
    UnexpectedStatus {
        /// Method and path.
        request: String,
        /// The status the call expects.
        expected: u16,
        /// The status received.
        status: u16,
        /// The body received.
        body: String,
    },
    /// A body did not have the documented shape.
    #[error("{what}: cannot decode {body}: {source}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The raw body (truncated).
        body: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The aimock control API refused a request or answered garbage.
    #[error("aimock {request}: {message}")]
    Control {
        /// Method and path.
        request: String,
        /// What went wrong.
        message: String,
    },
    /// Something did not happen within its time budget.
    #[error("timed out after {millis} ms: {what}")]
    Timeout {
        /// What we were waiting for, and the last state seen.
        what: String,
        /// The budget.
        millis: u128,
    },
    /// The server broke the documented protocol (e.g. an SSE frame that is not an event).
    #[error("protocol: {0}")]
    Protocol(String),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn decode(what: impl Into<String>, body: &str, source: serde_json::Error) -> Self {
        HarnessError::Decode {
            what: what.into(),
            body: truncate(body, 2000),
            source,
        }
    }
}

/// Shorthand for harness results.
pub type HarnessResult<T> = Result<T, HarnessError>;

/// At most `max` bytes of `text` (on a char boundary), marked when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}
