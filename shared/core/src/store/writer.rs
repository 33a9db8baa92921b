//! The fenced writer: one atomic [`Commit`] per call, applied only while the writer's fence is
//! current, and the rules every adapter applies to a commit before it writes it
//! ([`Commit::check`]).

use super::SteerTake;
use super::{StoreError, StoreResult};
use crate::commit_parts::{MAX_COMMIT_BYTES, MAX_COMMIT_WRITES};
use crate::ids::RunId;
use crate::queue::AcceptedRecord;
use crate::record_size;
use crate::run::{Event, Run};
use crate::session::{Fence, InterruptWatch, SessionUpdate};
use crate::transcript::TranscriptEntry;
use async_trait::async_trait;
use std::collections::HashSet;

/// One atomic, fenced write for a run: transcript entries (of the fenced session's current
/// session id), events (of one run, see [`events_run_id`](Self::events_run_id)), the run record,
/// session activity, and optionally the lock release. Transcript entries and events are put only
/// if their `seq` is free.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Commit {
    /// The run `events` belong to; when `None`, see [`events_run_id`](Self::events_run_id).
    pub run_id: Option<RunId>,
    /// Entries to append to the session's current transcript.
    pub transcript: Vec<TranscriptEntry>,
    /// Events to append to the run's event log.
    pub events: Vec<Event>,
    /// The run record to replace (all but `abort_requested`, which only the API sets).
    pub run: Option<Run>,
    /// Activity fields to set on the session.
    pub session: Option<SessionUpdate>,
    /// Give the lock back in the same write.
    pub release_lock: bool,
}

impl Commit {
    /// Whether the commit writes nothing at all (it still checks the fence).
    pub fn is_empty(&self) -> bool {
        self.transcript.is_empty()
            && self.events.is_empty()
            && self.run.is_none()
            && self.session.is_none()
            && !self.release_lock
    }

    /// The run this commit's events belong to, the one rule every adapter follows: `run_id`,
    /// else the run of `run`, else the run of the first transcript entry. `None` when the commit
    /// names none of the three (a commit with events is then refused).
    pub fn events_run_id(&self) -> Option<RunId> {
        self.run_id
            .clone()
            .or_else(|| self.run.as_ref().map(|run| run.run_id.clone()))
            .or_else(|| self.transcript.first().map(|entry| entry.run_id.clone()))
    }

    /// The rules every adapter applies before writing, in this order, so that a commit is
    /// stored the same way on every backend and a refused one writes nothing:
    /// 1. it must [`fit`](Self::fits) one write (else `TooLarge`: split it with
    ///    [`split`](Self::split));
    /// 2. no transcript or event `seq` appears twice (else `Conflict`);
    /// 3. events need a run to belong to ([`events_run_id`](Self::events_run_id); else
    ///    `NotFound`);
    /// 4. the run record belongs to the fence's tenant (else `Conflict`) and is within
    ///    [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES) (else `TooLarge`);
    /// 5. entries and events go through the [size rule](crate::record_size).
    ///
    /// Each entry, event and the run is encoded to JSON once here; the checked commit keeps
    /// those encodings for the adapter to store ([`CheckedCommit::transcript_json`], ...).
    pub fn check(self, fence: &Fence) -> StoreResult<CheckedCommit> {
        let entry_json = encode_all(&self.transcript)?;
        let event_json = encode_all(&self.events)?;
        let bytes: usize = entry_json.iter().chain(&event_json).map(String::len).sum();
        if self.write_count() > MAX_COMMIT_WRITES || bytes > MAX_COMMIT_BYTES {
            return Err(StoreError::TooLarge(format!(
                "a commit of {} entries and events ({bytes} bytes) is over the limit of \
                 {MAX_COMMIT_WRITES} writes and {MAX_COMMIT_BYTES} bytes; split it with \
                 Commit::split",
                self.write_count(),
            )));
        }
        check_distinct_seqs(&self)?;
        let events_run = if self.events.is_empty() {
            None
        } else {
            Some(self.events_run_id().ok_or_else(|| {
                StoreError::NotFound("a commit with events must name the run they belong to".into())
            })?)
        };
        let run_json = match &self.run {
            Some(run) if run.tenant != fence.tenant => {
                return Err(StoreError::Conflict(format!(
                    "run {} belongs to another tenant than the fence",
                    run.run_id
                )));
            }
            Some(run) => Some(record_size::run_json(run)?),
            None => None,
        };
        let (transcript, transcript_json) = self
            .transcript
            .into_iter()
            .zip(entry_json)
            .map(|(entry, json)| record_size::stored_entry(entry, json))
            .collect::<StoreResult<(Vec<_>, Vec<_>)>>()?;
        let (events, events_json) = self
            .events
            .into_iter()
            .zip(event_json)
            .map(|(event, json)| record_size::stored_event(event, json))
            .collect::<StoreResult<(Vec<_>, Vec<_>)>>()?;
        Ok(CheckedCommit {
            events_run,
            transcript,
            transcript_json,
            events,
            events_json,
            run: self.run,
            run_json,
            session: self.session,
            release_lock: self.release_lock,
        })
    }
}

