//! Transport behaviour every provider must show, whatever its protocol: a connection reset
//! mid-stream, cancellation mid-stream and before the answer starts. Each protocol's module
//! runs these checks with its own frames ([`Protocol`]).

use crate::mock::{DropSignal, Protocol, collect, serve, serve_with};
use agentlane_providers::{FailoverReason, ModelProvider, StreamEvent};
use futures::stream::{self, StreamExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The checks below as tests of the calling module, for `$protocol` (a [`Protocol`]).
#[macro_export]
macro_rules! transport_checks {
    ($protocol:expr) => {
        #[tokio::test]
        async fn connection_reset_mid_stream_is_a_network_error() {
            $crate::transport::connection_reset_mid_stream_is_a_network_error($protocol).await;
        }

        #[tokio::test]
        async fn cancelling_mid_stream_ends_it_and_drops_the_connection() {
            $crate::transport::cancelling_mid_stream_ends_it_and_drops_the_connection($protocol)
                .await;
        }

        #[tokio::test]
        async fn bytes_without_an_event_keep_the_stream_alive() {
            $crate::transport::bytes_without_an_event_keep_the_stream_alive($protocol).await;
        }

        #[tokio::test]
        async fn cancelling_before_the_answer_starts_returns_promptly() {
            $crate::transport::cancelling_before_the_answer_starts_returns_promptly($protocol)
                .await;
        }
    };
}

/// A connection reset after the first event: that event, then a network error.
pub async fn connection_reset_mid_stream_is_a_network_error<P: ModelProvider>(p: Protocol<P>) {
    let (sse, text) = (p.sse, p.text);
    let server = serve(p.api, move || {
        // After a pause, so the headers and the first event are flushed before the reset.
        let reset = stream::once(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "gone",
            ))
        });
        sse(text("cut").chain(reset).boxed())
    })
    .await;
    let (events, error) = collect(&(p.provider)(&server), (p.request)()).await;
    assert_eq!(events, vec![StreamEvent::TextDelta("cut".into())]);
    assert_eq!(error.unwrap().reason, FailoverReason::Network);
}

/// After its first event the answer sends only keep-alives (an SSE comment, a ping) every
/// 100 ms: each arrival yields a [`StreamEvent::KeepAlive`], so the caller's idle watchdog sees
/// the stream is alive although no event completes.
pub async fn bytes_without_an_event_keep_the_stream_alive<P: ModelProvider>(p: Protocol<P>) {
    let (sse, text, idle) = (p.sse, p.text, p.idle);
    let server = serve(p.api, move || {
        let alive = stream::unfold((), move |()| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok(idle()), ()))
        });
        sse(text("first").chain(alive).boxed())
    })
    .await;
    let cancel = CancellationToken::new();
    let mut stream = (p.provider)(&server)
        .stream((p.request)(), cancel.clone())
        .await
        .unwrap();
    // (a protocol's opening events that carry no text count as keep-alives too)
    let mut seen = Vec::new();
    let mut started = None;
    let mut keep_alives = 0;
    while keep_alives < 3 {
        let item = tokio::time::timeout(Duration::from_secs(2), stream.next())
            .await
            .expect("an item within the keep-alive period")
            .unwrap()
            .unwrap();
        match item {
            StreamEvent::KeepAlive if started.is_some() => keep_alives += 1,
            StreamEvent::KeepAlive => {}
            other => {
                started = Some(Instant::now());
                seen.push(other);
            }
        }
    }
    assert_eq!(seen, [StreamEvent::TextDelta("first".into())]);
    let after = started.map(|s| s.elapsed()).unwrap_or_default();
    assert!(
        after >= Duration::from_millis(200),
        "one per arrival: {after:?}"
    );
    cancel.cancel();
}

/// Cancelling while the answer stalls ends the stream at once and drops the connection.
pub async fn cancelling_mid_stream_ends_it_and_drops_the_connection<P: ModelProvider>(
    p: Protocol<P>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let (sse, text, idle) = (p.sse, p.text, p.idle);
    let server = serve(p.api, move || {
        let signal = DropSignal(tx.lock().unwrap().take());
        // Then only empty frames, forever: the response never completes by itself.
        let stall = stream::unfold(signal, move |signal| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Some((Ok(idle()), signal))
        });
        sse(text("first").chain(stall).boxed())
    })
    .await;

    let cancel = CancellationToken::new();
    let mut stream = (p.provider)(&server)
        .stream((p.request)(), cancel.clone())
        .await
        .unwrap();
    let first = loop {
        match stream.next().await.unwrap().unwrap() {
            StreamEvent::KeepAlive => continue,
            event => break event,
        }
    };
    assert_eq!(first, StreamEvent::TextDelta("first".into()));

    // (keep-alives for the stall's frames may come first)
    let waiting = tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if !matches!(item, Ok(StreamEvent::KeepAlive)) {
                return false;
            }
        }
        true
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(ended, "the stream must end when cancelled");
    tokio::time::timeout(Duration::from_secs(2), rx)
        .await
        .expect("the server must see the connection dropped")
        .unwrap();
}

/// Cancelling while the server has not answered yet returns promptly with an empty stream.
pub async fn cancelling_before_the_answer_starts_returns_promptly<P: ModelProvider>(
    p: Protocol<P>,
) {
    let server = serve_with(p.api, Duration::from_secs(30), p.done).await;
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let stream = (p.provider)(&server)
        .stream((p.request)(), cancel)
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(stream.collect::<Vec<_>>().await.len(), 0);
}
