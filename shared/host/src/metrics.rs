//! The Lambda functions' metrics: CloudWatch Embedded Metric Format records of
//! [`agentlane_core::metrics::global`], written to stdout (the function's log stream) at the
//! end of each invocation. CloudWatch Logs extracts them as metrics in the namespace
//! `AGENTLANE_METRICS_NAMESPACE` (default `agentlane`; the SAM template sets
//! `agentlane/<stage>`). `serve` reads the same registry at `GET /metrics` instead.

use std::io::Write as _;
use std::sync::Arc;

/// The environment variable naming the CloudWatch namespace.
pub const NAMESPACE_ENV: &str = "AGENTLANE_METRICS_NAMESPACE";
/// The namespace without [`NAMESPACE_ENV`].
pub const DEFAULT_NAMESPACE: &str = "agentlane";

type Sink = Arc<dyn Fn(&str) + Send + Sync>;

/// Writes the metrics changed since its last flush as EMF JSON lines, one per metric.
#[derive(Clone)]
pub struct EmfWriter {
    namespace: String,
    sink: Sink,
}

impl std::fmt::Debug for EmfWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmfWriter")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl EmfWriter {
    /// Lines to stdout, in the namespace the environment names.
    pub fn from_env() -> Self {
        let namespace = std::env::var(NAMESPACE_ENV)
            .ok()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        Self::with_sink(namespace, |line: &str| {
            // One locked write per line: concurrent log lines never interleave inside it.
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                tracing::warn!(error = %e, "could not write a metrics record");
            }
        })
    }

    /// Lines to `sink` (tests capture them), in `namespace`.
    pub fn with_sink(
        namespace: impl Into<String>,
        sink: impl Fn(&str) + Send + Sync + 'static,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            sink: Arc::new(sink),
        }
    }

    /// Writes what changed since the last flush, stamped `now_ms`; returns how many records.
    pub fn flush(&self, now_ms: u64) -> usize {
        let lines = agentlane_core::metrics::global().take_emf(&self.namespace, now_ms);
        for line in &lines {
            (self.sink)(line);
        }
        lines.len()
    }
}