/// The JSON of each record, in order.
fn encode_all<T: serde::Serialize>(records: &[T]) -> StoreResult<Vec<String>> {
    records.iter().map(record_size::to_json).collect()
}

/// A store must never keep two entries (or events) with one seq, and DynamoDB refuses a
/// transaction naming one item twice.
fn check_distinct_seqs(commit: &Commit) -> StoreResult<()> {
    let mut seen = HashSet::new();
    if let Some(entry) = commit.transcript.iter().find(|e| !seen.insert(e.seq)) {
        return Err(StoreError::Conflict(format!(
            "transcript seq {} appears twice in one commit",
            entry.seq
        )));
    }
    let mut seen = HashSet::new();
    if let Some(event) = commit.events.iter().find(|e| !seen.insert(e.seq)) {
        return Err(StoreError::Conflict(format!(
            "event seq {} appears twice in one commit",
            event.seq
        )));
    }
    Ok(())
}

/// A commit that passed [`Commit::check`]: what an adapter writes, field for field.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedCommit {
    events_run: Option<RunId>,
    transcript: Vec<TranscriptEntry>,
    transcript_json: Vec<String>,
    events: Vec<Event>,
    events_json: Vec<String>,
    run: Option<Run>,
    run_json: Option<String>,
    session: Option<SessionUpdate>,
    release_lock: bool,
}

impl CheckedCommit {
    /// The run the events belong to; `Some` whenever there are events.
    pub fn events_run(&self) -> Option<&RunId> {
        self.events_run.as_ref()
    }

    /// The entries, each within [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES).
    pub fn transcript(&self) -> &[TranscriptEntry] {
        &self.transcript
    }

    /// The JSON each entry of [`transcript`](Self::transcript) is stored as, in the same order.
    pub fn transcript_json(&self) -> &[String] {
        &self.transcript_json
    }

    /// The events, each within [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The JSON each event of [`events`](Self::events) is stored as, in the same order.
    pub fn events_json(&self) -> &[String] {
        &self.events_json
    }

    /// The run record to replace (never its `abort_requested`).
    pub fn run(&self) -> Option<&Run> {
        self.run.as_ref()
    }

    /// The JSON the run record is stored as, when the commit has one.
    pub fn run_json(&self) -> Option<&str> {
        self.run_json.as_deref()
    }

    /// The session activity to set.
    pub fn session(&self) -> Option<&SessionUpdate> {
        self.session.as_ref()
    }

    /// Whether the lock is released in the same write.
    pub fn release_lock(&self) -> bool {
        self.release_lock
    }
}

