//! One sweep: the processing sessions (from the [`ProcessingIndex`], never a scan), each
//! classified; past the abort threshold a stalled run is aborted through the normal abort path
//! (its runner stops at its next abort check and releases the lane) and a stuck session is
//! recovered under the session lock: its run ends `aborted` (`stuck`, `abandoned`, every
//! dangling tool call given a result) and the session goes idle — only if the lock is free and
//! the same run and generation are still current, so a sweep racing a live runner changes
//! nothing. Dead-lettered turns are ended `error` (`dead_lettered`) the same way.

use crate::classify::{
    Diagnostic, DiagnosticClass, QUEUED_WITHOUT_RUN, Thresholds, classify, classify_pending,
};
use crate::dead_letters::DeadLetterSource;
use crate::retention::{RetentionReport, RetentionSweep};
use agentlane_agent::recovery::end_abandoned;
use agentlane_core::{
    AbortReason, Clock, Lane, LaneMessage, LaneQueue, LockAttempt, PendingSettle, ProcessingIndex,
    RunError, RunId, RunStatus, Session, SessionKey, SessionStatus, Store, StoreResult, TenantId,
    TurnMessage,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long after an answer a run still paused counts as having lost its resume message.
pub const RESUME_LOST_AFTER_MS: u64 = 60_000;

/// Processing sessions looked at per sweep at most (the least recently progressed first).
pub const SWEEP_LIMIT: usize = 1000;

/// What one sweep saw and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Processing sessions looked at.
    pub swept: u32,
    /// Sessions classified `session.long_running` (progressing, running past the warn threshold).
    pub long_running: u32,
    /// Sessions classified `session.stalled` (a live owner, no progress past the warn threshold).
    pub stalled: u32,
    /// Sessions classified `session.stuck` (no live owner: stale bookkeeping).
    pub stuck: u32,
    /// Stalled runs asked to abort (their runner stops them).
    pub aborted: u32,
    /// Stuck sessions recovered (run ended `stuck`, session idle, lock released).
    pub recovered: u32,
    /// Dead-lettered turns whose run was ended `dead_lettered`.
    pub dead_lettered: u32,
    /// Sessions with pending work past the abort threshold looked at (issue 11).
    pub pending: u32,
    /// Lane messages re-enqueued for an idle session's oldest unfinished run.
    pub redriven: u32,
    /// Runs ended `error` (`lost_message`) after [`MAX_REDRIVES`] re-enqueues without progress.
    pub lost: u32,
    /// Paused runs whose pause expired: answered `Expired` and resumed.
    pub expired: u32,
    /// The retention pass (issue 24): sessions past their tenant's retention deleted, stale
    /// ones kept busy, and whether the pass resumes next sweep. Zero without a retention.
    pub retention: RetentionReport,
}

/// Re-enqueues of an idle session's oldest unfinished run without progress before the sweep
/// ends it `error` (`lost_message`), so the session's later turns can run.
pub const MAX_REDRIVES: u32 = 3;

/// What reconciling one dead letter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reconciled {
    /// The run was ended `dead_lettered` now.
    Ended,
    /// Nothing to do: the run ended already (or is unknown). The dead letter can go.
    Settled,
    /// The session's lock is live or its state moved on: try again on a later sweep.
    Busy,
}

/// When a session's diagnostic was last logged, to back repeated ones off exponentially.
#[derive(Debug, Clone, Copy)]
struct Logged {
    class: DiagnosticClass,
    next_at: u64,
    times: u32,
}

/// The sweep and its state (log back-off). Cheap to share behind an `Arc`.
pub struct Supervisor {
    store: Arc<dyn Store>,
    index: Arc<dyn ProcessingIndex>,
    clock: Arc<dyn Clock>,
    thresholds: Thresholds,
    /// The lease the supervisor takes a stuck session's lock with while it recovers it.
    lease: Duration,
    logged: Mutex<HashMap<(TenantId, SessionKey), Logged>>,
    dead_letters: Option<Arc<dyn DeadLetterSource>>,
    /// The lane queue lost messages are re-enqueued on (none: nothing is re-enqueued, but the
    /// redrives are counted, so the run still ends `lost_message` after as many thresholds).
    queue: Option<Arc<dyn LaneQueue>>,
    /// Deletes sessions past their tenant's retention at the end of every sweep.
    retention: Option<RetentionSweep>,
}

