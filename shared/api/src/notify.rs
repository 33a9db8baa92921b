//! In-process wake-ups: a commit wakes the run's waiters and SSE streams at once.
//!
//! [`NotifyingStore`] wraps any [`Store`]; after each successful `commit` (and
//! `request_abort`) it signals the run on its [`Notifier`]. Handlers subscribe to a run
//! *before* reading it, so a commit that lands between the read and the sleep still wakes them.
//!
//! The notifier also knows which runs are **live here**: a run this process committed as
//! running and not yet as ended. Waiting on such a run needs no polling — its next change
//! will come through this process's store. Runs queued, or running in another process (the
//! ingress Lambda never runs turns), are polled with a short backoff, and still woken early
//! by any signal.
//!
//! And which runs were **accepted here** moments ago, into a queue of this process (the
//! embedded store's), with no change that may end a wait signalled since: `agent.wait` on such
//! a run knows it is queued or running and needs no first read of it (its end will be
//! signalled; polls still catch anything that is not). Such a run is marked before its accept
//! is written, so no signal of it can come before the mark.

use agentlane_core::{
    AcceptOutcome, Commit, Fence, InterruptWatch, Layered, NewTurn, Run, RunId, RunStatus, Store,
    StoreError, StoreLayer, StoreResult, TenantId,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

type RunKey = (TenantId, RunId);

/// How long after its accept a run counts as accepted here: `agent.wait` usually follows
/// `agent` at once; a later wait reads the run as before.
const ACCEPTED_HERE_FOR: Duration = Duration::from_secs(1);

/// Runs marked accepted here at most; when full, older marks go first, then new ones are not
/// made (their waits read the run).
const MAX_ACCEPTED_HERE: usize = 4096;

/// Counts of a run's changes since the notifier first tracked it.
#[derive(Debug, Clone, Default)]
struct Change {
    /// Every change (events, progress, the end).
    version: u64,
    /// Changes that may end a wait: the run record committed with a status other than
    /// `running` (an end, a pause, a hand-back), an abort request, the run no longer live here.
    ends: u64,
    /// The run's final record, once a commit of this process wrote it (terminal runs do not
    /// change again): a waiter answers with it instead of reading the run once more.
    ended: Option<Arc<Run>>,
    /// Times the run became, or stopped being, live here: a waiter then chooses its next
    /// pause again (no poll for a run this process's runner picked up).
    moves: u64,
}

/// Whether a change with `status` (the run record's, when the commit carried one; `None` for
/// a commit without it) may answer a wait on the run: only a commit that leaves the run
/// `running`, or does not touch its record, cannot.
fn may_end_a_wait(status: Option<RunStatus>, from_commit: bool) -> bool {
    match status {
        Some(RunStatus::Running) => false,
        Some(_) => true,
        None => !from_commit,
    }
}

struct RunSignal {
    /// Bumped at every change of the run; subscribers wait for the next bump.
    changes: watch::Sender<Change>,
    /// A runner of this process holds the run (committed `running`, not yet ended).
    live_here: bool,
}

/// Per-run change signals within one process. Cheap to clone; clones share the signals.
#[derive(Clone, Default)]
pub struct Notifier {
    runs: Arc<Mutex<HashMap<RunKey, RunSignal>>>,
    /// Runs accepted here into this process's queue, when, with no change that may end a wait
    /// signalled since (see the module docs).
    accepted: Arc<Mutex<HashMap<RunKey, Instant>>>,
    /// A [`NotifyingStore`] signals this notifier: this process's runner commits through it.
    connected: Arc<AtomicBool>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("runs", &self.lock().len())
            .finish()
    }
}

/// A handler's interest in one run. Dropping it forgets the run when nothing else needs it.
pub struct Subscription {
    notifier: Notifier,
    key: RunKey,
    changes: Option<watch::Receiver<Change>>,
    /// The `ends` count last seen by [`Subscription::may_have_ended`].
    ends_seen: u64,
    /// The `moves` count last seen by [`Subscription::may_have_ended`].
    moves_seen: u64,
}

