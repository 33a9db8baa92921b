//! A store in front of another: observe, delay or fail calls, or change what a commit or an
//! abort does, without writing out every role method again.

use super::{
    AcceptOutcome, Commit, FencedWriter, HistoryReader, NewTurn, PageBudget, SessionLock,
    SteerTake, Store, StoreResult, TurnIntake,
};
use crate::ids::{RunId, SessionId, SessionKey, TenantId};
use crate::queue::AcceptedRecord;
use crate::run::{AbortReason, Event, QueueMode, Run};
use crate::session::{Fence, InterruptWatch, LockAttempt, Session};
use crate::transcript::TranscriptEntry;
use async_trait::async_trait;

/// One call of the [`Store`] roles, as [`StoreLayer::before`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreCall {
    /// [`TurnIntake::accept_turn`].
    AcceptTurn,
    /// [`TurnIntake::request_abort`] and [`TurnIntake::request_abort_for`].
    RequestAbort,
    /// [`TurnIntake::reset_session`].
    ResetSession,
    /// [`HistoryReader::get_run`].
    GetRun,
    /// [`HistoryReader::get_session`].
    GetSession,
    /// [`HistoryReader::read_transcript_page`] (each page of a full read too).
    ReadTranscript,
    /// [`HistoryReader::read_events_page`] (each page of a full read too).
    ReadEvents,
    /// [`HistoryReader::abort_requested`].
    AbortRequested,
    /// [`HistoryReader::next_event_seq`].
    NextEventSeq,
    /// [`SessionLock::acquire_lock`].
    AcquireLock,
    /// [`SessionLock::renew_lock`].
    RenewLock,
    /// [`SessionLock::release_lock`].
    ReleaseLock,
    /// [`FencedWriter::commit`].
    Commit,
    /// [`FencedWriter::take_steers`] and [`FencedWriter::steers_waiting`].
    TakeSteers,
    /// [`TurnIntake::set_queue_mode`].
    SetQueueMode,
    /// [`TurnIntake::answer_action`].
    AnswerAction,
}

/// What a layer adds to the store it wraps ([`StoreLayer::inner`]). Every call passes
/// [`before`](StoreLayer::before) and then goes to the inner store, except `commit`,
/// `request_abort` and `reset_session`, which go through the layer's own methods (by default:
/// the inner store's).
/// [`Layered`] makes a layer a [`Store`].
#[async_trait]
pub trait StoreLayer: Send + Sync + 'static {
    /// The store behind this layer.
    fn inner(&self) -> &dyn Store;

    /// Runs before each call; an error answers the call and the inner store is not asked.
    async fn before(&self, _call: StoreCall) -> StoreResult<()> {
        Ok(())
    }

    /// The budget a page read (`ReadTranscript`, `ReadEvents`) goes to the inner store with,
    /// after `before`: a layer may narrow it, or note it; by default the caller's.
    fn page_budget(&self, _call: StoreCall, budget: PageBudget) -> PageBudget {
        budget
    }

    /// A turn's accept (after `before`).
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.inner().accept_turn(turn).await
    }

    /// A fenced commit (after `before`).
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.inner().commit(fence, commit).await
    }

    /// The write that carries a held start (after `before`; see
    /// [`FencedWriter::commit_watching`]): by default the layer's own [`commit`](Self::commit),
    /// the interrupt mark left to the caller (`None`).
    async fn commit_watching(
        &self,
        fence: &Fence,
        commit: Commit,
        _watch: &InterruptWatch,
    ) -> StoreResult<Option<bool>> {
        self.commit(fence, commit).await.map(|()| None)
    }

    /// An abort request (after `before`).
    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.inner().request_abort(tenant, run_id).await
    }

    /// An abort request with a reason (after `before`).
    async fn request_abort_for(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>> {
        self.inner().request_abort_for(tenant, run_id, reason).await
    }

    /// A session reset (after `before`).
    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        self.inner()
            .reset_session(tenant, key, new_session_id, now)
            .await
    }
}

/// A [`StoreLayer`] as a [`Store`].
pub struct Layered<L>(pub L);

