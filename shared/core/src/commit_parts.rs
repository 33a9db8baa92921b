//! Limits of one [`commit`](crate::FencedWriter::commit) and the split of a larger write into
//! parts that each fit.
//!
//! Every adapter applies a commit within [`MAX_COMMIT_WRITES`] / [`MAX_COMMIT_BYTES`] atomically
//! (DynamoDB: one `TransactWriteItems`, which holds at most 100 items and 4 MB) and refuses a
//! larger one ([`Commit::check`]); adapters never split. A writer with more to say splits it
//! with [`Commit::split`]: each part is atomic on its own, and the run record, the session update
//! and the lock release travel in the last part, so a run is never marked finished before all its
//! entries are stored.

use crate::store::Commit;

/// Transcript entries + events in one commit. DynamoDB allows 100 items per transaction; the
/// session item (fence condition or update) and the run record take two, one is spare.
pub const MAX_COMMIT_WRITES: usize = 97;

/// Serialized bytes of the entries and events of one commit (DynamoDB: 4 MB per transaction,
/// with room left for the run record and keys).
pub const MAX_COMMIT_BYTES: usize = 3 * 1024 * 1024;

/// The size a write is counted at when splitting: its JSON length (what both adapters store).
fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_string(value).map_or(0, |json| json.len())
}

impl Commit {
    /// Transcript entries and events in this commit (the run, session and lock ride along).
    pub fn write_count(&self) -> usize {
        self.transcript.len() + self.events.len()
    }

    /// Whether one `Store::commit` may carry this.
    pub fn fits(&self) -> bool {
        self.write_count() <= MAX_COMMIT_WRITES && self.payload_bytes() <= MAX_COMMIT_BYTES
    }

    /// JSON bytes of the entries and events, as [`fits`](Self::fits) counts them.
    pub(crate) fn payload_bytes(&self) -> usize {
        self.transcript.iter().map(json_len).sum::<usize>()
            + self.events.iter().map(json_len).sum::<usize>()
    }

    /// Splits into parts that each [`fit`](Self::fits) (one part when this one does). Order is
    /// kept: transcript entries first, then events, by position. Every part names the run its
    /// events belong to; the run record, the session update and the lock release are in the last
    /// part only. Applying the parts in order, each atomically, gives the same end state as
    /// applying the whole at once.
    pub fn split(self) -> Vec<Commit> {
        if self.fits() {
            return vec![self];
        }
        let run_id = self.events_run_id();
        let fresh = || Commit {
            run_id: run_id.clone(),
            ..Commit::default()
        };
        let mut parts = vec![fresh()];
        let mut bytes = 0usize;
        for entry in self.transcript {
            let size = json_len(&entry);
            let full = parts.last().is_some_and(|p| {
                p.write_count() > 0
                    && (p.write_count() + 1 > MAX_COMMIT_WRITES || bytes + size > MAX_COMMIT_BYTES)
            });
            if full {
                parts.push(fresh());
                bytes = 0;
            }
            bytes += size;
            if let Some(part) = parts.last_mut() {
                part.transcript.push(entry);
            }
        }
        for event in self.events {
            let size = json_len(&event);
            let full = parts.last().is_some_and(|p| {
                p.write_count() > 0
                    && (p.write_count() + 1 > MAX_COMMIT_WRITES || bytes + size > MAX_COMMIT_BYTES)
            });
            if full {
                parts.push(fresh());
                bytes = 0;
            }
            bytes += size;
            if let Some(part) = parts.last_mut() {
                part.events.push(event);
            }
        }
        if let Some(last) = parts.last_mut() {
            last.run = self.run;
            last.session = self.session;
            last.release_lock = self.release_lock;
        }
        parts
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::run::{Event, EventStream};
    use crate::transcript::{Message, TranscriptEntry};
    use crate::{RunId, SessionUpdate};

    fn entry(seq: u64, text: &str) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            run_id: RunId::from("run_a"),
            ts: 1,
            message: Message::user(text),
        }
    }

    fn event(seq: u64) -> Event {
        Event {
            seq,
            stream: EventStream::Tool,
            ts: 1,
            data: serde_json::json!({"phase": "end"}),
        }
    }

    #[test]
    fn a_small_commit_is_one_part() {
        let commit = Commit {
            transcript: vec![entry(0, "hi")],
            events: vec![event(0)],
            release_lock: true,
            ..Commit::default()
        };
        assert_eq!(commit.clone().split(), vec![commit]);
    }

    #[test]
    fn many_writes_split_with_the_session_and_release_last() {
        let commit = Commit {
            transcript: (0..150).map(|s| entry(s, "x")).collect(),
            events: (0..100).map(event).collect(),
            session: Some(SessionUpdate {
                status: crate::SessionStatus::Idle,
                active_run_id: None,
                last_progress_at: 1,
                finished_delta: 1,
            }),
            release_lock: true,
            ..Commit::default()
        };
        let parts = commit.split();
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(Commit::fits));
        assert!(parts.iter().all(|p| p.run_id == Some(RunId::from("run_a"))));
        let (last, init) = parts.split_last().unwrap();
        assert!(last.release_lock && last.session.is_some());
        assert!(init.iter().all(|p| !p.release_lock && p.session.is_none()));
        let seqs: Vec<u64> = parts
            .iter()
            .flat_map(|p| p.transcript.iter().map(|e| e.seq))
            .collect();
        assert_eq!(seqs, (0..150).collect::<Vec<_>>());
        let events: Vec<u64> = parts
            .iter()
            .flat_map(|p| p.events.iter().map(|e| e.seq))
            .collect();
        assert_eq!(events, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn large_entries_split_by_bytes() {
        let big = "y".repeat(300_000);
        let commit = Commit {
            transcript: (0..25).map(|s| entry(s, &big)).collect(),
            ..Commit::default()
        };
        let parts = commit.split();
        assert!(parts.len() >= 3, "{}", parts.len());
        assert!(parts.iter().all(Commit::fits));
        assert_eq!(parts.iter().map(Commit::write_count).sum::<usize>(), 25);
    }
}
