//! The local HTTP server: the router on hyper's HTTP/1.1 connection driver with the edge's
//! [`Limits`] — a header-read timeout (hyper, also closing idle keep-alive connections), a cap
//! on open connections (further clients wait in the listen backlog), and a graceful shutdown
//! that stops accepting, lets requests in flight finish for a grace period, then drops what is
//! left.

use crate::admission::ClientAddr;
use crate::limits::Limits;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
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
