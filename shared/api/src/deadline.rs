//! A host's hard end for one response. The streaming ingress Lambda learns from the Lambda
//! Runtime API when its invocation will be cut off and puts a [`ResponseDeadline`] (a little
//! before that instant) into each request's extensions. An SSE event stream that reaches it ends
//! cleanly with a `reconnect` event carrying a `retry:` hint (and the last `id:` sent), so the
//! client reconnects with `Last-Event-ID` and resumes without a gap or a duplicate;
//! `agent.wait` answers with the run as it then is. Servers without one (`serve`) stream until
//! the run ends.

use std::time::{Duration, SystemTime};

/// The SSE `retry:` hint sent when a stream ends at its deadline: how long a client (an
/// `EventSource`) waits before it reconnects.
pub const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// When the response must be complete (a request extension; absent: no deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseDeadline(pub SystemTime);

impl ResponseDeadline {
    /// Time left until the deadline (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.0.duration_since(SystemTime::now()).unwrap_or_default()
    }

    /// The deadline on tokio's clock.
    pub fn instant(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.remaining()
    }
}