/// Fenced writes from the holder of a session's lock.
#[async_trait]
pub trait FencedWriter: Send + Sync + 'static {
    /// Applies `commit` atomically if `fence` is current; otherwise writes nothing and answers
    /// `FenceLost`. A taken transcript or event `seq` answers `Conflict` and writes nothing.
    /// The run record is replaced except for `abort_requested`, which only the API sets.
    ///
    /// Sizes, the same on every backend (adapters apply [`Commit::check`] first):
    /// - a commit must [`fit`](Commit::fits) ([`MAX_COMMIT_WRITES`] entries and events,
    ///   [`MAX_COMMIT_BYTES`] of their JSON); a larger one is refused with `TooLarge` and writes
    ///   nothing. Adapters never split: a writer with more to say applies
    ///   [`Commit::split`]'s parts in order, each atomic, retrying a part whose `Conflict` shows
    ///   it landed;
    /// - an entry or event whose JSON is over [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES) is
    ///   stored cut down by the [size rule](crate::record_size) (text cut with a marker; event
    ///   data replaced by a size note), and read back that way;
    /// - a run record over that size is refused with `TooLarge`.
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()>;

    /// Takes the steer messages waiting for a running run (SPEC §4 `steer`), in one atomic
    /// write applied only if `fence` is current (else `FenceLost`, nothing written): every run
    /// that [`SteerTake::takes`], in `session_seq` order and at most
    /// [`MAX_STEERS_PER_TAKE`](super::MAX_STEERS_PER_TAKE), is replaced by
    /// [`SteerTake::mark`] and its message appended to the transcript as
    /// [`SteerTake::entry`]; pending-steer records that can no longer be taken are dropped.
    /// Answers the taken runs (as marked), oldest first; none when nothing waits (then nothing
    /// is written). A steer is found by a cheap read of its session's pending steers, recorded
    /// when it was accepted, never by scanning runs or reading the queue.
    async fn take_steers(&self, fence: &Fence, take: SteerTake) -> StoreResult<Vec<Run>>;

    /// Whether [`take_steers`](Self::take_steers) with `take` would take a message now: the
    /// same cheap read of the session's pending steers, and nothing written. A run whose tools
    /// run one at a time asks before each launch (SPEC §4 `steer`: the calls not started yet
    /// are skipped when a steer waits).
    async fn steers_waiting(&self, fence: &Fence, take: &SteerTake) -> StoreResult<bool>;

    /// Applies `commit` as [`commit`](Self::commit) does: the write that carries the start of
    /// a run whose start was held back. Then, when `watch` finds the session's interrupt mark
    /// set on that run since its pickup took the lock ([`InterruptWatch::interrupted_by`]: an
    /// `interrupt` accepted while the start was held found no active run), asks for the run's
    /// abort (`interrupted`), as that interrupt's accept would have. Answers `Some(asked)` when
    /// the store looked in the commit's own write; `None` (the default) when it did not, and
    /// the caller reads the session and asks itself.
    async fn commit_watching(
        &self,
        fence: &Fence,
        commit: Commit,
        _watch: &InterruptWatch,
    ) -> StoreResult<Option<bool>> {
        self.commit(fence, commit).await.map(|()| None)
    }

    /// Whether this store can check an [`AcceptedRecord`] ([`expect_accepted`](Self::expect_accepted)):
    /// the API then puts one in a run's first lane message. `false` unless an adapter says so.
    fn checks_accepted_records(&self) -> bool {
        false
    }

    /// The holder of `fence` takes run `run_id` as `record` says it was accepted, without
    /// reading it. When this answers `true`, the next commit under `fence` that writes the
    /// run's record also requires the stored record to be still exactly `record`, with no
    /// abort requested; otherwise that commit writes nothing and answers `Conflict` (read the
    /// run and start over). `false`: not checked here; read the run.
    fn expect_accepted(&self, _fence: &Fence, _run_id: &RunId, _record: &AcceptedRecord) -> bool {
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::{FencingToken, SessionKey, TenantId};
    use crate::run::EventStream;
    use crate::transcript::Message;

    fn fence() -> Fence {
        Fence {
            tenant: TenantId::new("t"),
            session_key: SessionKey::new("k"),
            owner: "runner".into(),
            token: FencingToken(1),
        }
    }

    fn entry(seq: u64, run: &str) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            run_id: RunId::new(run),
            ts: 1,
            message: Message::user("hi"),
        }
    }

    fn event(seq: u64) -> Event {
        Event {
            seq,
            stream: EventStream::Lifecycle,
            ts: 1,
            data: serde_json::json!({}),
        }
    }

    fn run(tenant: &str, id: &str) -> Run {
        serde_json::from_value(serde_json::json!({
            "runId": id, "tenant": tenant, "sessionKey": "k", "sessionId": "s",
            "status": "running", "livenessState": "working",
            "request": { "message": "hello" }, "acceptedAt": 1
        }))
        .unwrap()
    }

    #[test]
    fn events_belong_to_the_named_run_then_the_runs_then_the_first_entrys() {
        let mut commit = Commit {
            transcript: vec![entry(1, "run_entry")],
            events: vec![event(1)],
            ..Commit::default()
        };
        assert_eq!(commit.events_run_id(), Some(RunId::new("run_entry")));
        commit.run = Some(run("t", "run_record"));
        assert_eq!(commit.events_run_id(), Some(RunId::new("run_record")));
        commit.run_id = Some(RunId::new("run_named"));
        assert_eq!(commit.events_run_id(), Some(RunId::new("run_named")));
        assert_eq!(Commit::default().events_run_id(), None);
    }

    #[test]
    fn events_without_a_run_are_refused_and_a_commit_without_events_needs_none() {
        let lone = Commit {
            events: vec![event(1)],
            release_lock: true,
            ..Commit::default()
        };
        assert!(matches!(lone.check(&fence()), Err(StoreError::NotFound(_))));
        let checked = Commit {
            transcript: vec![entry(1, "run_1")],
            ..Commit::default()
        }
        .check(&fence())
        .unwrap();
        assert_eq!(checked.events_run(), None);
        let checked = Commit {
            transcript: vec![entry(1, "run_1")],
            events: vec![event(1)],
            ..Commit::default()
        }
        .check(&fence())
        .unwrap();
        assert_eq!(checked.events_run(), Some(&RunId::new("run_1")));
    }

    #[test]
    fn a_seq_named_twice_is_a_conflict() {
        let twice = Commit {
            transcript: vec![entry(1, "r"), entry(2, "r"), entry(1, "r")],
            ..Commit::default()
        };
        assert!(matches!(
            twice.check(&fence()),
            Err(StoreError::Conflict(_))
        ));
        let twice = Commit {
            run_id: Some(RunId::new("r")),
            events: vec![event(3), event(3)],
            ..Commit::default()
        };
        assert!(matches!(
            twice.check(&fence()),
            Err(StoreError::Conflict(_))
        ));
        let distinct = Commit {
            transcript: vec![entry(1, "r")],
            events: vec![event(1)],
            ..Commit::default()
        };
        assert!(distinct.check(&fence()).is_ok());
    }

    #[test]
    fn a_commit_over_the_limits_is_too_large_and_permanent() {
        let many = Commit {
            transcript: (0..=MAX_COMMIT_WRITES as u64)
                .map(|s| entry(s, "r"))
                .collect(),
            ..Commit::default()
        };
        let err = many.check(&fence()).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge(_)), "{err:?}");
        assert!(!err.is_transient());
        let at_limit = Commit {
            transcript: (0..MAX_COMMIT_WRITES as u64)
                .map(|s| entry(s, "r"))
                .collect(),
            ..Commit::default()
        };
        assert!(at_limit.check(&fence()).is_ok());
    }

    #[test]
    fn another_tenants_run_is_a_conflict() {
        let foreign = Commit {
            run: Some(run("other", "r")),
            ..Commit::default()
        };
        assert!(matches!(
            foreign.check(&fence()),
            Err(StoreError::Conflict(_))
        ));
    }

    #[test]
    fn oversized_entries_and_events_are_cut_by_the_size_rule() {
        let mut big = entry(1, "r");
        big.message = Message::user("x".repeat(500_000));
        let commit = Commit {
            transcript: vec![big.clone(), entry(2, "r")],
            events: vec![Event {
                data: serde_json::json!({ "blob": "y".repeat(500_000) }),
                ..event(1)
            }],
            ..Commit::default()
        };
        let checked = commit.check(&fence()).unwrap();
        assert_eq!(
            checked.transcript()[0],
            record_size::fit_entry(big).unwrap()
        );
        assert_eq!(checked.transcript()[1], entry(2, "r"));
        assert_eq!(
            checked.events()[0].data["truncated"],
            serde_json::json!(true)
        );
    }
}
