//! A pickup of a run: the session lock, the run read under it (or taken from the accepted
//! record its message carries), its [admission](super::admission) carried out. A run that
//! goes is opened in [`turn_open`](super::turn_open).

use super::admission::{
    Admission, Found, Go, How, ReadFirst, admit, goes_as_accepted, is_fresh_for,
};
use super::stop::{self, StopReason, StopSignal, Watch};
use super::turn_loop::LoopEnd;
use super::{Runner, RunnerError, TurnExit};
use crate::agents::AgentProfile;
use crate::lock::{self, AcquireError};
use agentlane_core::backoff::jittered;
use agentlane_core::metrics;
use agentlane_core::{
    AcceptedRecord, DeliveredLock, Fence, Run, RunStatus, Session, SessionKey, StoreError,
    TurnMessage,
};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The stop signal of a pickup; its helpers (lease heartbeat, stop watcher) stop when it drops.
struct Watching {
    signal: StopSignal,
    _stop_helpers_on_drop: tokio_util::sync::DropGuard,
}

/// How the lock stands once an admission was carried out.
enum Carried {
    /// Still held by this pickup: release it.
    Held(TurnExit),
    /// Released by the pickup's last commit (or lost to another writer).
    Released(TurnExit),
}

impl Runner {
    /// Brings the run named by `message` as far as it can go. `shutdown` asks the run to hand
    /// back (its state is kept; a later pickup resumes it).
    ///
    /// Acquire the session's lock, read the run under it (or take a fresh run from the
    /// accepted record its message carries, which the store checks at the run's first commit:
    /// a `Conflict` there means the run changed, and it is read and admitted again, once),
    /// [`admit`] it (the lane-order rule),
    /// carry the admission out; the lock is released here whatever the outcome, unless the
    /// pickup's last commit did. A pickup that fails releases it too: its message comes back
    /// after [`RunnerConfig::failed_pickup_pause`](crate::RunnerConfig::failed_pickup_pause)
    /// and finds the lane free.
    pub async fn execute(
        &self,
        message: &TurnMessage,
        shutdown: &CancellationToken,
    ) -> Result<TurnExit, RunnerError> {
        self.execute_delivered(message, None, shutdown).await
    }

