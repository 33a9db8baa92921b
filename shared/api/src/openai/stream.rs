//! The OpenAI-compatible streams: a run's events, as [`RunFollower`] finds them, turned into
//! the frames of OpenAI's protocols by a [`Frames`] writer (chat chunks, Responses events),
//! sent as Server-Sent Events with the API's keep-alive comments. The stream holds the
//! tenant's stream slot while it lasts; the turn goes on if the client goes away.

use super::error::OpenAiError;
use crate::admission::Slot;
use crate::follow::{Followed, RunFollower};
use agentlane_core::Event;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde_json::Value;
use std::collections::VecDeque;
use std::convert::Infallible;

/// One SSE frame: an optional `event:` name and its `data:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub event: Option<&'static str>,
    pub data: String,
}

impl Frame {
    /// A frame of JSON data, without an event name (chat chunks).
    pub(crate) fn data(data: Value) -> Self {
        Self {
            event: None,
            data: data.to_string(),
        }
    }

    /// A named frame (Responses events).
    pub(crate) fn named(event: &'static str, data: Value) -> Self {
        Self {
            event: Some(event),
            data: data.to_string(),
        }
    }

    /// `data: [DONE]`, the end of a chat stream.
    pub(crate) fn done() -> Self {
        Self {
            event: None,
            data: "[DONE]".to_owned(),
        }
    }

    fn to_sse(&self) -> SseEvent {
        let event = SseEvent::default().data(&self.data);
        match self.event {
            Some(name) => event.event(name),
            None => event,
        }
    }
}

/// Writes one protocol's frames for one run. Pure: no I/O.
pub(crate) trait Frames: Send + 'static {
    /// The frames sent before any event (right after the turn was accepted).
    fn opening(&mut self) -> Vec<Frame>;
    /// The frames of one event of the run (most events make none).
    fn event(&mut self, event: &Event) -> Vec<Frame>;
    /// The last frames: the run ended, the stream's deadline came, or the store failed.
    fn end(&mut self, end: &Followed) -> Vec<Frame>;
}

/// The error of a stream cut by the host's deadline (the streaming Lambda's invocation limit)
/// before the turn ended; the turn goes on as `run_id`.
pub(crate) fn cut_off(run_id: &str) -> OpenAiError {
    OpenAiError::after_accept(
        StatusCode::GATEWAY_TIMEOUT,
        "stream_deadline",
        format!(
            "the stream reached the endpoint's time limit before the turn ended; it goes on as \
             run {run_id} (GET /v1/runs/{run_id}/events follows it, POST /v1/agent.wait waits \
             for it)"
        ),
    )
}

/// The error of a stream whose run paused for calls this protocol cannot answer (the agent's
/// approvals, or client tools where the route serves none).
pub(crate) fn paused(run: &agentlane_core::Run) -> OpenAiError {
    if super::turn::awaits_approval(run) {
        return OpenAiError::awaiting_approval(run);
    }
    OpenAiError::after_accept(
        StatusCode::CONFLICT,
        "requires_action",
        format!(
            "the turn paused for the agent's client tools; answer them with POST \
             /v1/runs/{}/actions, or call the agent through POST /v1/chat/completions, whose \
             answers carry the calls",
            run.run_id
        ),
    )
}

/// The error of a stream whose store reads failed.
pub(crate) fn store_failed(code: &str, message: &str) -> OpenAiError {
    OpenAiError::after_accept(StatusCode::INTERNAL_SERVER_ERROR, code, message)
}

/// The SSE body of a stream: `frames` over the events `follower` yields, with `keep_alive`
/// comments while the run is quiet.
pub(crate) fn frame_stream<F: Frames>(
    follower: RunFollower,
    frames: F,
    slot: Slot,
    keep_alive: KeepAlive,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let cursor = Cursor {
        follower,
        frames,
        pending: VecDeque::new(),
        opened: false,
        done: false,
        _slot: slot,
    };
    Sse::new(futures::stream::unfold(cursor, Cursor::next)).keep_alive(keep_alive)
}

struct Cursor<F> {
    follower: RunFollower,
    frames: F,
    pending: VecDeque<Frame>,
    opened: bool,
    done: bool,
    _slot: Slot,
}

impl<F: Frames> Cursor<F> {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Self)> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some((Ok(frame.to_sse()), self));
            }
            if self.done {
                return None;
            }
            if !self.opened {
                self.opened = true;
                self.pending.extend(self.frames.opening());
                continue;
            }
            match self.follower.next().await {
                Some(Followed::Event(event)) => self.pending.extend(self.frames.event(&event)),
                Some(end) => {
                    self.done = true;
                    self.pending.extend(self.frames.end(&end));
                }
                None => self.done = true,
            }
        }
    }
}
