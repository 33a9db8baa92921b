//! `GET /v1/runs/{id}/events` as Server-Sent Events: read the store whenever the run changes
//! (a commit in this process wakes the stream at once; otherwise a short-backoff poll), send
//! each event once (`id: seq`, `event: stream`, `data: event JSON`), and end with `event: end`
//! once the run is terminal and every one of its events was sent.
//!
//! With a deadline (the streaming Lambda's, see [`crate::deadline`]) a stream still open when
//! it comes ends with `event: reconnect` carrying `retry:` and the last `id:` sent, and no
//! `end`: the client reconnects with `Last-Event-ID` and picks up at the next event.

use crate::Shared;
use crate::admission::Slot;
use crate::deadline::RECONNECT_AFTER;
use crate::wait::RunWatch;
use agentlane_core::{Event, RunId, RunStatus, StoreError, TenantId};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde_json::json;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Events read per store call.
const PAGE: usize = 500;

/// The SSE response for one run, starting after `after`, ending at the run's end or at
/// `deadline`. `slot` (the tenant's stream slot) is held until the stream ends or the client
/// goes away. `watch` must have subscribed before the caller's first read of the run.
pub fn event_stream(
    state: Arc<Shared>,
    tenant: TenantId,
    run_id: RunId,
    after: Option<u64>,
    deadline: Option<Instant>,
    watch: RunWatch,
    slot: Slot,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let keep_alive = KeepAlive::new()
        .interval(Duration::from_millis(state.config.sse_keep_alive_ms.max(1)))
        .text("keep-alive");
    let cursor = Cursor {
        state,
        tenant,
        run_id,
        after,
        deadline,
        pending: VecDeque::new(),
        finished: false,
        idle: false,
        watch,
        _slot: slot,
    };
    Sse::new(futures::stream::unfold(cursor, Cursor::next)).keep_alive(keep_alive)
}

struct Cursor {
    state: Arc<Shared>,
    tenant: TenantId,
    run_id: RunId,
    after: Option<u64>,
    /// Past this the stream ends with a `reconnect` event (the run's events so far all sent).
    deadline: Option<Instant>,
    pending: VecDeque<Event>,
    finished: bool,
    /// The last read found nothing new: wait for a change before the next one.
    idle: bool,
    watch: RunWatch,
    _slot: Slot,
}

/// What one look at the store found.
enum Poll {
    Events(Vec<Event>),
    Ended(RunStatus),
    Nothing,
    Failed(&'static str, &'static str),
}

impl Cursor {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.after = Some(event.seq);
                return Some((Ok(to_sse(&event)), self));
            }
            if self.finished {
                return None;
            }
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
            {
                self.finished = true;
                return Some((Ok(self.reconnect()), self));
            }
            if self.idle {
                self.watch.next_change(self.deadline).await;
            }
            match self.poll().await {
                Poll::Events(events) => {
                    self.pending.extend(events);
                    self.idle = false;
                    self.watch.saw_change();
                }
                Poll::Nothing => self.idle = true,
                Poll::Ended(status) => {
                    self.finished = true;
                    let data = json!({"runId": self.run_id, "status": status});
                    let end = SseEvent::default().event("end").data(data.to_string());
                    return Some((Ok(end), self));
                }
                Poll::Failed(code, message) => {
                    self.finished = true;
                    let data = json!({"error": {"code": code, "message": message}});
                    let error = SseEvent::default().event("error").data(data.to_string());
                    return Some((Ok(error), self));
                }
            }
        }
    }

    /// The last frame of a stream cut by its deadline: `retry:` and the last seq sent as `id:`
    /// (so that `Last-Event-ID` is right even when this stream sent no event).
    fn reconnect(&self) -> SseEvent {
        let data = json!({"runId": self.run_id, "reason": "deadline", "lastEventId": self.after});
        let event = SseEvent::default()
            .event("reconnect")
            .retry(RECONNECT_AFTER)
            .data(data.to_string());
        match self.after {
            Some(seq) => event.id(seq.to_string()),
            None => event,
        }
    }

    /// Reads the run BEFORE its events: a run seen terminal has all its events written, so an
    /// empty read after it means the stream is complete.
    async fn poll(&self) -> Poll {
        let store = self.state.history();
        let run = match store.get_run(&self.tenant, &self.run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Poll::Failed("not_found", "the run no longer exists"),
            Err(error) => return failed(error),
        };
        match store
            .read_events(&self.tenant, &self.run_id, self.after, PAGE)
            .await
        {
            Ok(events) if !events.is_empty() => Poll::Events(events),
            Ok(_) if run.status.is_terminal() => Poll::Ended(run.status),
            Ok(_) => Poll::Nothing,
            Err(error) => failed(error),
        }
    }
}

fn failed(error: StoreError) -> Poll {
    match error {
        StoreError::Throttled(_) => Poll::Nothing,
        other => {
            tracing::error!(error = %other, "event stream read failed");
            Poll::Failed("internal", "internal error; see the server logs")
        }
    }
}

fn to_sse(event: &Event) -> SseEvent {
    let data = serde_json::to_string(event).unwrap_or_else(|error| {
        tracing::error!(%error, seq = event.seq, "event could not be serialised");
        "{}".to_owned()
    });
    SseEvent::default()
        .id(event.seq.to_string())
        .event(event.stream.as_str())
        .data(data)
}
