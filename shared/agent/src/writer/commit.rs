//! Commits: what a commit carries is named by its [`CommitKind`]; a commit too large for one
//! store transaction is split ([`Commit::split`]) and its parts land in order, each atomically,
//! with the run record, the session update and the lock release in the last part — so a run is
//! never marked finished (nor the lock released) before all its entries are stored.

use super::Hold;
use super::RunWriter;
use super::fit::fit_finished;
use agentlane_core::backoff::jittered;
use agentlane_core::{
    AbortReason, Commit, Message, SessionStatus, SessionUpdate, StoreError, StoreResult,
    TranscriptEntry,
};
use std::time::Duration;

/// Transient failures of one commit part are retried this many times.
const MAX_COMMIT_RETRIES: u32 = 4;

/// What one commit of the writer carries. Every kind carries the pending events too.
#[derive(Debug, Clone, PartialEq)]
pub enum CommitKind {
    /// Pending events (streaming progress: reply deltas, tool start/end), with the session's
    /// `lastProgressAt` moved to now — the supervisor's proof of progress (a lease renewal alone
    /// is not progress).
    Events,
    /// Transcript entries, without the run record (a compaction summary).
    Entries(Vec<Message>),
    /// The run record alone (a new checkpoint after a retry decision); the session is untouched.
    RunRecord,
    /// Transcript entries and the run record; the session stays `processing` on this run.
    Progress(Vec<Message>),
    /// The run is handed back unfinished: the run record, the session still `processing`, and
    /// the lock released.
    HandBack,
    /// The run ended: its last entries, the terminal run record, the session `idle` (one more
    /// finished run), and the lock released.
    Finish(Vec<Message>),
}

/// The shape of a commit kind: (entries, with the run record, session status, release).
struct Shape {
    messages: Vec<Message>,
    with_run: bool,
    session: Option<SessionStatus>,
    release: bool,
}

impl CommitKind {
    fn shape(self) -> Shape {
        let shape = |messages, with_run, session, release| Shape {
            messages,
            with_run,
            session,
            release,
        };
        match self {
            CommitKind::Events => shape(Vec::new(), false, Some(SessionStatus::Processing), false),
            CommitKind::Entries(m) => shape(m, false, None, false),
            CommitKind::RunRecord => shape(Vec::new(), true, None, false),
            CommitKind::Progress(m) => shape(m, true, Some(SessionStatus::Processing), false),
            CommitKind::HandBack => shape(Vec::new(), true, Some(SessionStatus::Processing), true),
            CommitKind::Finish(m) => shape(m, true, Some(SessionStatus::Idle), true),
        }
    }
}

impl RunWriter {
    /// One logical commit under the fence: `kind`'s entries appended to the transcript, the
    /// pending events, and what `kind` says about the run, the session and the lock. Split
    /// into parts when it does not fit one store transaction; see the module docs.
    pub async fn commit(&mut self, kind: CommitKind) -> StoreResult<()> {
        let now = self.now();
        self.events.take_delta(now);
        let mut shape = kind.shape();
        let mut hold = None;
        if let Some(held) = self.held_start.take() {
            // The held start goes first, with the run record and the session on this run.
            let mut messages = held.messages;
            messages.append(&mut shape.messages);
            shape.messages = messages;
            shape.with_run = true;
            shape.session = shape.session.or(Some(SessionStatus::Processing));
            // A run that ends in this write is not interrupted: the interrupt goes next.
            hold = (!self.run.status.is_terminal()).then_some(held.hold);
        }
        let commit = self.build(shape, now);
        let added = commit.transcript.len() as u64;
        let landing = match &self.log {
            Some(_) if added > 0 => Some(commit.transcript.clone()),
            _ => None,
        };
        let mut parts = commit.split().into_iter().peekable();
        while let Some(part) = parts.next() {
            // The last part carries the run record and the session: the start.
            let watch = hold.as_ref().filter(|_| parts.peek().is_none());
            if let Err(e) = self.commit_part(part, watch).await {
                self.spoil_log();
                return Err(e);
            }
        }
        if let (Some(log), Some(landed)) = (&self.log, landing) {
            log.landed(landed);
        }
        self.next_seq += added;
        self.events.committed();
        Ok(())
    }