#[async_trait]
impl<L: StoreLayer> TurnIntake for Layered<L> {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.0.before(StoreCall::AcceptTurn).await?;
        StoreLayer::accept_turn(&self.0, turn).await
    }

    fn queues_accepted_turns(&self) -> bool {
        self.0.inner().queues_accepted_turns()
    }

    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.0.before(StoreCall::RequestAbort).await?;
        StoreLayer::request_abort(&self.0, tenant, run_id).await
    }

    async fn request_abort_for(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>> {
        self.0.before(StoreCall::RequestAbort).await?;
        StoreLayer::request_abort_for(&self.0, tenant, run_id, reason).await
    }

    async fn answer_action(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        answer: crate::action::RecordedAnswer,
    ) -> StoreResult<super::AnswerOutcome> {
        self.0.before(StoreCall::AnswerAction).await?;
        self.0.inner().answer_action(tenant, run_id, answer).await
    }

    async fn set_queue_mode(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        mode: Option<QueueMode>,
        now: u64,
    ) -> StoreResult<Session> {
        self.0.before(StoreCall::SetQueueMode).await?;
        self.0.inner().set_queue_mode(tenant, key, mode, now).await
    }

    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        self.0.before(StoreCall::ResetSession).await?;
        StoreLayer::reset_session(&self.0, tenant, key, new_session_id, now).await
    }
}

#[async_trait]
impl<L: StoreLayer> HistoryReader for Layered<L> {
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.0.before(StoreCall::GetRun).await?;
        self.0.inner().get_run(tenant, run_id).await
    }

    async fn run_progress(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<Option<super::RunProgress>> {
        self.0.before(StoreCall::GetRun).await?;
        self.0.inner().run_progress(tenant, run_id).await
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        self.0.before(StoreCall::GetSession).await?;
        self.0.inner().get_session(tenant, key).await
    }

    async fn read_transcript_page(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.0.before(StoreCall::ReadTranscript).await?;
        let budget = self.0.page_budget(StoreCall::ReadTranscript, budget);
        self.0
            .inner()
            .read_transcript_page(tenant, session_id, after, budget)
            .await
    }

    async fn read_events_page(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<Event>> {
        self.0.before(StoreCall::ReadEvents).await?;
        let budget = self.0.page_budget(StoreCall::ReadEvents, budget);
        self.0
            .inner()
            .read_events_page(tenant, run_id, after, budget)
            .await
    }

    async fn abort_requested(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<bool> {
        self.0.before(StoreCall::AbortRequested).await?;
        self.0.inner().abort_requested(tenant, run_id).await
    }

    async fn next_event_seq(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<u64> {
        self.0.before(StoreCall::NextEventSeq).await?;
        self.0.inner().next_event_seq(tenant, run_id).await
    }
}

#[async_trait]
impl<L: StoreLayer> SessionLock for Layered<L> {
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        self.0.before(StoreCall::AcquireLock).await?;
        self.0
            .inner()
            .acquire_lock(tenant, key, owner, lease_ms, now)
            .await
    }

    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        self.0.before(StoreCall::RenewLock).await?;
        self.0.inner().renew_lock(fence, lease_ms, now).await
    }

    async fn release_lock(&self, fence: &Fence) -> StoreResult<()> {
        self.0.before(StoreCall::ReleaseLock).await?;
        self.0.inner().release_lock(fence).await
    }
}

#[async_trait]
impl<L: StoreLayer> FencedWriter for Layered<L> {
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.0.before(StoreCall::Commit).await?;
        StoreLayer::commit(&self.0, fence, commit).await
    }

    async fn commit_watching(
        &self,
        fence: &Fence,
        commit: Commit,
        watch: &InterruptWatch,
    ) -> StoreResult<Option<bool>> {
        self.0.before(StoreCall::Commit).await?;
        StoreLayer::commit_watching(&self.0, fence, commit, watch).await
    }

    async fn take_steers(&self, fence: &Fence, take: SteerTake) -> StoreResult<Vec<Run>> {
        self.0.before(StoreCall::TakeSteers).await?;
        self.0.inner().take_steers(fence, take).await
    }

    async fn steers_waiting(&self, fence: &Fence, take: &SteerTake) -> StoreResult<bool> {
        self.0.before(StoreCall::TakeSteers).await?;
        self.0.inner().steers_waiting(fence, take).await
    }

    fn checks_accepted_records(&self) -> bool {
        self.0.inner().checks_accepted_records()
    }

    fn expect_accepted(&self, fence: &Fence, run_id: &RunId, record: &AcceptedRecord) -> bool {
        self.0.inner().expect_accepted(fence, run_id, record)
    }
}