impl Notifier {
    /// A notifier no store signals yet: wrap the store with [`NotifyingStore`] to connect it.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunKey, RunSignal>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts listening for changes of `run_id`. Subscribe before reading the run.
    pub fn subscribe(&self, tenant: &TenantId, run_id: &RunId) -> Subscription {
        let key = (tenant.clone(), run_id.clone());
        let changes = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| RunSignal {
                changes: watch::channel(Change::default()).0,
                live_here: false,
            })
            .changes
            .subscribe();
        let (ends_seen, moves_seen) = {
            let seen = changes.borrow();
            (seen.ends, seen.moves)
        };
        Subscription {
            notifier: self.clone(),
            key,
            changes: Some(changes),
            ends_seen,
            moves_seen,
        }
    }

    /// Whether a [`NotifyingStore`] signals this notifier. Then a queued run's pickup by this
    /// process's runner is signalled too, and polls can be rare.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Whether a runner of this process holds the run: its next change will be signalled.
    pub fn is_live_here(&self, tenant: &TenantId, run_id: &RunId) -> bool {
        self.lock()
            .get(&(tenant.clone(), run_id.clone()))
            .is_some_and(|signal| signal.live_here)
    }

    /// Marks the run as accepted here, before its accept is written (so every later signal of
    /// it comes after the mark); [`Self::not_accepted`] takes the mark back if the accept
    /// created nothing.
    pub fn accepting(&self, tenant: &TenantId, run_id: &RunId) {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        if accepted.len() >= MAX_ACCEPTED_HERE {
            let now = Instant::now();
            accepted.retain(|_, at| now.duration_since(*at) < ACCEPTED_HERE_FOR);
        }
        if accepted.len() < MAX_ACCEPTED_HERE {
            accepted.insert((tenant.clone(), run_id.clone()), Instant::now());
        }
    }

    /// Takes back [`Self::accepting`]'s mark.
    pub fn not_accepted(&self, tenant: &TenantId, run_id: &RunId) {
        self.forget_accepted(&(tenant.clone(), run_id.clone()));
    }

    fn forget_accepted(&self, key: &RunKey) {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        if !accepted.is_empty() {
            accepted.remove(key);
        }
    }

    /// Whether this process accepted the run into its own queue within the last
    /// [`ACCEPTED_HERE_FOR`] and nothing that may end a wait on it was signalled since: it is
    /// queued or running, and its end will be signalled here. Ask after subscribing.
    pub fn accepted_here(&self, tenant: &TenantId, run_id: &RunId) -> bool {
        self.accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(tenant.clone(), run_id.clone()))
            .is_some_and(|at| at.elapsed() < ACCEPTED_HERE_FOR)
    }

    /// Tells the run's subscribers it changed; `status` (when the change carries the run
    /// record) keeps track of whether the run is live here.
    pub fn signal(&self, tenant: &TenantId, run_id: &RunId, status: Option<RunStatus>) {
        self.signal_change(tenant, run_id, status, false, None);
    }

    /// [`Notifier::signal`] for a successful commit, whose `status` is `None` when it did not
    /// carry the run record.
    pub fn signal_commit(&self, tenant: &TenantId, run_id: &RunId, status: Option<RunStatus>) {
        self.signal_change(tenant, run_id, status, true, None);
    }

    /// [`Notifier::signal_commit`] for a commit that wrote `run`'s terminal record: its
    /// waiters may answer with it without reading the run again.
    pub fn signal_final_commit(&self, run: Arc<Run>) {
        let (tenant, run_id) = (run.tenant.clone(), run.run_id.clone());
        self.signal_change(&tenant, &run_id, Some(run.status), true, Some(run));
    }

    fn signal_change(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        status: Option<RunStatus>,
        from_commit: bool,
        ended: Option<Arc<Run>>,
    ) {
        let key = (tenant.clone(), run_id.clone());
        let ends = may_end_a_wait(status, from_commit);
        if ends {
            self.forget_accepted(&key);
        }
        let mut runs = self.lock();
        if status == Some(RunStatus::Running) && !runs.contains_key(&key) {
            runs.insert(
                key.clone(),
                RunSignal {
                    changes: watch::channel(Change::default()).0,
                    live_here: true,
                },
            );
        }
        let Some(signal) = runs.get_mut(&key) else {
            return;
        };
        let was_live = signal.live_here;
        match status {
            Some(RunStatus::Running) => signal.live_here = true,
            Some(s) if s.is_terminal() => signal.live_here = false,
            _ => {}
        }
        let moved = was_live != signal.live_here;
        signal.changes.send_modify(|c| {
            c.version += 1;
            c.ends += u64::from(ends);
            c.moves += u64::from(moved);
            if ended.is_some() {
                c.ended = ended;
            }
        });
        if !signal.live_here && signal.changes.receiver_count() == 0 {
            runs.remove(&key);
        }
    }

    /// The run is no longer held by this process (its writer lost the session lock): waiters
    /// poll it again.
    pub fn not_live_here(&self, tenant: &TenantId, run_id: &RunId) {
        let key = (tenant.clone(), run_id.clone());
        self.forget_accepted(&key);
        let mut runs = self.lock();
        if let Some(signal) = runs.get_mut(&key) {
            let moved = signal.live_here;
            signal.live_here = false;
            signal.changes.send_modify(|c| {
                c.version += 1;
                c.ends += 1;
                c.moves += u64::from(moved);
            });
            if signal.changes.receiver_count() == 0 {
                runs.remove(&key);
            }
        }
    }

    /// How many runs are tracked (subscribed to or live here).
    pub fn tracked_runs(&self) -> usize {
        self.lock().len()
    }

    fn release(&self, key: &RunKey) {
        let mut runs = self.lock();
        if let Some(signal) = runs.get(key)
            && !signal.live_here
            && signal.changes.receiver_count() == 0
        {
            runs.remove(key);
        }
    }
}

