//! `GET /v1/runs/{id}/events` as Server-Sent Events: each event of the run once, as
//! [`RunFollower`] finds it (`id: seq`, `event: stream`, `data: event JSON`), and `event: end`
//! once the run is terminal and every one of its events was sent.
//!
//! With a deadline (the streaming Lambda's, see [`crate::deadline`]) a stream still open when
//! it comes ends with `event: reconnect` carrying `retry:` and the last `id:` sent, and no
//! `end`: the client reconnects with `Last-Event-ID` and picks up at the next event.

use crate::Shared;
use crate::admission::Slot;
use crate::deadline::RECONNECT_AFTER;
use crate::follow::{Followed, RunFollower};
use crate::wait::RunWatch;
use agentlane_core::{Event, RunId, TenantId};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The SSE response for one run, starting after `after`, ending at the run's end or at
/// `deadline`. `slot` (the tenant's stream slot) is held until the stream ends or the client
/// goes away. `watch` must have subscribed before the caller's first read of the run.
pub(crate) fn event_stream(
    state: Arc<Shared>,
    tenant: TenantId,
    run_id: RunId,
    after: Option<u64>,
    deadline: Option<Instant>,
    watch: RunWatch,
    slot: Slot,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let keep_alive = keep_alive(&state);
    let cursor = Cursor {
        follower: RunFollower::new(state, tenant, run_id, after, deadline, watch),
        _slot: slot,
    };
    Sse::new(futures::stream::unfold(cursor, Cursor::next)).keep_alive(keep_alive)
}

/// The keep-alive comments of every SSE response (`: keep-alive` at the configured interval).
pub(crate) fn keep_alive(state: &Shared) -> KeepAlive {
    KeepAlive::new()
        .interval(Duration::from_millis(state.config.sse_keep_alive_ms.max(1)))
        .text("keep-alive")
}

struct Cursor {
    follower: RunFollower,
    _slot: Slot,
}

impl Cursor {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Self)> {
        let frame = match self.follower.next().await? {
            Followed::Event(event) => to_sse(&event),
            // This follower never stops at pauses: a paused run's stream stays open.
            Followed::Ended(run) | Followed::Paused(run) => {
                let data = json!({"runId": run.run_id, "status": run.status});
                SseEvent::default().event("end").data(data.to_string())
            }
            Followed::Deadline { last_seq } => reconnect(self.follower.run_id(), last_seq),
            Followed::Failed { code, message } => {
                let data = json!({"error": {"code": code, "message": message}});
                SseEvent::default().event("error").data(data.to_string())
            }
        };
        Some((Ok(frame), self))
    }
}

/// The last frame of a stream cut by its deadline: `retry:` and the last seq sent as `id:`
/// (so that `Last-Event-ID` is right even when this stream sent no event).
fn reconnect(run_id: &RunId, last_seq: Option<u64>) -> SseEvent {
    let data = json!({"runId": run_id, "reason": "deadline", "lastEventId": last_seq});
    let event = SseEvent::default()
        .event("reconnect")
        .retry(RECONNECT_AFTER)
        .data(data.to_string());
    match last_seq {
        Some(seq) => event.id(seq.to_string()),
        None => event,
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
