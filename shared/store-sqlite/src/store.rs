//! The `Store` roles for `SqliteBackend`: each write is one transaction on the writer connection,
//! each read one statement on a reader connection.

use crate::backend::SqliteBackend;
use crate::records::{load_run, load_session};
use crate::{ingress, lock};
use agentlane_core::{
    AbortReason, AcceptOutcome, AcceptedRecord, Commit, Event, Fence, FencedWriter, HistoryReader,
    InterruptWatch, LockAttempt, MAX_ACCEPTED_RECORD_BYTES, NewTurn, PageBudget, QueueMode, Run,
    RunId, Session, SessionId, SessionKey, SessionLock, SteerTake, StoreResult, TenantId,
    TranscriptEntry, TurnIntake,
};
use async_trait::async_trait;
use std::sync::atomic::Ordering;

#[async_trait]
impl TurnIntake for SqliteBackend {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        let queue_at = self
            .queues_accepted_turns()
            .then(|| self.inner.clock.now_ms());
        let accepted = self.inner.accepted.clone();
        let outcome = self
            .with_conn::<_, agentlane_core::StoreError>(move |c| {
                let (outcome, stored_json) = ingress::accept_turn(c, turn, queue_at)?;
                if queue_at.is_some() && outcome.created {
                    // Its first pickup here takes the run as accepted (see `crate::accepted`):
                    // the JSON the accept stored, when small enough to keep; remembered in
                    // this write, before any receive can deliver the message it queued.
                    if let Some(json) = stored_json.filter(|j| j.len() <= MAX_ACCEPTED_RECORD_BYTES)
                    {
                        let run = &outcome.run;
                        accepted.remember(&run.tenant, &run.run_id, AcceptedRecord(json));
                    }
                }
                Ok(outcome)
            })
            .await?;
        if queue_at.is_some() && outcome.created {
            // The message is durable now: one receiver may take it (woken, it looks).
            self.inner.wakeup.notify_one();
        }
        Ok(outcome)
    }

    fn queues_accepted_turns(&self) -> bool {
        self.inner.queue_on_accept.load(Ordering::Relaxed)
    }

    async fn request_abort_for(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>> {
        let (tenant, run_id) = (tenant.clone(), run_id.clone());
        self.with_conn(move |c| ingress::request_abort(c, &tenant, &run_id, reason))
            .await
    }

    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_conn(move |c| ingress::reset_session(c, &tenant, &key, new_session_id, now))
            .await
    }

    async fn answer_action(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        answer: agentlane_core::RecordedAnswer,
    ) -> StoreResult<agentlane_core::AnswerOutcome> {
        let (tenant, run_id) = (tenant.clone(), run_id.clone());
        self.with_conn(move |c| ingress::answer_action(c, &tenant, &run_id, &answer))
            .await
    }

    async fn set_queue_mode(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        mode: Option<QueueMode>,
        now: u64,
    ) -> StoreResult<Session> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_conn(move |c| ingress::set_queue_mode(c, &tenant, &key, mode, now))
            .await
    }
}

#[async_trait]
impl HistoryReader for SqliteBackend {
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        let (tenant, run_id) = (tenant.clone(), run_id.clone());
        self.with_reader(move |c| load_run(c, &tenant, &run_id))
            .await
    }

    async fn run_progress(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<Option<agentlane_core::RunProgress>> {
        let progress = self
            .with_reader::<_, agentlane_core::StoreError>(|c| {
                crate::records::load_run_progress(c, tenant, run_id)
            })
            .await?;
        match progress {
            Some(None) => Ok(self
                .get_run(tenant, run_id)
                .await?
                .as_ref()
                .map(agentlane_core::RunProgress::of)),
            other => Ok(other.flatten()),
        }
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_reader(move |c| load_session(c, &tenant, &key))
            .await
    }

    async fn read_transcript_page(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let (tenant, session_id) = (tenant.clone(), session_id.clone());
        self.with_reader(move |c| ingress::read_transcript(c, &tenant, &session_id, after, budget))
            .await
    }

    async fn read_events_page(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<Event>> {
        let (tenant, run_id) = (tenant.clone(), run_id.clone());
        self.with_reader(move |c| ingress::read_events(c, &tenant, &run_id, after, budget))
            .await
    }

    /// `MAX(seq)` over the run's events: one index lookup.
    async fn next_event_seq(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<u64> {
        let (tenant, run_id) = (tenant.clone(), run_id.clone());
        self.with_reader(move |c| ingress::next_event_seq(c, &tenant, &run_id))
            .await
    }
}

#[async_trait]
impl SessionLock for SqliteBackend {
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        let (tenant, key, owner) = (tenant.clone(), key.clone(), owner.to_owned());
        self.with_conn(move |c| lock::acquire(c, &tenant, &key, &owner, lease_ms, now))
            .await
    }

    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        let fence = fence.clone();
        self.with_conn(move |c| lock::renew(c, &fence, lease_ms, now))
            .await
    }

    async fn release_lock(&self, fence: &Fence) -> StoreResult<()> {
        self.inner.accepted.forget_fence(fence);
        let fence = fence.clone();
        self.with_conn(move |c| lock::release(c, &fence)).await
    }
}

#[async_trait]
impl FencedWriter for SqliteBackend {
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.fenced_commit(fence, commit, None).await.map(|_| ())
    }

    /// The interrupt mark is looked at in the commit's own transaction.
    async fn commit_watching(
        &self,
        fence: &Fence,
        commit: Commit,
        watch: &InterruptWatch,
    ) -> StoreResult<Option<bool>> {
        self.fenced_commit(fence, commit, Some(watch.clone()))
            .await
            .map(Some)
    }

    async fn take_steers(&self, fence: &Fence, take: SteerTake) -> StoreResult<Vec<Run>> {
        let fence = fence.clone();
        self.with_conn(move |c| crate::steer::take(c, &fence, take))
            .await
    }

    async fn steers_waiting(&self, fence: &Fence, take: &SteerTake) -> StoreResult<bool> {
        let (fence, take) = (fence.clone(), take.clone());
        self.with_reader(move |c| crate::steer::waiting(c, &fence, &take))
            .await
    }

    /// Checked by the run's next commit under `fence` (see [`crate::accepted`]). The API never
    /// puts a record in a lane message for this store ([`Self::checks_accepted_records`] stays
    /// `false`): the queue attaches the ones this process accepted.
    fn expect_accepted(&self, fence: &Fence, run_id: &RunId, record: &AcceptedRecord) -> bool {
        self.inner.accepted.expect(fence, run_id, record)
    }
}

impl SqliteBackend {
    /// A fenced commit ([`lock::commit`]); with `watch`, it also asks for the run's abort when
    /// an interrupt was accepted while its start was held (answers whether it did).
    async fn fenced_commit(
        &self,
        fence: &Fence,
        commit: Commit,
        watch: Option<InterruptWatch>,
    ) -> StoreResult<bool> {
        // The size rule and the records' encoding run here, not on the writer thread, which
        // every write of the process goes through; a commit they refuse leaves the accepted
        // record for the next one.
        let commit = commit.check(fence)?;
        let accepted = commit
            .run()
            .and_then(|run| self.inner.accepted.take_expected(fence, &run.run_id));
        if commit.release_lock() {
            self.inner.accepted.forget_fence(fence);
        }
        let fence = fence.clone();
        self.with_conn(move |c| lock::commit(c, &fence, commit, accepted.as_ref(), watch.as_ref()))
            .await
    }
}