impl Subscription {
    /// Resolves at the run's next change after the last one seen (at once if one happened
    /// since). Pending forever if the notifier is gone.
    pub async fn changed(&mut self) {
        let Some(changes) = self.changes.as_mut() else {
            return std::future::pending().await;
        };
        if changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The run's terminal record, when a commit of this process wrote it since the
    /// subscription (see [`Notifier::signal_final_commit`]).
    pub fn final_run(&self) -> Option<Arc<Run>> {
        self.changes.as_ref()?.borrow().ended.clone()
    }

    /// Resolves at the run's next change that may end a wait (see `Change::ends`) after the
    /// last one this method saw (at once if one happened since the subscription): `true`.
    /// Progress and event commits of a running run do not wake it; the run becoming, or no
    /// longer being, live here does, with `false` (the waiter's next pause changes).
    pub async fn may_have_ended(&mut self) -> bool {
        let Some(changes) = self.changes.as_mut() else {
            return std::future::pending().await;
        };
        let (ends_seen, moves_seen) = (self.ends_seen, self.moves_seen);
        // The borrowed value (not `Send`) is dropped within this statement.
        let seen = changes
            .wait_for(|c| c.ends != ends_seen || c.moves != moves_seen)
            .await
            .map(|c| (c.ends, c.moves));
        match seen {
            Ok((ends, moves)) => {
                self.ends_seen = ends;
                self.moves_seen = moves;
                ends != ends_seen
            }
            Err(_) => std::future::pending::<bool>().await,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Drop the receiver first so the count the notifier sees excludes it.
        self.changes = None;
        self.notifier.release(&self.key);
    }
}

/// A store layer that signals a [`Notifier`] after each successful `commit` and
/// `request_abort`; every other call goes straight through.
pub struct NotifyingStore {
    inner: Arc<dyn Store>,
    notifier: Notifier,
}

impl NotifyingStore {
    /// Wraps `inner`; give the result to the runner and the API alike, and `notifier` to
    /// [`crate::app_with`].
    pub fn new(inner: Arc<dyn Store>, notifier: Notifier) -> Layered<Self> {
        notifier.connected.store(true, Ordering::Relaxed);
        Layered(Self { inner, notifier })
    }
}

#[async_trait]
impl StoreLayer for NotifyingStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    /// A turn accepted into this process's own queue is marked accepted here (see the module
    /// docs) before it is written.
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        if !self.inner.queues_accepted_turns() {
            return self.inner.accept_turn(turn).await;
        }
        let (tenant, run_id) = (turn.tenant.clone(), turn.run_id.clone());
        self.notifier.accepting(&tenant, &run_id);
        let outcome = self.inner.accept_turn(turn).await;
        if !outcome.as_ref().is_ok_and(|o| o.created) {
            self.notifier.not_accepted(&tenant, &run_id);
        }
        outcome
    }

    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        let run = self.inner.request_abort(tenant, run_id).await?;
        if run.is_some() {
            self.notifier.signal(tenant, run_id, None);
        }
        Ok(run)
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.signalled(fence, commit, None).await.map(|_| ())
    }

    async fn commit_watching(
        &self,
        fence: &Fence,
        commit: Commit,
        watch: &InterruptWatch,
    ) -> StoreResult<Option<bool>> {
        self.signalled(fence, commit, Some(watch)).await
    }
}