    fn build(&self, shape: Shape, now: u64) -> Commit {
        let transcript: Vec<TranscriptEntry> = shape
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, message)| TranscriptEntry {
                seq: self.next_seq + i as u64,
                run_id: self.run.run_id.clone(),
                ts: now,
                message,
            })
            .collect();
        let finished = shape.session == Some(SessionStatus::Idle) && self.run.status.is_terminal();
        Commit {
            run_id: Some(self.run.run_id.clone()),
            transcript,
            events: self.events.pending().to_vec(),
            // A terminal record too large to store is shrunk when the store says so
            // (`commit_part`): measuring every record here encoded each one twice.
            run: shape.with_run.then(|| self.run.clone()),
            session: shape.session.map(|status| SessionUpdate {
                status,
                active_run_id: match status {
                    SessionStatus::Processing => Some(self.run.run_id.clone()),
                    SessionStatus::Idle => None,
                },
                last_progress_at: now,
                finished_delta: u64::from(finished && !self.run.out_of_turn),
            }),
            release_lock: shape.release,
        }
    }

    /// The log (if kept) no longer knows what the transcript holds.
    pub(super) fn spoil_log(&self) {
        if let Some(log) = &self.log {
            log.spoil();
        }
    }

    /// One part, retrying transient failures with jittered backoff. A `Conflict` on a retry
    /// means the earlier try of this part landed: while we hold the fence nobody else can write
    /// its seqs.
    ///
    /// With `hold` (the part that writes a held start), the run is stopped for its abort when
    /// an interrupt was accepted while the start was held ([`Hold::watch`]).
    ///
    /// A part whose terminal run record is too large for the store (`TooLarge`: nothing was
    /// written) is tried again once with the record shrunk to fit ([`fit_finished`]).
    async fn commit_part(&self, mut part: Commit, hold: Option<&Hold>) -> StoreResult<()> {
        let mut tries = 0u32;
        let mut fitted = false;
        loop {
            let landed = match hold {
                Some(hold) => self.commit_watching(part.clone(), hold).await,
                None => self.store.commit(&self.fence, part.clone()).await,
            };
            match landed {
                Ok(()) => return Ok(()),
                Err(StoreError::TooLarge(_))
                    if !fitted && part.run.as_ref().is_some_and(|r| r.status.is_terminal()) =>
                {
                    fitted = true;
                    part.run = part.run.take().map(fit_finished);
                }
                Err(StoreError::Conflict(_)) if tries > 0 => return Ok(()),
                Err(e) if e.is_transient() && tries < MAX_COMMIT_RETRIES => {
                    tries += 1;
                    tracing::warn!(error = %e, tries, "commit failed; retrying");
                    tokio::time::sleep(jittered(Duration::from_millis(100 << tries))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `part` written with
    /// [`commit_watching`](agentlane_core::FencedWriter::commit_watching); when the store did
    /// not look at the interrupt mark in that write, the session is read and the abort asked
    /// here.
    async fn commit_watching(&self, part: Commit, hold: &Hold) -> StoreResult<()> {
        let watch = &hold.watch;
        let asked = match self.store.commit_watching(&self.fence, part, watch).await? {
            Some(asked) => asked,
            None => {
                let tenant = &self.fence.tenant;
                let session = self
                    .store
                    .get_session(tenant, &self.fence.session_key)
                    .await?;
                match session.filter(|s| watch.interrupted_by(s)) {
                    Some(_) => self
                        .store
                        .request_abort_for(tenant, &watch.run_id, AbortReason::Interrupted)
                        .await?
                        .is_some(),
                    None => false,
                }
            }
        };
        if asked {
            tracing::info!(run = %watch.run_id, "an interrupt came while the run's start was held; the run stops");
            hold.stop.trigger(crate::runner::StopReason::Abort);
        }
        Ok(())
    }
}
