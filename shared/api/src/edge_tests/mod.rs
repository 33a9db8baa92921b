//! The edge over real sockets: the router under [`crate::serve`] on loopback, the SQLite store
//! behind a [`crate::NotifyingStore`], and clients that misbehave. Each limit answers as
//! specified and the other tenant goes on being served.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ApiConfig;
use crate::limits::{Limits, TenantLimits, TenantOverride};
use crate::testkit::{
    ACME_KEY, BETA_KEY, LiveServer, acme, closed_within, read_reply, send_request,
};
use agentlane_core::{
    Commit, Event, EventStream, Layered, Message, Payload, RunId, RunStatus, Store, StoreCall,
    StoreLayer, StoreResult, TranscriptEntry, Usage,
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod admission;
mod pages;
mod server;
mod usage_pages;
mod waits;

fn config(limits: Limits) -> ApiConfig {
    ApiConfig {
        limits,
        sse_keep_alive_ms: 100,
        ..ApiConfig::default()
    }
}

fn tenant_limits(tenant: TenantLimits) -> Limits {
    Limits {
        tenant,
        ..Limits::default()
    }
}

/// Opens an SSE stream of `run_id` and returns the socket once the head arrived (status 200),
/// or the whole answer when it was refused.
async fn open_stream(
    server: &LiveServer,
    key: &str,
    run_id: &str,
) -> Result<TcpStream, crate::testkit::Reply> {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "GET /v1/runs/{run_id}/events HTTP/1.1\r\nhost: t\r\naccept: text/event-stream\r\nauthorization: Bearer {key}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
            .await
            .unwrap();
        assert!(
            n > 0,
            "closed before a head: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(end) = text.find("\r\n\r\n") {
            if text.starts_with("HTTP/1.1 200") {
                return Ok(stream);
            }
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return Err(crate::testkit::parse_reply(&seen));
            }
        }
    }
}

/// Opens a stream as soon as the tenant's cap lets one in again: 429 `rate_limited` until then,
/// for at most 5 s.
async fn open_stream_once_freed(server: &LiveServer, key: &str, run_id: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open_stream(server, key, run_id).await {
            Ok(stream) => return stream,
            Err(reply) if Instant::now() < deadline => {
                reply.assert_error(429, "rate_limited");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(reply) => panic!("slot never freed: {reply:?}"),
        }
    }
}

/// The run reads of the API's store, counted: the counter, and the wrap that counts them (no
/// delay).
fn counting_reads() -> (Arc<AtomicUsize>, StoreWrap) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let wrap: StoreWrap = Box::new(move |inner| {
        Arc::new(Layered(CountingStore {
            inner,
            reads: counter,
            delay: Duration::ZERO,
        }))
    });
    (reads, wrap)
}

/// What wraps the API's store in a test server.
type StoreWrap = Box<dyn FnOnce(Arc<dyn Store>) -> Arc<dyn Store>>;

/// Counts `get_run` calls (the reads a wait makes) and can make them slow.
struct CountingStore {
    inner: Arc<dyn Store>,
    reads: Arc<AtomicUsize>,
    delay: Duration,
}

#[async_trait::async_trait]
impl StoreLayer for CountingStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn before(&self, call: StoreCall) -> StoreResult<()> {
        if call == StoreCall::GetRun {
            self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
        }
        Ok(())
    }
}
