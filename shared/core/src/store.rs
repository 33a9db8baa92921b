//! The `Store` seam: sessions, runs, transcript entries, events, idempotency records and the
//! session write lock.
//!
//! Two kinds of writes exist:
//! - unfenced writes from the API edge ([`Store::accept_turn`], [`Store::request_abort`],
//!   [`Store::reset_session`]), each atomic and conditional on its own;
//! - fenced writes from a lock holder ([`Store::commit`]): applied all together, and only if the
//!   session's lock is still held by the same owner with the same fencing token.

use crate::ids::{RunId, SessionId, SessionKey, TenantId};
use crate::run::{Event, Run, TurnRequest};
use crate::session::{Fence, LockAttempt, Session, SessionUpdate};
use crate::transcript::TranscriptEntry;
use async_trait::async_trait;

/// Store failures keep their kind: callers decide retry vs stop from the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The fence is stale: another writer took the lock (or it was released). Stop writing.
    #[error("the session lock was lost (stale fencing token)")]
    FenceLost,
    /// A conditional create found the item already there (e.g. a transcript seq).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The thing to change does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The session is locked by a live writer.
    #[error("session is busy")]
    Busy,
    /// The backend asked us to slow down; retry later.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Any other backend failure (I/O, network, service error).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored item could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether the same call may succeed if tried again later.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Throttled(_) | StoreError::Unavailable(_) | StoreError::Busy => true,
            StoreError::FenceLost
            | StoreError::Conflict(_)
            | StoreError::NotFound(_)
            | StoreError::Corrupt(_) => false,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A turn to accept (ingress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTurn {
    pub tenant: TenantId,
    pub session_key: SessionKey,
    /// The id to use if the turn is new.
    pub run_id: RunId,
    /// The session id to mint if the key has no session yet.
    pub new_session_id: SessionId,
    pub request: TurnRequest,
    pub idempotency_key: Option<String>,
    pub now: u64,
    /// How long an idempotency key maps to its run.
    pub idempotency_ttl_ms: u64,
}

impl NewTurn {
    /// The run this turn creates on `session_id`: `queued`, nothing done yet.
    pub fn queued_run(&self, session_id: SessionId) -> Run {
        Run {
            run_id: self.run_id.clone(),
            tenant: self.tenant.clone(),
            session_key: self.session_key.clone(),
            session_id,
            status: crate::run::RunStatus::Queued,
            liveness_state: crate::run::LivenessState::Working,
            request: self.request.clone(),
            idempotency_key: self.idempotency_key.clone(),
            accepted_at: self.now,
            started_at: None,
            ended_at: None,
            model: None,
            attempts: Vec::new(),
            usage: crate::run::Usage::default(),
            payloads: Vec::new(),
            error: None,
            abort_requested: false,
            pickups: 0,
            checkpoint: None,
        }
    }
}

/// What `accept_turn` did.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptOutcome {
    pub run: Run,
    /// `false` when the idempotency key already named a run: `run` is that run, nothing new
    /// was written.
    pub created: bool,
}

/// One atomic, fenced write for a run: transcript entries (of the fenced session's current
/// session id), events (of `run_id`), the run record, session activity, and optionally the lock
/// release. Transcript entries and events are put only if their `seq` is free.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Commit {
    /// The run `events` belong to. When `None`, the run of `run`, else of the first transcript
    /// entry; a commit with events and none of the three is refused (`NotFound`).
    pub run_id: Option<RunId>,
    pub transcript: Vec<TranscriptEntry>,
    pub events: Vec<Event>,
    pub run: Option<Run>,
    pub session: Option<SessionUpdate>,
    pub release_lock: bool,
}

impl Commit {
    pub fn is_empty(&self) -> bool {
        self.transcript.is_empty()
            && self.events.is_empty()
            && self.run.is_none()
            && self.session.is_none()
            && !self.release_lock
    }
}

/// Persistent state of agentlane. Every key starts with the tenant: isolation is structural.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Atomically: look up the idempotency key (a live record answers its run, `created:
    /// false`); create the session on first use of the key (with `new_session_id`); write the
    /// run as `queued` on the session's current id; record the idempotency key.
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome>;

    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>>;

    /// Whether an abort was requested for the run (`false` for an unknown run). Called about
    /// twice a second per running turn: adapters may read only that attribute.
    async fn abort_requested(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<bool> {
        Ok(self
            .get_run(tenant, run_id)
            .await?
            .is_some_and(|r| r.abort_requested))
    }

    /// Sets `abort_requested` on a run. Returns the run after the change, `None` if unknown.
    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>>;

    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>>;

    /// Gives the key a new session id, unless a live lock is held (`Busy`). `NotFound` when the
    /// key has no session.
    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session>;

    /// Entries with `seq > after` (all when `None`), in order, at most `limit`.
    async fn read_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Events with `seq > after` (all when `None`), in order, at most `limit`.
    async fn read_events(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>>;

    /// The seq the run's next event takes: one more than its newest event's, 0 when it has
    /// none. A resumed pickup numbers its events from here. Adapters should answer with one
    /// cheap read of the newest event; this default reads them all.
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

    /// One try: take the lock if it is free or its lease ended before `now`; the fencing token
    /// grows by one with every acquisition. Not reentrant: the same owner gets `Held` too.
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt>;

    /// Extends the lease to `now + lease_ms`; `FenceLost` if the fence is no longer current.
    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()>;

    /// Releases the lock; `FenceLost` if it was not ours any more.
    async fn release_lock(&self, fence: &Fence) -> StoreResult<()>;

    /// Applies `commit` atomically if `fence` is current; otherwise writes nothing and answers
    /// `FenceLost`. A taken transcript or event `seq` answers `Conflict` and writes nothing.
    /// The run record is replaced except for `abort_requested`, which only the API sets.
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()>;
}
