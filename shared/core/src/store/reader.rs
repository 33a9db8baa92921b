//! Reading what turns left behind: runs, sessions, transcripts, events.

use super::{PageBudget, StoreResult};
use crate::ids::{RunId, SessionId, SessionKey, TenantId};
use crate::run::{Event, Run, RunStatus};
use crate::session::Session;
use crate::transcript::TranscriptEntry;
use async_trait::async_trait;

/// What a wait needs to know about a run before it waits ([`HistoryReader::run_progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunProgress {
    /// The run's status.
    pub status: RunStatus,
    /// Whether another run carried it (`into_run_id` set): it ends as that run does.
    pub carried: bool,
}

impl RunProgress {
    /// The progress of `run` as read whole.
    pub fn of(run: &Run) -> Self {
        Self {
            status: run.status,
            carried: run.into_run_id.is_some(),
        }
    }

    /// Whether a wait on the run can only wait for now: not ended, not paused for an answer,
    /// not carried by another run.
    pub fn only_waits(&self) -> bool {
        !self.status.is_terminal() && self.status != RunStatus::RequiresAction && !self.carried
    }
}

/// Reads, all strongly consistent: a read after a successful write sees it. Records read back
/// exactly as the [size rule](crate::record_size) stored them.
#[async_trait]
pub trait HistoryReader: Send + Sync + 'static {
    /// The run, `None` when the tenant has no such run.
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>>;

    /// The run's status and whether another run carried it, `None` when the tenant has no such
    /// run: what a wait reads first. The default reads the whole run; an adapter may read less.
    async fn run_progress(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<Option<RunProgress>> {
        Ok(self
            .get_run(tenant, run_id)
            .await?
            .as_ref()
            .map(RunProgress::of))
    }

    /// The session of a key, `None` when the key was never used.
    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>>;

    /// Entries with `seq > after` (all when `None`), in order, within `budget`: adapters stop
    /// reading before the entry that would cross its bytes (measured on the stored JSON, before
    /// decoding), and always return the first entry there is.
    async fn read_transcript_page(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Events with `seq > after` (all when `None`), in order, within `budget` (as
    /// [`read_transcript_page`](Self::read_transcript_page)).
    async fn read_events_page(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<Event>>;

    /// Entries with `seq > after` (all when `None`), in order, at most `limit`, with no byte
    /// bound: for callers that read a whole history on purpose. Answers to clients use
    /// [`read_transcript_page`](Self::read_transcript_page).
    async fn read_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.read_transcript_page(tenant, session_id, after, PageBudget::count(limit))
            .await
    }

    /// Events with `seq > after` (all when `None`), in order, at most `limit`, with no byte
    /// bound (see [`read_transcript`](Self::read_transcript)).
    async fn read_events(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        self.read_events_page(tenant, run_id, after, PageBudget::count(limit))
            .await
    }

    /// Whether an abort was requested for the run (`false` for an unknown run). Called about
    /// twice a second per running turn: adapters may read only that attribute.
    async fn abort_requested(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<bool> {
        Ok(self
            .get_run(tenant, run_id)
            .await?
            .is_some_and(|r| r.abort_requested))
    }

    /// The seq the run's next event takes: one more than its newest event's, 0 when it has
    /// none (or the run is unknown). A resumed pickup numbers its events from here. Adapters
    /// answer with one cheap read of the newest event; this default reads them all.
    async fn next_event_seq(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<u64> {
        let mut next: u64 = 0;
        loop {
            let page = self
                .read_events(tenant, run_id, next.checked_sub(1), 1000)
                .await?;
            match page.last() {
                Some(last) => next = last.seq + 1,
                None => return Ok(next),
            }
        }
    }
}
