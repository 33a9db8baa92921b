//! The event buffer of one run: events are numbered as they are queued, and assistant text is
//! coalesced into a few `assistant` events (or held back while it may still turn out to be a
//! tool call written as text, or the silent token). Nothing here writes; [`super::RunWriter`]
//! commits what the buffer holds.

use crate::answer::reply::may_be_hidden;
use agentlane_core::{Event, EventStream};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// Queued events and the assistant text not yet turned into events.
pub(super) struct EventBuffer {
    next_seq: u64,
    pending: Vec<Event>,
    /// Assistant text shown but not yet in an event.
    delta: String,
    /// The start of an answer held back because it may turn out to be a tool call written as
    /// text or the silent token, which clients must not see.
    held: String,
    /// The text of the current attempt already in events.
    attempt_text: String,
    last_flush: Instant,
    flush_bytes: usize,
    flush_every: Duration,
}

impl EventBuffer {
    pub(super) fn new(next_seq: u64, flush_bytes: usize, flush_every: Duration) -> Self {
        Self {
            next_seq,
            pending: Vec::new(),
            delta: String::new(),
            held: String::new(),
            attempt_text: String::new(),
            last_flush: Instant::now(),
            flush_bytes,
            flush_every,
        }
    }

    /// Queues an event (after any buffered assistant text, to keep order).
    pub(super) fn push(&mut self, stream: EventStream, data: Value, ts: u64) {
        self.take_delta(ts);
        self.pending.push(Event {
            seq: self.next_seq,
            stream,
            ts,
            data,
        });
        self.next_seq += 1;
    }

    /// The `seq` of the last event queued, if any was.
    pub(super) fn last_seq(&self) -> Option<u64> {
        self.next_seq.checked_sub(1)
    }

    /// Starts a new model attempt's text.
    pub(super) fn begin_attempt(&mut self, ts: u64) {
        self.take_delta(ts);
        self.attempt_text.clear();
        self.held.clear();
    }

    /// Buffers assistant text. True when enough text or time gathered to commit the events.
    pub(super) fn push_delta(&mut self, delta: &str) -> bool {
        let nothing_shown = self.attempt_text.is_empty() && self.delta.is_empty();
        self.held.push_str(delta);
        if nothing_shown && may_be_hidden(&self.held) {
            return false;
        }
        let held = std::mem::take(&mut self.held);
        self.delta.push_str(&held);
        self.delta.len() >= self.flush_bytes || self.last_flush.elapsed() >= self.flush_every
    }

    /// Turns buffered assistant text into an `assistant` event carrying the attempt's text so
    /// far.
    pub(super) fn take_delta(&mut self, ts: u64) {
        if self.delta.is_empty() {
            return;
        }
        let delta = std::mem::take(&mut self.delta);
        self.attempt_text.push_str(&delta);
        self.pending.push(Event {
            seq: self.next_seq,
            stream: EventStream::Assistant,
            ts,
            data: json!({ "delta": delta, "text": self.attempt_text }),
        });
        self.next_seq += 1;
    }

    /// Drops buffered (uncommitted) assistant text, e.g. of an attempt that failed.
    pub(super) fn discard_delta(&mut self) {
        self.delta.clear();
        self.held.clear();
    }

    /// Shows held-back text after all: the answer was ordinary text.
    pub(super) fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.delta.push_str(&held);
    }

    /// Drops held-back text: it was a tool call written as text, or the silent token.
    pub(super) fn discard_held(&mut self) {
        self.held.clear();
    }

    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The queued events, to commit.
    pub(super) fn pending(&self) -> &[Event] {
        &self.pending
    }

    /// The queued events were committed.
    pub(super) fn committed(&mut self) {
        self.pending.clear();
        self.last_flush = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(buffer: &EventBuffer) -> Vec<(u64, String)> {
        buffer
            .pending()
            .iter()
            .map(|e| (e.seq, e.data["text"].as_str().unwrap_or("").to_owned()))
            .collect()
    }

    #[test]
    fn assistant_text_is_coalesced_and_numbered_in_order() {
        let mut b = EventBuffer::new(7, 10, Duration::from_secs(60));
        assert!(!b.push_delta("Hel"), "below the flush size");
        assert!(b.push_delta("lo, world"), "enough text to flush");
        b.push(EventStream::Tool, json!({"phase": "start"}), 1);
        assert_eq!(
            deltas(&b),
            [(7, "Hello, world".to_owned()), (8, String::new())]
        );
        b.committed();
        assert!(!b.has_pending());
    }

    #[test]
    fn a_possible_text_tool_call_is_held_until_released_or_discarded() {
        let mut b = EventBuffer::new(0, 1, Duration::ZERO);
        assert!(!b.push_delta("{\"name\""), "held back");
        b.take_delta(1);
        assert!(!b.has_pending());
        b.release_held();
        b.take_delta(1);
        assert_eq!(deltas(&b), [(0, "{\"name\"".to_owned())]);
        b.begin_attempt(2);
        assert!(!b.push_delta("NO_REPLY"));
        b.discard_held();
        b.take_delta(2);
        assert_eq!(deltas(&b).len(), 1, "the silent token is never shown");
    }
}