impl Supervisor {
    /// A supervisor over `store` (`index` is usually the same backend).
    pub fn new(
        store: Arc<dyn Store>,
        index: Arc<dyn ProcessingIndex>,
        clock: Arc<dyn Clock>,
        thresholds: Thresholds,
    ) -> Self {
        Self {
            store,
            index,
            clock,
            thresholds,
            lease: Duration::from_secs(30),
            logged: Mutex::new(HashMap::new()),
            dead_letters: None,
            queue: None,
            retention: None,
        }
    }

    /// Also deletes the sessions past their tenant's retention on every sweep (issue 24).
    pub fn with_retention(mut self, retention: RetentionSweep) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Re-enqueues the lane message of an idle session's oldest unfinished run on `queue` when
    /// it has waited past the abort threshold (issue 11).
    pub fn with_queue(mut self, queue: Arc<dyn LaneQueue>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Also reconciles the dead letters of `source` on every sweep.
    pub fn with_dead_letters(mut self, source: Arc<dyn DeadLetterSource>) -> Self {
        self.dead_letters = Some(source);
        self
    }

    /// The thresholds it classifies with.
    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// The diagnostic of one session now (for `GET /v1/sessions/{key}`): reads its active run.
    pub async fn diagnose(&self, session: &Session) -> StoreResult<Option<Diagnostic>> {
        if session.status != SessionStatus::Processing {
            return Ok(classify_pending(
                session,
                self.clock.now_ms(),
                &self.thresholds,
            ));
        }
        let run = match &session.active_run_id {
            Some(id) => self.store.get_run(&session.tenant, id).await?,
            None => None,
        };
        Ok(classify(
            session,
            run.as_ref(),
            self.clock.now_ms(),
            &self.thresholds,
        ))
    }

    /// One sweep of the processing sessions.
    pub async fn sweep(&self) -> StoreResult<SweepReport> {
        let now = self.clock.now_ms();
        let abort_ms = self.thresholds.abort.as_millis() as u64;
        let mut report = SweepReport {
            dead_lettered: self.reconcile_dead_letters().await?,
            ..SweepReport::default()
        };
        for session in self.index.processing_sessions(now, SWEEP_LIMIT).await? {
            report.swept += 1;
            let run = match &session.active_run_id {
                Some(id) => self.store.get_run(&session.tenant, id).await?,
                None => None,
            };
            if let Some(paused) = run
                .as_ref()
                .filter(|r| r.status == RunStatus::RequiresAction)
            {
                if self.expire(paused, now).await? {
                    report.expired += 1;
                }
                continue;
            }
            let Some(diagnostic) = classify(&session, run.as_ref(), now, &self.thresholds) else {
                self.forget(&session);
                continue;
            };
            self.log(&session, &diagnostic, now);
            match diagnostic.class {
                DiagnosticClass::LongRunning => report.long_running += 1,
                DiagnosticClass::Stalled => report.stalled += 1,
                DiagnosticClass::Stuck => report.stuck += 1,
            }
            if diagnostic.age_ms < abort_ms {
                continue;
            }
            match (diagnostic.class, run) {
                (DiagnosticClass::Stalled, Some(run))
                    if !run.status.is_terminal() && !run.abort_requested =>
                {
                    tracing::warn!(
                        tenant = %session.tenant, session = %session.session_key.fingerprint(), run = %run.run_id,
                        age_ms = diagnostic.age_ms, "aborting a stalled run"
                    );
                    self.store
                        .request_abort_for(&run.tenant, &run.run_id, AbortReason::Stuck)
                        .await?;
                    report.aborted += 1;
                }
                (DiagnosticClass::Stuck, Some(run)) if !run.status.is_terminal() => {
                    let error = RunError::new(
                        "stuck",
                        format!(
                            "the session was stuck ({}); the supervisor ended the run",
                            diagnostic.reason
                        ),
                    );
                    if self
                        .recover(&session, &run.run_id, RunStatus::Aborted, error)
                        .await?
                    {
                        report.recovered += 1;
                    }
                }
                _ => {}
            }
        }
        self.sweep_pending(now, &mut report).await?;
        if let Some(retention) = &self.retention {
            // Last, and on its own: a failed retention pass leaves the report of the rest.
            match retention.sweep(now).await {
                Ok(done) => report.retention = done,
                Err(e) => {
                    tracing::warn!(error = %e, "retention pass failed; the next sweep retries")
                }
            }
        }
        agentlane_core::metrics::gauge(
            agentlane_core::metrics::STUCK_SESSIONS,
            &[],
            f64::from(report.stuck),
        );
        Ok(report)
    }

    /// A paused run aborted, or answered a while ago, gets its lane message again (the one sent
    /// was lost). A paused run past its `expiresAt` and still unanswered: its pending calls are answered
    /// `Expired` (recorded like any answer, so a late client answer then gets `409`) and its
    /// lane message sent, so the run goes on. `true` when this sweep expired it.
    async fn expire(&self, run: &agentlane_core::Run, now: u64) -> StoreResult<bool> {
        let Some(action) = &run.required_action else {
            return Ok(false);
        };
        if run.abort_requested {
            // Aborted while paused and still paused: the wake the abort sent was lost (a
            // duplicate is harmless: the run ends once).
            self.send_resume(run, action.id).await;
            return Ok(false);
        }
        if let Some(answer) = run
            .action_answer
            .as_ref()
            .filter(|a| a.action_id == action.id)
        {
            // Answered, and still paused a while later: the resume message was lost.
            if now.saturating_sub(answer.answered_at) >= RESUME_LOST_AFTER_MS {
                self.send_resume(run, action.id).await;
            }
            return Ok(false);
        }
        if now < action.expires_at {
            return Ok(false);
        }
        let answer = agentlane_core::RecordedAnswer {
            action_id: action.id,
            answer: agentlane_core::ActionAnswer::default(),
            answered_at: now,
            expired: true,
        };
        let recorded = matches!(
            self.store
                .answer_action(&run.tenant, &run.run_id, answer)
                .await?,
            agentlane_core::AnswerOutcome::Recorded(_)
        );
        if !recorded {
            return Ok(false);
        }
        tracing::info!(tenant = %run.tenant, run = %run.run_id, "a pause expired; the run resumes");
        self.send_resume(run, action.id).await;
        Ok(true)
    }

    /// Sends the lane message that resumes a paused run (a failure is logged: the next sweep
    /// sends it again).
    async fn send_resume(&self, run: &agentlane_core::Run, action_id: u32) {
        if let Some(queue) = &self.queue {
            let message = LaneMessage::for_run(run, format!("{}:resume:{action_id}", run.run_id));
            if let Err(e) = queue.enqueue(&message).await {
                tracing::warn!(error = %e, run = %run.run_id, "could not send the resume of a paused run");
            }
        }
    }

    /// The sessions whose pending work is older than the abort threshold (an index query):
    /// cleared when every accepted run finished, left alone while busy, deferred while recently accepted, else
    /// (idle, no lock holder, the oldest unfinished run old) its lane message re-enqueued, and
    /// after [`MAX_REDRIVES`] of those without progress the run ended `error`/`lost_message`.
    async fn sweep_pending(&self, now: u64, report: &mut SweepReport) -> StoreResult<()> {
        let abort_ms = self.thresholds.abort.as_millis() as u64;
        let before = now.saturating_sub(abort_ms);
        for session in self.index.pending_sessions(before, SWEEP_LIMIT).await? {
            report.pending += 1;
            let settle = self.settle_one(&session, now, abort_ms, report).await?;
            if let Some(settle) = settle {
                self.index.settle_pending(&session, settle).await?;
            }
        }
        Ok(())
    }

    /// What to do with one pending session; `None`: leave it as it is (busy, or a recovery
    /// changed it).
    async fn settle_one(
        &self,
        session: &Session,
        now: u64,
        abort_ms: u64,
        report: &mut SweepReport,
    ) -> StoreResult<Option<PendingSettle>> {
        if session.runs_finished >= session.runs_accepted {
            return Ok(Some(PendingSettle::Clear));
        }
        // A live runner (or a processing session, which the processing sweep looks after):
        // nothing written, so a sweep never races a live runner's commit.
        if session.lock_is_live(now) || session.status == SessionStatus::Processing {
            return Ok(None);
        }
        let Some((_, run_id)) = session.oldest_open_run() else {
            // Accepted before this bookkeeping existed: nothing to re-enqueue.
            return Ok(Some(PendingSettle::Defer { since: now }));
        };
        let Some(run) = self.store.get_run(&session.tenant, run_id).await? else {
            return Ok(Some(PendingSettle::Defer { since: now }));
        };
        if run.status.is_terminal() || run.session_seq != session.runs_finished {
            // Finished meanwhile (its commit counts it), or not the head of the lane.
            return Ok(Some(PendingSettle::Defer { since: now }));
        }
        let waited_since = run.accepted_at.max(session.last_progress_at.unwrap_or(0));
        if now.saturating_sub(waited_since) < abort_ms {
            return Ok(Some(PendingSettle::Defer {
                since: waited_since,
            }));
        }
        let diagnostic = Diagnostic {
            class: DiagnosticClass::Stuck,
            reason: QUEUED_WITHOUT_RUN.into(),
            age_ms: now.saturating_sub(waited_since),
        };
        self.log(session, &diagnostic, now);
        report.stuck += 1;
        if session.redrives >= MAX_REDRIVES {
            let error = RunError::new(
                "lost_message",
                format!(
                    "the turn's lane message was lost; {} re-enqueues did not start it",
                    session.redrives
                ),
            );
            if self
                .recover(session, &run.run_id, RunStatus::Error, error)
                .await?
            {
                report.lost += 1;
                return Ok(None);
            }
            return Ok(Some(PendingSettle::Defer { since: now }));
        }
        if let Some(queue) = &self.queue {
            let message = LaneMessage {
                lane: Lane::for_session(&run.tenant, &run.session_key),
                // A new dedup id: the lost message's id may still be remembered by the queue
                // (SQS FIFO: 5 minutes). A duplicate delivery runs nothing twice: the runner
                // checks the order and the run's terminal state.
                dedup_id: format!("{}:redrive:{}", run.run_id, session.redrives + 1),
                body: TurnMessage {
                    tenant: run.tenant.clone(),
                    run_id: run.run_id.clone(),
                    session_key: Some(run.session_key.clone()),
                    accepted: None,
                },
            };
            if let Err(e) = queue.enqueue(&message).await {
                tracing::warn!(error = %e, run = %run.run_id, "could not re-enqueue a lost lane message");
                return Ok(None);
            }
            tracing::warn!(
                tenant = %session.tenant, session = %session.session_key.fingerprint(), run = %run.run_id,
                redrive = session.redrives + 1, "re-enqueued the lane message of a queued run without an active run"
            );
            report.redriven += 1;
        }
        Ok(Some(PendingSettle::Redrive { since: now }))
    }

    /// Every dead letter of the source: its run ended `dead_lettered` (when still unfinished),
    /// then the dead letter forgotten. Returns how many runs were ended.
    async fn reconcile_dead_letters(&self) -> StoreResult<u32> {
        let Some(source) = &self.dead_letters else {
            return Ok(0);
        };
        let letters = match source.dead_turns(SWEEP_LIMIT).await {
            Ok(letters) => letters,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the dead letters");
                return Ok(0);
            }
        };
        let mut ended = 0;
        for letter in letters {
            if let Some(turn) = &letter.turn {
                match self.reconcile(&turn.tenant, &turn.run_id).await {
                    Ok(Reconciled::Ended) => ended += 1,
                    Ok(Reconciled::Settled) => {}
                    Ok(Reconciled::Busy) => {
                        // Kept: it comes back to a later sweep.
                        tracing::info!(run = %turn.run_id, "a dead-lettered run's session is busy");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, run = %turn.run_id, "could not reconcile a dead letter");
                        continue;
                    }
                }
            } else {
                tracing::error!(id = %letter.id, "forgetting an unreadable dead letter");
            }
            // Counted before it is deleted: the queue's own metric may never see a letter
            // that came and went between two samples.
            agentlane_core::metrics::incr(agentlane_core::metrics::DEAD_LETTERED, &[]);
            if let Err(e) = source.forget(&letter.id).await {
                tracing::warn!(error = %e, id = %letter.id, "could not forget a dead letter");
            }
        }
        Ok(ended)
    }

    /// Ends the dead-lettered turn `run_id` `error` (`dead_lettered`) and releases its session
    /// when the run is still unfinished; `true` when it did.
    pub async fn reconcile_dead_letter(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<bool> {
        Ok(self.reconcile(tenant, run_id).await? == Reconciled::Ended)
    }

    async fn reconcile(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Reconciled> {
        let Some(run) = self.store.get_run(tenant, run_id).await? else {
            return Ok(Reconciled::Settled);
        };
        if run.status.is_terminal() {
            return Ok(Reconciled::Settled);
        }
        let Some(session) = self.store.get_session(tenant, &run.session_key).await? else {
            return Ok(Reconciled::Settled);
        };
        let error = RunError::new(
            "dead_lettered",
            "the turn's message reached the dead-letter queue; it will not be retried",
        );
        Ok(
            match self
                .recover(&session, run_id, RunStatus::Error, error)
                .await?
            {
                true => Reconciled::Ended,
                false => Reconciled::Busy,
            },
        )
    }

    /// Under the session's lock (one try: a live holder means a live runner, and nothing is
    /// changed), and only if `seen`'s generation is still current and the run unfinished: ends
    /// the run with `error`, pairs its dangling tool calls, makes the session idle and releases
    /// the lock, in one fenced commit.
    async fn recover(
        &self,
        seen: &Session,
        run_id: &RunId,
        status: RunStatus,
        error: RunError,
    ) -> StoreResult<bool> {
        let owner = format!("supervisor:{}", uuid::Uuid::new_v4().simple());
        let now = self.clock.now_ms();
        let lease = self.lease.as_millis() as u64;
        let fence = match self
            .store
            .acquire_lock(&seen.tenant, &seen.session_key, &owner, lease, now)
            .await?
        {
            LockAttempt::Acquired(fence, _) => fence,
            LockAttempt::Held { .. } => return Ok(false),
        };
        let current = self
            .store
            .get_session(&seen.tenant, &seen.session_key)
            .await?;
        let run = self.store.get_run(&seen.tenant, run_id).await?;
        let still = match (&current, &run) {
            (Some(s), Some(r)) => {
                s.generation == seen.generation
                    && s.session_id == seen.session_id
                    && (s.active_run_id.is_none() || s.active_run_id.as_ref() == Some(run_id))
                    && !r.status.is_terminal()
            }
            _ => false,
        };
        let (Some(session), Some(run), true) = (current, run, still) else {
            self.store.release_lock(&fence).await.ok();
            return Ok(false);
        };
        let ended = match end_abandoned(
            self.store.clone(),
            self.clock.clone(),
            fence.clone(),
            run,
            status,
            error,
        )
        .await
        {
            Ok(ended) => ended,
            Err(e) => {
                self.store.release_lock(&fence).await.ok();
                return Err(e);
            }
        };
        tracing::warn!(
            tenant = %session.tenant, session = %session.session_key.fingerprint(), run = %run_id,
            code = ended.error.as_ref().map(|e| e.code.as_str()),
            "recovered a session: its run ended and its lane released"
        );
        Ok(true)
    }

    /// Logs a diagnostic, backing repeated ones of the same class off exponentially (warn
    /// threshold, then twice that, four times, ... up to an hour).
    fn log(&self, session: &Session, d: &Diagnostic, now: u64) {
        let key = (session.tenant.clone(), session.session_key.clone());
        let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = logged.get(&key).copied();
        let due = match entry {
            Some(l) if l.class == d.class => now >= l.next_at,
            _ => true,
        };
        if !due {
            return;
        }
        let times = match entry {
            Some(l) if l.class == d.class => l.times + 1,
            _ => 1,
        };
        let base = self.thresholds.warn.as_millis() as u64;
        let backoff = base
            .saturating_mul(1u64 << times.saturating_sub(1).min(16))
            .min(3_600_000);
        logged.insert(
            key,
            Logged {
                class: d.class,
                next_at: now.saturating_add(backoff),
                times,
            },
        );
        tracing::warn!(
            tenant = %session.tenant, session = %session.session_key.fingerprint(),
            class = d.class.as_str(), reason = %d.reason, age_ms = d.age_ms, repeat = times,
            "session diagnostic"
        );
    }

    fn forget(&self, session: &Session) {
        let key = (session.tenant.clone(), session.session_key.clone());
        self.logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }
}