    /// [`execute`](Self::execute), starting from `lock` when the queue took the session's
    /// lock with the delivery ([`Delivery::lock`](agentlane_core::Delivery::lock)); it is
    /// released (or used) like a lock this pickup took.
    pub async fn execute_delivered(
        &self,
        message: &TurnMessage,
        lock: Option<DeliveredLock>,
        shutdown: &CancellationToken,
    ) -> Result<TurnExit, RunnerError> {
        // On a store that remembers the records itself (the embedded one, whose runs may hold
        // their start), a run is taken from its accepted record only under the lock its
        // delivery brought: the receive checked the record and took the lock in one write, so
        // since then only an abort request can have changed the run. A lock acquired later may
        // follow a holder that changed it (a carrier that took this steer), and a held start
        // would call the model before any write could notice. A store that checks the records
        // the API puts in messages (DynamoDB) never holds a start: its first commit, before
        // any model call, checks the record.
        let record_usable = self.store.checks_accepted_records()
            || lock
                .as_ref()
                .is_some_and(|l| lock_is_for(message, &l.fence));
        let acquired = match lock {
            Some(lock) => self.delivered_lane(message, lock, shutdown).await?,
            None => self.acquire_lane(message, shutdown).await?,
        };
        let (fence, session, key) = match acquired {
            Ok(acquired) => acquired,
            Err(exit) => return Ok(exit),
        };
        let release = || async { self.store.release_lock(&fence).await.ok() };
        // A fresh run is taken from its accepted record (no read) when the store checks it at
        // the run's first commit; if that commit finds it changed, the run is read and the
        // admission made again, under the same lock.
        let mut accepted = self.accepted_run(message).filter(|_| record_usable);
        let (admission, exit) = loop {
            let taken = accepted.take();
            let from_record = taken.is_some();
            let read = self
                .read_and_admit(message, key.clone(), session.clone(), &fence, taken)
                .await;
            let (found, admission) = match read {
                Ok(read) => read,
                Err(e) => {
                    release().await;
                    return Err(e.into());
                }
            };
            let carried = self
                .carry_out(found, admission.clone(), &fence, shutdown)
                .await;
            match carried {
                Err(StoreError::Conflict(why)) if from_record => {
                    tracing::info!(run = %message.run_id, %why, "the run changed since its accept; reading it");
                }
                carried => break (admission, carried),
            }
        };
        let pause_after = admission == Admission::BehindEarlier;
        let exit = match exit {
            Ok(Carried::Released(exit)) => exit,
            Ok(Carried::Held(exit)) => {
                release().await;
                exit
            }
            Err(StoreError::FenceLost) => TurnExit::Abandoned,
            Err(e) => {
                release().await;
                return Err(e.into());
            }
        };
        if pause_after {
            // The earlier run's message is due (its runner died, or it is still in the
            // queue): this one goes back at once so the queue can deliver it (an in-flight
            // message holds its whole FIFO group back), after a short pause so a queue that
            // misbehaves does not spin on it.
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(jittered(self.config.out_of_order_pause / 4)) => {}
            }
        }
        Ok(exit)
    }

    /// The lock the queue took with the delivery of `message`, as [`Self::acquire_lane`]
    /// answers; released at once when the pickup hands the message back before starting (a
    /// shutdown), or when it is not the lock of the message's session.
    async fn delivered_lane(
        &self,
        message: &TurnMessage,
        lock: DeliveredLock,
        shutdown: &CancellationToken,
    ) -> Result<Result<(Fence, Session, SessionKey), TurnExit>, RunnerError> {
        let DeliveredLock { fence, session } = lock;
        let ours = lock_is_for(message, &fence);
        if ours && !shutdown.is_cancelled() {
            return Ok(Ok((fence.clone(), *session, fence.session_key)));
        }
        self.release_lock(&fence).await;
        match ours {
            true => Ok(Err(TurnExit::HandBack)),
            false => self.acquire_lane(message, shutdown).await,
        }
    }

    /// The session's lock for the delivery of `message`, with the session as the acquire read
    /// it and its key; or, without the lock, how the delivery ends.
    async fn acquire_lane(
        &self,
        message: &TurnMessage,
        shutdown: &CancellationToken,
    ) -> Result<Result<(Fence, Session, SessionKey), TurnExit>, RunnerError> {
        // The session key comes with the message; older messages need a read of the run first.
        let key = match &message.session_key {
            Some(key) => key.clone(),
            None => match self.store.get_run(&message.tenant, &message.run_id).await? {
                None => {
                    tracing::warn!(run = %message.run_id, "lane message names an unknown run; dropping it");
                    return Ok(Err(TurnExit::AlreadyDone));
                }
                Some(run) if run.status.is_terminal() => return Ok(Err(TurnExit::AlreadyDone)),
                Some(run) => run.session_key,
            },
        };
        let owner = format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple());
        let acquire = |timeout| {
            lock::acquire(
                self.store.as_ref(),
                self.clock.as_ref(),
                &message.tenant,
                &key,
                &owner,
                self.config.lock_lease,
                timeout,
            )
        };
        // One try first: a busy lane is usually busy with an earlier run of the session (only
        // a queue that delivers a lane's next message early shows us one), and a message that
        // must wait for it should not hold a worker for the whole acquire timeout.
        if shutdown.is_cancelled() {
            return Ok(Err(TurnExit::HandBack));
        }
        let acquired = match acquire(Duration::ZERO).await {
            Err(AcquireError::Busy { .. }) if self.behind_an_earlier_run(message).await? => {
                tracing::info!(run = %message.run_id, "an earlier run of the session holds the lane; the turn comes back later");
                return Ok(Err(TurnExit::OutOfOrder));
            }
            Err(AcquireError::Busy { .. }) => tokio::select! {
                _ = shutdown.cancelled() => return Ok(Err(TurnExit::HandBack)),
                a = acquire(self.config.lock_acquire_timeout) => a,
            },
            other => other,
        };
        match acquired {
            Ok((fence, session)) => Ok(Ok((fence, *session, key))),
            Err(AcquireError::Busy { owner, until }) => {
                tracing::info!(run = %message.run_id, %owner, until, "session busy; handing the turn back");
                Ok(Err(TurnExit::HandBack))
            }
            Err(AcquireError::Store(StoreError::NotFound(_))) => {
                tracing::warn!(run = %message.run_id, "lane message names an unknown session; dropping it");
                Ok(Err(TurnExit::AlreadyDone))
            }
            Err(AcquireError::Store(e)) => Err(e.into()),
        }
    }

    /// The run of `message` as its accept wrote it, when the message carries that record and
    /// the run may be taken from it: a fresh run, on a runner without hooks (which would see
    /// the run before its first commit checks the record).
    fn accepted_run(&self, message: &TurnMessage) -> Option<(Run, AcceptedRecord)> {
        let record = message
            .accepted
            .as_ref()
            .filter(|_| self.hooks.is_empty())?;
        let run = record.run().filter(|run| is_fresh_for(run, message))?;
        Some((run, record.clone()))
    }

    /// Reads the run of `message` under the lock (it may have ended while we waited for the
    /// lock), and every other run of the session [`admit`] asks for, then admits it. Each
    /// [`ReadFirst`] names a run not read yet, so this ends (after three reads at most: the
    /// interrupt going ahead, the run whose turn it is, the carrier).
    ///
    /// With `accepted` (see [`Runner::accepted_run`]), no read when the run goes as accepted
    /// (its turn, in order) and the store checks the record at its first commit.
    async fn read_and_admit(
        &self,
        message: &TurnMessage,
        key: SessionKey,
        session: Session,
        fence: &Fence,
        accepted: Option<(Run, AcceptedRecord)>,
    ) -> Result<(Found, Admission), StoreError> {
        let mut found = Found {
            key,
            session,
            run: None,
            others: BTreeMap::new(),
            now: self.clock.now_ms(),
            unsent_after_ms: u64::try_from(self.config.unsent_after.as_millis())
                .unwrap_or(u64::MAX),
        };
        if let Some((run, record)) = accepted {
            found.run = Some(run);
            if let Ok(admission) = admit(&found)
                && goes_as_accepted(&admission, &message.run_id)
                && self.store.expect_accepted(fence, &message.run_id, &record)
            {
                return Ok((found, admission));
            }
        }
        found.run = self.store.get_run(&message.tenant, &message.run_id).await?;
        loop {
            match admit(&found) {
                Ok(admission) => return Ok((found, admission)),
                Err(ReadFirst(id)) => {
                    let other = self.store.get_run(&message.tenant, &id).await?;
                    found.others.insert(id, other);
                }
            }
        }
    }

    /// Carries out `admission`: the one place that says what each one does, and whether the
    /// lock is still held afterwards.
    async fn carry_out(
        &self,
        mut found: Found,
        admission: Admission,
        fence: &Fence,
        shutdown: &CancellationToken,
    ) -> Result<Carried, StoreError> {
        let delivered = &found.run;
        let run_id = || delivered.as_ref().map(|r| r.run_id.to_string());
        Ok(match admission {
            Admission::Go(go) => return self.go(found, go, fence.clone(), shutdown).await,
            Admission::AlreadyDone => Carried::Held(TurnExit::AlreadyDone),
            Admission::CountOutOfTurn => match found.run.take() {
                Some(run) => {
                    self.count_out_of_turn(&run, fence).await?;
                    Carried::Released(TurnExit::AlreadyDone)
                }
                None => Carried::Held(TurnExit::AlreadyDone),
            },
            // Delivered again while it waits (no answer yet, no abort): nothing to do.
            Admission::StillPaused => Carried::Held(TurnExit::Paused),
            Admission::BehindPausedInterrupt(interrupt) => {
                tracing::info!(run = ?run_id(), %interrupt, "the interrupt going ahead of this turn is paused; the turn comes back later");
                Carried::Held(TurnExit::OutOfOrder)
            }
            Admission::ParkedBehindPause => {
                tracing::info!(run = ?run_id(), "an earlier run of the session is paused; this turn is parked behind it");
                Carried::Held(TurnExit::Paused)
            }
            Admission::BehindUnsent(head) => {
                tracing::info!(run = ?run_id(), head = %head.run_id, "the run whose turn it is may have lost its lane message; sending it again");
                Carried::Held(TurnExit::BehindUnsent(head))
            }
            Admission::BehindEarlier => {
                tracing::info!(
                    run = ?run_id(),
                    finished = found.session.runs_finished,
                    "an earlier run of the session is not finished; handing the turn back"
                );
                Carried::Held(TurnExit::HandBack)
            }
            // Cannot happen while the order rule holds (the carrier is numbered earlier).
            Admission::CarrierUnfinished => Carried::Held(TurnExit::OutOfOrder),
            Admission::HeldForReset => {
                // If the reset goes through, this run comes back as a reset run; if it gives
                // up, it runs as usual.
                tracing::info!(run = ?run_id(), "a reset of the session is waiting; the turn comes back later");
                Carried::Held(TurnExit::OutOfOrder)
            }
        })
    }

    /// A run that goes: its turn (with the lease heartbeat and the stop watcher), or its end
    /// as a carried or reset run. Its last commit releases the lock.
    async fn go(
        &self,
        mut found: Found,
        go: Go,
        fence: Fence,
        shutdown: &CancellationToken,
    ) -> Result<Carried, StoreError> {
        let Some(mut run) = found.take(&go.run) else {
            return Ok(Carried::Held(TurnExit::AlreadyDone));
        };
        run.out_of_turn = go.out_of_turn;
        if let Some(held) = &go.in_place_of {
            tracing::info!(run = %run.run_id, %held, "an interrupt goes ahead of the runs queued before it");
        }
        if run.status == RunStatus::Queued && run.pickups == 0 {
            // Queue age: from accept to the first pickup under the lock.
            let age = self.clock.now_ms().saturating_sub(run.accepted_at);
            metrics::gauge(metrics::QUEUE_AGE_MS, &[], age as f64);
        } else if run.status == RunStatus::Running && run.failed_pickups() > 0 {
            // An earlier pickup left it running without handing it back: its lock was taken over.
            metrics::incr(metrics::LOCK_TAKEOVERS, &[]);
        }
        let exit = match go.how {
            How::EndCarried { carrier } => match found.take(&carrier) {
                Some(carrier) => self.end_carried(run, &carrier, fence).await?,
                None => return Ok(Carried::Held(TurnExit::OutOfOrder)),
            },
            How::EndReset => {
                let stop = self.watch(&run, fence.clone(), shutdown);
                self.end_reset(run, fence, stop.signal).await?
            }
            How::Turn { then } => {
                let stop = self.watch(&run, fence.clone(), shutdown);
                match self.pickup(run, fence, stop.signal, &found.session).await? {
                    TurnExit::Finished(status) => match then {
                        Some(next) => TurnExit::FinishedThen(status, next),
                        None => TurnExit::Finished(status),
                    },
                    exit => exit,
                }
            }
        };
        // The interrupt ran in this delivery: the held run's message comes back.
        Ok(Carried::Released(match go.in_place_of {
            Some(_) => TurnExit::HandBack,
            None => exit,
        }))
    }

    /// The helpers of a pickup until the returned guard drops: the lease heartbeat, and the
    /// watcher that stops the run on an abort, a lost lock or `shutdown`.
    fn watch(&self, run: &Run, fence: Fence, shutdown: &CancellationToken) -> Watching {
        let signal = StopSignal::default();
        let helpers = CancellationToken::new();
        let lost = CancellationToken::new();
        lock::spawn_heartbeat(
            self.store.clone(),
            self.clock.clone(),
            fence,
            self.config.lock_lease,
            lost.clone(),
            helpers.clone(),
        );
        let watch = Watch {
            store: self.store.clone(),
            tenant: run.tenant.clone(),
            run_id: run.run_id.clone(),
            abort_poll: self.config.abort_poll,
            lost,
            shutdown: shutdown.clone(),
            helpers: helpers.clone(),
        };
        stop::spawn_watcher(watch, signal.clone());
        Watching {
            signal,
            _stop_helpers_on_drop: helpers.drop_guard(),
        }
    }

    /// Counts `run`, an interrupt that ended ahead of earlier runs, in its session's
    /// `runs_finished` now that its turn has come, and releases the lock.
    async fn count_out_of_turn(&self, run: &Run, fence: &Fence) -> Result<(), StoreError> {
        let commit = agentlane_core::Commit {
            run_id: None,
            transcript: Vec::new(),
            events: Vec::new(),
            run: None,
            session: Some(agentlane_core::SessionUpdate {
                status: agentlane_core::SessionStatus::Idle,
                active_run_id: None,
                last_progress_at: self.clock.now_ms(),
                finished_delta: 1,
            }),
            release_lock: true,
        };
        tracing::info!(run = %run.run_id, seq = run.session_seq, "an interrupt that ran ahead is counted in its turn");
        self.store.commit(fence, commit).await
    }

    /// A run accepted before its session was reset: it ends `aborted` (`session_reset`), and
    /// neither reads nor writes the transcript of the new session.
    async fn end_reset(
        &self,
        run: Run,
        fence: Fence,
        stop: StopSignal,
    ) -> Result<TurnExit, StoreError> {
        tracing::info!(run = %run.run_id, "the session was reset after this run was accepted; aborting it");
        let agent = AgentProfile::deployment(&self.tools);
        let turn = self.open(run, fence, &[], stop, agent).await?;
        turn.finish(LoopEnd::Stopped(StopReason::SessionReset))
            .await
    }

    /// A run another run carried (`steered`): it ends with the carrier's status, payloads and
    /// error, counted as finished in its session's order, without a model call.
    async fn end_carried(
        &self,
        run: Run,
        carrier: &Run,
        fence: Fence,
    ) -> Result<TurnExit, StoreError> {
        let agent = AgentProfile::deployment(&self.tools);
        let turn = self
            .open(run, fence, &[], StopSignal::default(), agent)
            .await?;
        turn.finish_carried(carrier).await
    }

    /// Whether the run of `message` is numbered after a run of its session that is not
    /// finished (two reads, only when the lane's lock was found busy).
    async fn behind_an_earlier_run(&self, message: &TurnMessage) -> Result<bool, StoreError> {
        let Some(run) = self.store.get_run(&message.tenant, &message.run_id).await? else {
            return Ok(false);
        };
        let session = self
            .store
            .get_session(&message.tenant, &run.session_key)
            .await?;
        Ok(session.is_some_and(|s| !s.is_turn_of(run.session_seq)))
    }
}

/// Whether `fence` is the lock of `message`'s session.
fn lock_is_for(message: &TurnMessage, fence: &agentlane_core::Fence) -> bool {
    message.session_key.as_ref() == Some(&fence.session_key) && message.tenant == fence.tenant
}
