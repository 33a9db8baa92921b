//! The local HTTP server: the router on hyper's HTTP/1.1 connection driver with the edge's
//! [`Limits`] — a header-read timeout (hyper, also closing idle keep-alive connections), a cap
//! on open connections (further clients wait in the listen backlog) with a share per client
//! address (a client over it is answered `429` and closed), and a graceful shutdown
//! that stops accepting, lets requests in flight finish for a grace period, then drops what is
//! left.

use crate::admission::ClientAddr;
use crate::limits::Limits;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

/// Pause after a failed `accept` (e.g. out of file descriptors) before the next one.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves, under `limits` (header-read timeout,
/// connection cap, shutdown grace). Returns once every connection has closed or the grace
/// period has passed.
pub async fn serve<F>(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_client = limits.connections_per_client().map(ClientShares::new);
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).keep_alive(true);
    if limits.header_read_timeout_ms > 0 {
        builder.header_read_timeout(limits.header_read_timeout());
    }
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let share = match &per_client {
            Some(shares) => match shares.take(peer.ip()) {
                Some(share) => Some(share),
                None => {
                    // Over its share: answered and closed off the accept loop; its global slot
                    // frees at once.
                    drop(slot);
                    let cap = shares.cap;
                    connections.spawn(refuse_connection(stream, cap));
                    continue;
                }
            },
            None => None,
        };
        // Every request of the connection carries its peer's address (per-address limits).
        let client = ClientAddr(peer.ip());
        let service = app.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(client);
                request
            },
        );
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
            drop(share);
        });
    }
    drop(listener);
    tracing::info!(
        open = connections.len(),
        "no longer accepting connections; letting requests in flight finish"
    );
    let grace = limits.shutdown_grace();
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!(grace_ms = grace.as_millis() as u64, "shutdown grace over: dropping open connections");
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// How long a refused connection's answer may take to write.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Open connections per client address, each at most `cap`.
struct ClientShares {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a client; counted until dropped.
struct ClientShare {
    address: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl ClientShares {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            open: Arc::default(),
        }
    }

    /// A share for one more connection of `address`, or `None` when it holds `cap` already.
    fn take(&self, address: IpAddr) -> Option<ClientShare> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientShare {
            address,
            open: self.open.clone(),
        })
    }
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Answers a connection over its client's share `429 rate_limited` (the JSON error shape) and
/// closes it, without reading its request.
async fn refuse_connection(mut stream: TcpStream, cap: usize) {
    let body = serde_json::json!({"error": {
        "code": "rate_limited",
        "message": format!(
            "too many connections from this address: at most {cap} at once; close one and retry"
        ),
    }})
    .to_string();
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent meanwhile, so that closing does not reset the connection
        // before it reads the answer.
        let mut sink = [0u8; 1024];
        while tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    if let Ok(Err(error)) = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, write).await {
        tracing::debug!(%error, "could not answer a connection over its share");
    }
}
