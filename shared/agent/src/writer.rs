//! Every fenced write of one run goes through [`RunWriter`]: it numbers transcript entries and
//! events, coalesces assistant deltas into a few events, and commits under the run's fence.

use agentlane_core::{
    Clock, Commit, Event, EventStream, Fence, Message, Run, SessionStatus, SessionUpdate, Store,
    StoreError, StoreResult, TranscriptEntry,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The writer of one run, valid while its fence is.
pub struct RunWriter {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    fence: Fence,
    /// The run record as this writer last wrote it (or will write on the next commit).
    pub run: Run,
    next_seq: u64,
    next_event_seq: u64,
    pending: Vec<Event>,
    delta: String,
    /// The start of an answer held back because it may turn out to be a text tool call or the
    /// silent token, which clients must not see.
    held: String,
    attempt_text: String,
    last_flush: Instant,
    flush_bytes: usize,
    flush_every: Duration,
}

/// Where the run's transcript and events stand when a writer takes over.
#[derive(Debug, Clone, Copy)]
pub struct Positions {
    /// The seq the next transcript entry gets.
    pub next_seq: u64,
    /// The seq the next event gets.
    pub next_event_seq: u64,
}

impl RunWriter {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        fence: Fence,
        run: Run,
        positions: Positions,
        flush_bytes: usize,
        flush_every: Duration,
    ) -> Self {
        Self {
            store,
            clock,
            fence,
            run,
            next_seq: positions.next_seq,
            next_event_seq: positions.next_event_seq,
            pending: Vec::new(),
            delta: String::new(),
            held: String::new(),
            attempt_text: String::new(),
            last_flush: Instant::now(),
            flush_bytes,
            flush_every,
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Queues an event (after any buffered assistant text, to keep order).
    pub fn event(&mut self, stream: EventStream, data: Value) {
        self.take_delta();
        let ts = self.now();
        self.pending.push(Event {
            seq: self.next_event_seq,
            stream,
            ts,
            data,
        });
        self.next_event_seq += 1;
    }

    /// Starts a new model attempt's text (assistant events carry the text accumulated so far).
    pub fn begin_attempt_text(&mut self) {
        self.take_delta();
        self.attempt_text.clear();
        self.held.clear();
    }

    /// Buffers assistant text; commits the buffered events when enough text or time gathered.
    /// While nothing of the attempt was shown yet and the text so far could be a tool call written
    /// as text or the silent token, it is held back (see [`RunWriter::release_held`]).
    pub async fn assistant_delta(&mut self, delta: &str) -> StoreResult<()> {
        let nothing_shown = self.attempt_text.is_empty() && self.delta.is_empty();
        self.held.push_str(delta);
        if nothing_shown && may_be_hidden(&self.held) {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held);
        self.delta.push_str(&held);
        if self.delta.len() >= self.flush_bytes || self.last_flush.elapsed() >= self.flush_every {
            self.take_delta();
            self.flush_events().await?;
        }
        Ok(())
    }

    fn take_delta(&mut self) {
        if self.delta.is_empty() {
            return;
        }
        let delta = std::mem::take(&mut self.delta);
        self.attempt_text.push_str(&delta);
        let ts = self.now();
        self.pending.push(Event {
            seq: self.next_event_seq,
            stream: EventStream::Assistant,
            ts,
            data: json!({ "delta": delta, "text": self.attempt_text }),
        });
        self.next_event_seq += 1;
    }

    /// Commits pending events only (no-op when there are none).
    pub async fn flush_events(&mut self) -> StoreResult<()> {
        self.take_delta();
        if self.pending.is_empty() {
            return Ok(());
        }
        self.commit(Vec::new(), false, None, false).await
    }

    /// Drops buffered (uncommitted) assistant text, e.g. of an attempt that failed.
    pub fn discard_delta(&mut self) {
        self.delta.clear();
        self.held.clear();
    }

    /// Shows held-back text after all: the answer was ordinary text.
    pub fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.delta.push_str(&held);
    }

    /// Drops held-back text: it was a tool call written as text, or the silent token.
    pub fn discard_held(&mut self) {
        self.held.clear();
    }

    /// One fenced commit: `messages` appended to the transcript, pending events, the run record
    /// if `with_run`, the session activity, and the lock release if `release`.
    pub async fn commit(
        &mut self,
        messages: Vec<Message>,
        with_run: bool,
        session: Option<SessionStatus>,
        release: bool,
    ) -> StoreResult<()> {
        self.take_delta();
        let now = self.now();
        let transcript: Vec<TranscriptEntry> = messages
            .into_iter()
            .enumerate()
            .map(|(i, message)| TranscriptEntry {
                seq: self.next_seq + i as u64,
                run_id: self.run.run_id.clone(),
                ts: now,
                message,
            })
            .collect();
        let finished = session == Some(SessionStatus::Idle) && self.run.status.is_terminal();
        let commit = Commit {
            run_id: Some(self.run.run_id.clone()),
            transcript,
            events: self.pending.clone(),
            run: with_run.then(|| self.run.clone()),
            session: session.map(|status| SessionUpdate {
                status,
                active_run_id: match status {
                    SessionStatus::Processing => Some(self.run.run_id.clone()),
                    SessionStatus::Idle => None,
                },
                last_progress_at: now,
                finished_delta: u64::from(finished),
            }),
            release_lock: release,
        };
        let added = commit.transcript.len() as u64;
        self.commit_with_retry(commit).await?;
        self.next_seq += added;
        self.pending.clear();
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Retries transient failures. A `Conflict` on a retry means the earlier try landed: while
    /// we hold the fence nobody else can write these seqs.
    async fn commit_with_retry(&self, commit: Commit) -> StoreResult<()> {
        let mut tries = 0u32;
        loop {
            match self.store.commit(&self.fence, commit.clone()).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict(_)) if tries > 0 => return Ok(()),
                Err(e) if e.is_transient() && tries < 4 => {
                    tries += 1;
                    tracing::warn!(error = %e, tries, "commit failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether the start of an answer may still turn out to be a tool call written as text
/// (`<tool_call>`, a JSON object, a fenced block) or the silent token `NO_REPLY`.
fn may_be_hidden(text: &str) -> bool {
    let t = text.trim_start();
    if t.is_empty() {
        return true;
    }
    let upper = t.trim_end().to_ascii_uppercase();
    t.starts_with('<')
        || t.starts_with('{')
        || t.starts_with("```")
        || crate::reply::SILENT_TOKEN.starts_with(&upper)
        || upper.starts_with(crate::reply::SILENT_TOKEN)
}

#[cfg(test)]
mod tests {
    use super::may_be_hidden;

    #[test]
    fn answers_that_may_be_hidden() {
        for (text, hidden) in [
            ("", true),
            ("  <tool_", true),
            ("{\"name\"", true),
            ("```json", true),
            ("NO_", true),
            ("no_reply", true),
            ("NO_REPLY and more", true),
            ("Hello", false),
            ("No problem", false),
            ("The answer", false),
        ] {
            assert_eq!(may_be_hidden(text), hidden, "{text:?}");
        }
    }
}
