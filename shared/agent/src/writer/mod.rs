//! Every fenced write of one run goes through [`RunWriter`]: it owns the run record (changed
//! only through intent-named methods), numbers transcript entries and events, coalesces
//! assistant deltas into a few events, checkpoints the retry state, and commits under the run's
//! fence — splitting a commit too large for one store transaction into parts that each land
//! atomically, the run record, session update and lock release in the last.
//!
//! - [`record`]: the run record's accessors and mutators.
//! - [`commit`]: [`CommitKind`], splitting, and the retry-after-conflict rule.
//! - `events`: the event buffer and assistant-text coalescing.

pub mod commit;
mod events;
pub mod fit;
pub mod record;

pub use commit::CommitKind;

use agentlane_core::{Clock, EventStream, Fence, Run, SteerTake, Store, StoreResult};
use events::EventBuffer;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The writer of one run, valid while its fence is.
pub struct RunWriter {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    fence: Fence,
    /// The run record as this writer last wrote it (or will write on the next commit that
    /// carries it).
    run: Run,
    /// The seq the next transcript entry gets.
    next_seq: u64,
    events: EventBuffer,
    /// What landed in the transcript, for the runner's transcript cache.
    log: Option<crate::context::cache::TranscriptLog>,
    /// The start of the run, held back to go with its next write (see [`RunWriter::start`]).
    held_start: Option<HeldStart>,
}

/// A start commit held back: its transcript entries, when it is written on its own at the
/// latest (ms since the epoch, by the writer's clock), and what its write watches for.
struct HeldStart {
    messages: Vec<agentlane_core::Message>,
    due: u64,
    hold: Hold,
}

/// How a run's start is held back ([`RunWriter::start`]).
#[derive(Clone)]
pub struct Hold {
    /// The longest the start waits for the run's next write.
    pub at_most: Duration,
    /// The interrupt mark the pickup saw: the write that carries the start asks for the run's
    /// abort when an `interrupt` accepted meanwhile set the mark on it (it found no active run
    /// to abort, the start not being written).
    pub watch: agentlane_core::InterruptWatch,
    /// The run's stop signal, triggered
    /// ([`StopReason::Abort`](crate::runner::StopReason::Abort)) when that write asked for the
    /// abort.
    pub stop: crate::runner::StopSignal,
}

/// Where the run's transcript and events stand when a writer takes over.
#[derive(Debug, Clone, Copy)]
pub struct Positions {
    /// The seq the next transcript entry gets.
    pub next_seq: u64,
    /// The seq the next event gets.
    pub next_event_seq: u64,
}

/// How assistant text is coalesced into events.
#[derive(Debug, Clone, Copy)]
pub struct DeltaFlush {
    /// Commit buffered assistant text once this many bytes gathered...
    pub bytes: usize,
    /// ...or this long after the last commit.
    pub every: Duration,
}