impl NotifyingStore {
    /// The commit (watching for an interrupt with `watch`), then its signal to the run's
    /// waiters.
    async fn signalled(
        &self,
        fence: &Fence,
        commit: Commit,
        watch: Option<&InterruptWatch>,
    ) -> StoreResult<Option<bool>> {
        let run = commit.events_run_id();
        let status = commit.run.as_ref().map(|run| run.status);
        // The run's final record, kept for its waiters (a terminal run does not change again;
        // `abort_requested` is not part of a commit, and no answer shows it).
        let ended = commit
            .run
            .as_ref()
            .filter(|r| r.status.is_terminal() && Some(&r.run_id) == run.as_ref())
            .map(|r| Arc::new(r.clone()));
        let outcome = match watch {
            Some(watch) => self.inner.commit_watching(fence, commit, watch).await,
            None => self.inner.commit(fence, commit).await.map(|()| None),
        };
        if let Some(run_id) = run {
            match (&outcome, ended) {
                (Ok(_), Some(ended)) => self.notifier.signal_final_commit(ended),
                (Ok(_), None) => self.notifier.signal_commit(&fence.tenant, &run_id, status),
                // Another writer took the session: the run's next change will not come
                // through this process, so its waiters go back to polling.
                (Err(StoreError::FenceLost), _) => {
                    self.notifier.not_live_here(&fence.tenant, &run_id);
                }
                (Err(_), _) => {}
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;

    fn ids() -> (TenantId, RunId) {
        (TenantId::new("t"), RunId::new("r1"))
    }

    #[tokio::test]
    async fn a_signal_wakes_a_subscriber_at_once_and_a_missed_one_is_kept() {
        let notifier = Notifier::new();
        let (tenant, run) = ids();
        let mut sub = notifier.subscribe(&tenant, &run);
        // A change between subscribe and the wait is not lost.
        notifier.signal(&tenant, &run, None);
        tokio::time::timeout(Duration::from_millis(100), sub.changed())
            .await
            .expect("woken by the earlier signal");
        // Nothing more: the next wait pends.
        assert!(
            tokio::time::timeout(Duration::from_millis(30), sub.changed())
                .await
                .is_err()
        );
        // Another run's signal does not wake it.
        notifier.signal(&tenant, &RunId::new("other"), Some(RunStatus::Ok));
        assert!(
            tokio::time::timeout(Duration::from_millis(30), sub.changed())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_wait_wakes_only_for_a_change_that_may_end_it() {
        let notifier = Notifier::new();
        let (tenant, run) = ids();
        let mut sub = notifier.subscribe(&tenant, &run);
        let woke = |sub: &mut Subscription| futures::FutureExt::now_or_never(sub.may_have_ended());
        notifier.signal_commit(&tenant, &run, Some(RunStatus::Running));
        notifier.signal_commit(&tenant, &run, None);
        notifier.signal_commit(&tenant, &run, Some(RunStatus::Running));
        assert_eq!(
            woke(&mut sub),
            Some(false),
            "start, events and progress commits do not end it; the run is live here now"
        );
        assert_eq!(woke(&mut sub), None, "once");
        assert!(sub.final_run().is_none());
        notifier.signal_commit(&tenant, &run, Some(RunStatus::Ok));
        assert_eq!(woke(&mut sub), Some(true), "the end does");
        assert_eq!(woke(&mut sub), None, "once");
        // A commit that wrote the final record hands it to the waiters.
        let record: Run = serde_json::from_value(serde_json::json!({
            "runId": "r1", "tenant": "t", "sessionKey": "k", "sessionId": "s",
            "status": "ok", "livenessState": "working",
            "request": { "message": "hello" }, "acceptedAt": 1
        }))
        .unwrap();
        notifier.signal_final_commit(Arc::new(record));
        assert_eq!(woke(&mut sub), Some(true), "a final commit wakes too");
        assert_eq!(sub.final_run().map(|r| r.status), Some(RunStatus::Ok));
        let table = [
            (Some(RunStatus::Running), true, false),
            (None, true, false),
            (Some(RunStatus::RequiresAction), true, true),
            (Some(RunStatus::Queued), true, true),
            (Some(RunStatus::Error), true, true),
            (None, false, true),
        ];
        for (status, from_commit, ends) in table {
            assert_eq!(
                may_end_a_wait(status, from_commit),
                ends,
                "{status:?} {from_commit}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_is_accepted_here_until_a_change_may_end_a_wait_or_a_second_has_passed() {
        let notifier = Notifier::new();
        let (tenant, run) = ids();
        assert!(!notifier.accepted_here(&tenant, &run));
        notifier.accepting(&tenant, &run);
        assert!(notifier.accepted_here(&tenant, &run));
        assert!(
            !notifier.accepted_here(&TenantId::new("other"), &run),
            "per tenant"
        );
        // its start, events and progress leave it so; its end does not
        notifier.signal_commit(&tenant, &run, Some(RunStatus::Running));
        notifier.signal_commit(&tenant, &run, None);
        assert!(notifier.accepted_here(&tenant, &run));
        notifier.signal_commit(&tenant, &run, Some(RunStatus::Ok));
        assert!(!notifier.accepted_here(&tenant, &run));
        // nor does an abort request, a pause, a lost lock, or an accept that created nothing
        for change in 0..4 {
            notifier.accepting(&tenant, &run);
            match change {
                0 => notifier.signal(&tenant, &run, None),
                1 => notifier.signal_commit(&tenant, &run, Some(RunStatus::RequiresAction)),
                2 => notifier.not_live_here(&tenant, &run),
                _ => notifier.not_accepted(&tenant, &run),
            }
            assert!(!notifier.accepted_here(&tenant, &run), "change {change}");
        }
        // and a mark is trusted for a second only
        notifier.accepting(&tenant, &run);
        tokio::time::advance(ACCEPTED_HERE_FOR).await;
        assert!(!notifier.accepted_here(&tenant, &run));
    }

    #[tokio::test]
    async fn runs_are_live_here_from_running_to_terminal_and_then_forgotten() {
        let notifier = Notifier::new();
        let (tenant, run) = ids();
        assert!(!notifier.is_live_here(&tenant, &run));
        notifier.signal(&tenant, &run, Some(RunStatus::Running));
        assert!(notifier.is_live_here(&tenant, &run));
        let sub = notifier.subscribe(&tenant, &run);
        notifier.signal(&tenant, &run, Some(RunStatus::Ok));
        assert!(!notifier.is_live_here(&tenant, &run));
        assert_eq!(notifier.tracked_runs(), 1, "kept while subscribed");
        drop(sub);
        assert_eq!(notifier.tracked_runs(), 0, "forgotten once nobody listens");
        // A run whose writer lost the lock is no longer live here.
        notifier.signal(&tenant, &run, Some(RunStatus::Running));
        notifier.not_live_here(&tenant, &run);
        assert!(!notifier.is_live_here(&tenant, &run));
        assert_eq!(notifier.tracked_runs(), 0);
        // Signals of runs nobody follows leave nothing behind.
        notifier.signal(&tenant, &run, None);
        notifier.signal(&tenant, &run, Some(RunStatus::Error));
        assert_eq!(notifier.tracked_runs(), 0);
    }
}
