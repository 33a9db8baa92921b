//! HTTP plumbing shared by the HTTP providers: sending the streaming request, error mapping,
//! `Retry-After`, bounded error bodies, and the event stream (SSE framing, cancellation, the end
//! of the answer) around a provider's [`SseDecoder`]. Knows nothing of any provider's wire format.

use crate::StreamEvent;
use crate::{FailoverReason, ProviderError};
use futures::StreamExt;
use reqwest::header::HeaderMap;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// The most of an error body we read: enough for any provider's JSON error, small enough that a
/// misbehaving server cannot make us buffer megabytes.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Maps a transport failure (connect, timeout, broken body) to a classified error.
pub fn from_reqwest(err: &reqwest::Error) -> ProviderError {
    let reason = if err.is_timeout() {
        FailoverReason::Timeout
    } else {
        FailoverReason::Network
    };
    let what = if err.is_timeout() {
        "request timed out"
    } else if err.is_connect() {
        "could not connect to the provider"
    } else if err.is_body() || err.is_decode() {
        "the connection broke while reading the response"
    } else {
        "the request failed"
    };
    // reqwest's Display names the URL but never headers, so no key can leak through it.
    ProviderError::new(reason, format!("{what}: {}", error_chain(err)))
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The server's suggested delay: `retry-after-ms` (milliseconds) first, then `Retry-After` as
/// delta-seconds or an HTTP date (relative to `now`; a date in the past means "now").
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(date.timestamp_millis()).ok()?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Reads at most `limit` bytes of a response body as text (lossy), stopping early on
/// cancellation or a broken connection: an error answer is classified from what arrived.
pub async fn read_body_capped(
    response: reqwest::Response,
    cancel: &CancellationToken,
    limit: usize,
) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while body.len() < limit {
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            next = chunks.next() => next,
        };
        match next {
            Some(Ok(bytes)) => body.extend_from_slice(&bytes),
            Some(Err(_)) | None => break,
        }
    }
    body.truncate(limit);
    String::from_utf8_lossy(&body).into_owned()
}

/// The most of a non-streamed JSON answer read.
pub const JSON_BODY_LIMIT: usize = 8 * 1024 * 1024;

/// What a model endpoint answered once its status is known.
pub enum Opened {
    /// A `text/event-stream` answer, to decode as it arrives.
    Stream(reqwest::Response),
    /// A whole JSON body: the server ignored `stream: true`.
    Json(String),
    /// `cancel` fired before the answer was read.
    Cancelled,
}

/// Sends a streaming request: classifies an error status (with `Retry-After`), reads a JSON
/// answer whole, and hands an event stream back undecoded. Cancelling drops the request.
pub async fn open(
    mut builder: reqwest::RequestBuilder,
    request_timeout: Option<std::time::Duration>,
    cancel: &CancellationToken,
) -> Result<Opened, ProviderError> {
    builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(timeout) = request_timeout {
        builder = builder.timeout(timeout);
    }
    let response = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Ok(Opened::Cancelled),
        sent = builder.send() => sent.map_err(|e| from_reqwest(&e))?,
    };
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let body = read_body_capped(response, cancel, ERROR_BODY_LIMIT).await;
        return Err(ProviderError::from_http(
            status.as_u16(),
            &body,
            retry_after,
        ));
    }
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !is_json {
        return Ok(Opened::Stream(response));
    }
    let body = read_body_capped(response, cancel, JSON_BODY_LIMIT).await;
    if cancel.is_cancelled() {
        return Ok(Opened::Cancelled);
    }
    Ok(Opened::Json(body))
}