impl RunWriter {
    /// A writer for `run` under `fence`, numbering from `positions`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        fence: Fence,
        run: Run,
        positions: Positions,
        flush: DeltaFlush,
    ) -> Self {
        Self {
            store,
            clock,
            fence,
            run,
            next_seq: positions.next_seq,
            events: EventBuffer::new(positions.next_event_seq, flush.bytes, flush.every),
            log: None,
            held_start: None,
        }
    }

    /// Starts the run: its start entries (the prompt) with the run record, the session
    /// `processing` on this run and the pending events. With `hold`, nothing is written yet:
    /// the start goes with the run's next write, or on its own once `hold` has passed (see
    /// [`RunWriter::start_due_in`]), so a quick turn writes its start and its end together. A
    /// pickup that dies meanwhile leaves the run as it found it (queued, not picked up).
    pub async fn start(
        &mut self,
        messages: Vec<agentlane_core::Message>,
        hold: Option<Hold>,
    ) -> StoreResult<()> {
        match hold.filter(|h| !h.at_most.is_zero()) {
            Some(hold) => {
                let at_most = u64::try_from(hold.at_most.as_millis()).unwrap_or(u64::MAX);
                let due = self.now().saturating_add(at_most);
                self.held_start = Some(HeldStart {
                    messages,
                    due,
                    hold,
                });
                Ok(())
            }
            None => self.commit(CommitKind::Progress(messages)).await,
        }
    }

    /// How long a held start may still wait before it is written on its own; `None` when no
    /// start is held.
    pub fn start_due_in(&self) -> Option<Duration> {
        self.held_start
            .as_ref()
            .map(|h| Duration::from_millis(h.due.saturating_sub(self.now())))
    }

    /// Writes a held start now (no-op when none is held).
    pub async fn write_held_start(&mut self) -> StoreResult<()> {
        match self.held_start {
            Some(_) => self.commit(CommitKind::Progress(Vec::new())).await,
            None => Ok(()),
        }
    }

    /// Records every transcript entry this writer's commits land in `log` (and spoils it when
    /// a commit fails or the store adds entries of its own).
    pub fn keep_log(&mut self, log: crate::context::cache::TranscriptLog) {
        self.log = Some(log);
    }

    /// Now, by the runner's clock (ms since epoch).
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The seq the next transcript entry gets (every entry the run wrote or took is below it).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The fence every commit is conditioned on.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Queues an event (after any buffered assistant text, to keep order). It is written with
    /// the next commit.
    pub fn event(&mut self, stream: EventStream, data: Value) {
        let ts = self.now();
        self.events.push(stream, data, ts);
    }

    /// The `seq` of the last event queued (committed or not), if the run has any.
    pub fn last_event_seq(&self) -> Option<u64> {
        self.events.last_seq()
    }

    /// Starts a new model attempt's text (assistant events carry the text accumulated so far).
    pub fn begin_attempt_text(&mut self) {
        let ts = self.now();
        self.events.begin_attempt(ts);
    }

    /// Buffers assistant text; commits the buffered events when enough text or time gathered.
    /// While nothing of the attempt was shown yet and the text so far could be a tool call written
    /// as text or the silent token, it is held back (see [`RunWriter::release_held`]).
    pub async fn assistant_delta(&mut self, delta: &str) -> StoreResult<()> {
        if self.events.push_delta(delta) {
            self.flush_events().await?;
        }
        Ok(())
    }

    /// Commits pending events only (no-op when there are none).
    pub async fn flush_events(&mut self) -> StoreResult<()> {
        let ts = self.now();
        self.events.take_delta(ts);
        if !self.events.has_pending() {
            return Ok(());
        }
        self.commit(CommitKind::Events).await
    }

    /// Drops buffered (uncommitted) assistant text, e.g. of an attempt that failed.
    pub fn discard_delta(&mut self) {
        self.events.discard_delta();
    }

    /// Shows held-back text after all: the answer was ordinary text.
    pub fn release_held(&mut self) {
        self.events.release_held();
    }

    /// Takes the steer messages waiting for this run (SPEC §4 `steer`), appended to the
    /// transcript as its next entries in one fenced write; answers their runs, oldest first.
    pub async fn take_steers(&mut self) -> StoreResult<Vec<Run>> {
        self.take_pending(agentlane_core::QueueMode::Steer).await
    }

    /// Takes the `collect` messages accepted after this run (SPEC §4 `collect`), at most
    /// [`MAX_STEERS_PER_TAKE`](agentlane_core::MAX_STEERS_PER_TAKE) per write: they join the
    /// run as user entries and their runs end `collected` into it.
    pub async fn take_collects(&mut self) -> StoreResult<Vec<Run>> {
        self.take_pending(agentlane_core::QueueMode::Collect).await
    }

    /// Whether a steer message waits for this run (a read; nothing is taken).
    pub async fn steers_waiting(&self) -> StoreResult<bool> {
        let take = self.pending_take(agentlane_core::QueueMode::Steer);
        self.store.steers_waiting(&self.fence, &take).await
    }

    fn pending_take(&self, mode: agentlane_core::QueueMode) -> SteerTake {
        SteerTake {
            mode,
            carrier: self.run.run_id.clone(),
            carrier_seq: self.run.session_seq,
            session_id: self.run.session_id.clone(),
            next_seq: self.next_seq,
            now: self.now(),
        }
    }

    async fn take_pending(&mut self, mode: agentlane_core::QueueMode) -> StoreResult<Vec<Run>> {
        // The taken messages are written after the run's own entries.
        self.write_held_start().await?;
        let take = self.pending_take(mode);
        let taken = match self.store.take_steers(&self.fence, take).await {
            Ok(taken) => taken,
            Err(e) => {
                self.spoil_log();
                return Err(e);
            }
        };
        if !taken.is_empty() {
            // The store wrote their entries; the log does not know them.
            self.spoil_log();
        }
        self.next_seq += taken.len() as u64;
        Ok(taken)
    }

    /// What became of the run's message (an interrupted run says so).
    pub fn set_queue_outcome(&mut self, outcome: agentlane_core::QueueOutcome) {
        self.run.queue_outcome = outcome;
    }

    /// Whether this pickup runs ahead of earlier runs of the session (an interrupt): its end is
    /// then not counted in the session's `runs_finished` (its own message counts it later).
    pub fn set_out_of_turn(&mut self, out_of_turn: bool) {
        self.run.out_of_turn = out_of_turn;
    }

    /// Drops held-back text: it was a tool call written as text, or the silent token.
    pub fn discard_held(&mut self) {
        self.events.discard_held();
    }
}