/// Sends a streaming request and returns its events, decoded by `decoder`: as they arrive from an
/// event stream, all at once from a whole JSON answer, none when `cancel` fired before the answer
/// (an error status is refused here, classified).
pub(crate) async fn stream<D: SseDecoder>(
    builder: reqwest::RequestBuilder,
    request_timeout: Option<Duration>,
    cancel: CancellationToken,
    mut decoder: D,
) -> Result<crate::ModelStream, ProviderError> {
    Ok(match open(builder, request_timeout, &cancel).await? {
        Opened::Cancelled => futures::stream::empty().boxed(),
        Opened::Json(body) => {
            let mut events = Vec::new();
            let items: Vec<Result<StreamEvent, ProviderError>> =
                match decoder.whole(&body, &mut events) {
                    Ok(()) => events.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
            futures::stream::iter(items).boxed()
        }
        Opened::Stream(response) => sse_stream(response, decoder, cancel),
    })
}

/// A provider's decoder of server-sent events into [`StreamEvent`]s.
pub(crate) trait SseDecoder: Send + 'static {
    /// Decodes one event (`name` is the SSE `event:` field, empty when absent). `Ok(true)` when
    /// the answer is complete.
    fn decode(
        &mut self,
        name: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ProviderError>;
    /// The connection closed: emit what is still owed, or fail for a cut answer.
    fn close(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError>;
    /// Decodes a whole (non-streamed) JSON answer into the events its stream would have carried;
    /// on an error, what `out` holds is dropped.
    fn whole(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError>;
}

type SseItem =
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>;

/// Raw chunks of an answer's body as they arrive, before any SSE framing.
#[derive(Default)]
struct Arrivals {
    chunks: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
}

impl Arrivals {
    fn count(&self) -> u64 {
        self.chunks.load(std::sync::atomic::Ordering::SeqCst)
    }
}

struct SseState<D> {
    /// `None` once the answer is complete or failed: dropping it closes the connection.
    sse: Option<futures::stream::BoxStream<'static, SseItem>>,
    decoder: D,
    pending: std::collections::VecDeque<Result<StreamEvent, ProviderError>>,
    cancel: CancellationToken,
    arrivals: std::sync::Arc<Arrivals>,
    /// The chunk count when the last item was yielded.
    seen: u64,
}

/// The stream of a `text/event-stream` answer decoded by `decoder`; it ends when the answer is
/// complete, fails, or `cancel` fires (which drops the connection). Bytes that complete no event
/// (a keep-alive comment, part of an event) yield [`StreamEvent::KeepAlive`], so the caller's
/// idle watchdog sees a slow but alive stream.
fn sse_stream<D: SseDecoder>(
    response: reqwest::Response,
    decoder: D,
    cancel: CancellationToken,
) -> crate::ModelStream {
    use eventsource_stream::Eventsource;
    let arrivals = std::sync::Arc::new(Arrivals::default());
    let counter = arrivals.clone();
    let bytes = response.bytes_stream().inspect(move |_| {
        counter
            .chunks
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        counter.notify.notify_one();
    });
    let state = SseState {
        sse: Some(bytes.eventsource().boxed()),
        decoder,
        pending: std::collections::VecDeque::new(),
        cancel,
        arrivals,
        seen: 0,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                state.seen = state.arrivals.count();
                return Some((item, state));
            }
            let arrivals = state.arrivals.clone();
            let sse = state.sse.as_mut()?;
            let next = tokio::select! {
                biased;
                _ = state.cancel.cancelled() => return None,
                next = sse.next() => Some(next),
                _ = arrivals.notify.notified() => None,
            };
            match next {
                Some(next) => state.read(next),
                None => {
                    let now = arrivals.count();
                    if now != state.seen {
                        state.seen = now;
                        return Some((Ok(StreamEvent::KeepAlive), state));
                    }
                }
            }
        }
    })
    .boxed()
}

impl<D: SseDecoder> SseState<D> {
    /// Turns what the connection produced into pending items; closes it when done.
    fn read(&mut self, next: Option<SseItem>) {
        let mut events = Vec::new();
        let outcome = match next {
            Some(Ok(event)) => self.decoder.decode(&event.event, &event.data, &mut events),
            Some(Err(eventsource_stream::EventStreamError::Transport(e))) => Err(from_reqwest(&e)),
            Some(Err(e)) => Err(ProviderError::new(
                crate::FailoverReason::Network,
                format!("malformed event stream: {e}"),
            )),
            None => self.decoder.close(&mut events).map(|()| true),
        };
        self.pending.extend(events.into_iter().map(Ok));
        match outcome {
            Ok(false) => {}
            Ok(true) => self.sse = None,
            Err(e) => {
                self.pending.push_back(Err(e));
                self.sse = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    type Pairs = &'static [(&'static str, &'static str)];

    fn headers(pairs: Pairs) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn retry_after_forms() {
        // 2026-11-30T12:00:00Z
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_040_000);
        let cases: &[(Pairs, Option<Duration>)] = &[
            (&[], None),
            (&[("retry-after", "7")], Some(Duration::from_secs(7))),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            // retry-after-ms wins over retry-after.
            (
                &[("retry-after", "9"), ("retry-after-ms", "120")],
                Some(Duration::from_millis(120)),
            ),
            (
                &[("retry-after", "Mon, 30 Nov 2026 12:00:30 GMT")],
                Some(Duration::from_secs(30)),
            ),
            (
                &[("retry-after", "Mon, 30 Nov 2026 11:00:00 GMT")],
                Some(Duration::ZERO),
            ),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "-3")], None),
        ];
        for (pairs, want) in cases {
            assert_eq!(retry_after(&headers(pairs), now), *want, "{pairs:?}");
        }
    }
}
