//! The API edge's writes: accepting a turn, asking a run to abort, resetting a session. Each is
//! atomic and conditional on its own; none needs the session lock.

use super::StoreResult;
use crate::agent::{Agent, MAIN_AGENT};
use crate::ids::{RunId, SessionId, SessionKey, TenantId};
use crate::run::{AbortReason, LivenessState, QueueMode, Run, RunStatus, TurnRequest, Usage};
use crate::session::Session;
use async_trait::async_trait;

/// A turn to accept (ingress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTurn {
    /// Whose turn it is.
    pub tenant: TenantId,
    /// The session (lane) it goes to.
    pub session_key: SessionKey,
    /// The id to use if the turn is new.
    pub run_id: RunId,
    /// The session id to mint if the key has no session yet.
    pub new_session_id: SessionId,
    /// What the client asked for.
    pub request: TurnRequest,
    /// The client's idempotency key, if it sent one.
    pub idempotency_key: Option<String>,
    /// Acceptance time, ms since the epoch.
    pub now: u64,
    /// How long an idempotency key maps to its run.
    pub idempotency_ttl_ms: u64,
    /// Runs of the session that may be queued or running at once (accepted, not finished),
    /// this one included; `0`: no cap. Checked in the accepting transaction, so concurrent
    /// accepts cannot pass it together ([`StoreError::SessionFull`](super::StoreError::SessionFull)).
    pub max_open_runs: u64,
    /// The deployment's default queue mode (`[queue] default_mode`,
    /// `AGENTLANE_DEFAULT_QUEUE_MODE`): the mode of a turn that names none on a session that
    /// has none. `None`: `followup`.
    pub default_mode: Option<QueueMode>,
    /// The tenant's limited spend periods at `now`: the turn is refused
    /// ([`StoreError::BudgetSpent`](super::StoreError::BudgetSpent)) when one is spent already.
    /// Read with the accept's own reads (no extra request); empty: no check.
    pub spend_caps: Vec<crate::spend::PeriodCap>,
}

impl NewTurn {
    /// `BudgetSpent` when one of [`spend_caps`](Self::spend_caps) is spent in `spends` (one
    /// per cap, in order).
    pub fn check_spend(&self, spends: &[crate::spend::PeriodSpend]) -> super::StoreResult<()> {
        for (cap, spent) in self.spend_caps.iter().zip(spends) {
            let usd = cap.max_micros.is_some_and(|max| spent.micros >= max);
            let tokens = cap.max_tokens.is_some_and(|max| spent.tokens >= max);
            if usd || tokens {
                return Err(super::StoreError::BudgetSpent {
                    period: cap.period.clone(),
                    ends_at: cap.ends_at,
                });
            }
        }
        Ok(())
    }

    /// The agent this turn runs, given the agent's current definition as the accepting
    /// transaction read it (`None`: no live definition): its version, or version 0 (the
    /// deployment's configuration) for `main` without a definition of the tenant's own;
    /// `NotFound` naming the agent otherwise.
    pub fn resolve_agent(&self, current: Option<&Agent>) -> super::StoreResult<AcceptedAgent> {
        match current {
            Some(agent) => Ok(AcceptedAgent {
                version: agent.version,
                queue_mode: agent.spec.queue_mode,
            }),
            None if self.request.agent() == MAIN_AGENT => Ok(AcceptedAgent::default()),
            None => Err(super::StoreError::NotFound(format!(
                "agent {:?} does not exist",
                self.request.agent()
            ))),
        }
    }

    /// `Conflict` naming both agents when `session` belongs to another agent than the one
    /// this turn names (a session belongs to the agent of its first turn; sessions from before
    /// agents belong to `main`).
    pub fn check_agent(&self, session: &Session) -> super::StoreResult<()> {
        let owner = session.agent_id.as_deref().unwrap_or(MAIN_AGENT);
        if owner == self.request.agent() {
            return Ok(());
        }
        Err(super::StoreError::Conflict(format!(
            "session {:?} belongs to agent {owner:?}; this turn names agent {:?} (use another sessionKey)",
            self.session_key.as_str(),
            self.request.agent()
        )))
    }

    /// The run this turn creates on `session_id`: `queued`, nothing done yet, `session_seq`-th
    /// of its key (the session's `runs_accepted` before this turn), with `agent`'s version, in
    /// the mode the request asked for, else the session's `default_mode`, else the agent's,
    /// else the deployment's [`default_mode`](Self::default_mode), else `followup`.
    pub fn queued_run(
        &self,
        session_id: SessionId,
        session_seq: u64,
        default_mode: Option<QueueMode>,
        agent: &AcceptedAgent,
    ) -> Run {
        let mut request = self.request.clone();
        request.agent_version = Some(agent.version);
        request.queue_mode = Some(
            request
                .queue_mode
                .or(default_mode)
                .or(agent.queue_mode)
                .or(self.default_mode)
                .unwrap_or_default(),
        );
        Run {
            run_id: self.run_id.clone(),
            tenant: self.tenant.clone(),
            session_key: self.session_key.clone(),
            session_id,
            status: RunStatus::Queued,
            liveness_state: LivenessState::Working,
            request,
            idempotency_key: self.idempotency_key.clone(),
            accepted_at: self.now,
            started_at: None,
            ended_at: None,
            model: None,
            attempts: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
            payloads: Vec::new(),
            error: None,
            abort_requested: false,
            abort_reason: None,
            pickups: 0,
            hand_backs: 0,
            checkpoint: None,
            session_seq,
            request_fingerprint: Some(self.request.fingerprint(&self.session_key)),
            queue_outcome: Default::default(),
            into_run_id: None,
            out_of_turn: false,
            warnings: Vec::new(),
            required_action: None,
            paused_ms: 0,
            action_answer: None,
        }
    }

    /// `SessionFull` when `session` already has [`max_open_runs`](Self::max_open_runs) runs
    /// queued or running. Adapters call it on the session they read in the accepting
    /// transaction (a new session always has room).
    pub fn check_room(&self, session: &Session) -> super::StoreResult<()> {
        let open = session.runs_accepted.saturating_sub(session.runs_finished);
        if self.max_open_runs > 0 && open >= self.max_open_runs {
            return Err(super::StoreError::SessionFull {
                open,
                cap: self.max_open_runs,
            });
        }
        Ok(())
    }

    /// The interrupt mark `run` (just made by [`queued_run`](Self::queued_run)) sets on
    /// `session` (as read before this accept): a run accepted in `interrupt` mode behind runs
    /// that are not finished goes next once the oldest of them is terminal. When the run it
    /// interrupts is itself an interrupt that went ahead (the session's mark names it and it
    /// is active), it takes that interrupt's place: it goes next once that one has ended,
    /// still ahead of the runs both went ahead of. `None` for every other run (the session's
    /// mark stays as it is).
    pub fn interrupt_mark(
        &self,
        run: &Run,
        session: &Session,
    ) -> Option<crate::session::InterruptMark> {
        let ahead = session.interrupt.as_ref().filter(|m| {
            session.active_run_id.as_ref() == Some(&m.run_id) && !session.is_turn_of(m.session_seq)
        });
        (run.request.queue_mode == Some(QueueMode::Interrupt)
            && session.runs_finished < run.session_seq)
            .then(|| crate::session::InterruptMark {
                run_id: run.run_id.clone(),
                session_seq: run.session_seq,
                after: ahead.map_or(session.runs_finished, |m| m.after),
            })
    }

    /// The session this turn creates when its key has none: [`Session::new`] with
    /// `new_session_id`, this turn counted as its first accepted run.
    pub fn first_session(&self) -> Session {
        Session {
            runs_accepted: 1,
            agent_id: self.request.agent_id.clone(),
            ..Session::new(
                self.tenant.clone(),
                self.session_key.clone(),
                self.new_session_id.clone(),
                self.now,
            )
        }
    }
}

impl NewTurn {
    /// The answer to a live idempotency record naming `run`: the run (`created: false`) when
    /// this turn is a retry of it, `Conflict` when the key was used for a different turn.
    pub fn replay(&self, run: Run) -> super::StoreResult<AcceptOutcome> {
        if run.was_accepted_as(&self.session_key, &self.request) {
            Ok(AcceptOutcome {
                run,
                created: false,
            })
        } else {
            Err(super::StoreError::Conflict(format!(
                "idempotency key {:?} was used for a different request (run {})",
                self.idempotency_key.as_deref().unwrap_or_default(),
                run.run_id
            )))
        }
    }
}

/// The agent of an accepted turn, as the accept resolved it ([`NewTurn::resolve_agent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcceptedAgent {
    /// Its version (0: the deployment's own `main`).
    pub version: u64,
    /// Its default queue mode.
    pub queue_mode: Option<QueueMode>,
}

/// What `accept_turn` did.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptOutcome {
    /// The run the turn is (new, or the one its idempotency key already named).
    pub run: Run,
    /// `false` when the idempotency key already named a run: `run` is that run, nothing new
    /// was written.
    pub created: bool,
}

/// What [`TurnIntake::answer_action`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerOutcome {
    /// The answer was recorded now: the run, with it.
    Recorded(Run),
    /// Nothing written: the run is not waiting on that pause (it was answered already, or
    /// expired, resumed or ended): the run as it stands.
    NotWaiting(Run),
    /// No such run.
    NotFound,
}

/// Unfenced writes from the API edge.
#[async_trait]
pub trait TurnIntake: Send + Sync + 'static {
    /// Atomically: look up the idempotency key (a live record answers its run, `created:
    /// false`, when the run [was accepted as](Run::was_accepted_as) this turn; `Conflict` when
    /// the key was used for a different turn); create the session on first use of the key
    /// ([`NewTurn::first_session`]); write the run as `queued` on the session's current id with
    /// `session_seq` = the session's `runs_accepted` before this turn (which it increments, in
    /// the same transaction); record the idempotency key. The agent the request names is
    /// read in the same transaction ([`NewTurn::resolve_agent`]: `NotFound` for an unknown one)
    /// and must be the session's ([`NewTurn::check_agent`]: `Conflict`); the run records its
    /// version. A run record over
    /// [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES) is refused (`TooLarge`).
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome>;

    /// Whether [`accept_turn`](Self::accept_turn) also queues the lane message of a run it
    /// creates, in the same atomic write: a store that is its own lane queue (one database).
    /// Then an accepted turn never lacks its message, nor a message its run, and the API does
    /// not enqueue a created run again. The message is the one the API would send
    /// (`Lane::for_session`, the run id as dedup id, no accepted record), and waiting
    /// receivers are woken only once the accept has committed. `false` unless an adapter says
    /// so.
    fn queues_accepted_turns(&self) -> bool {
        false
    }

    /// Sets `abort_requested` on a run. Returns the run after the change, `None` if unknown.
    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.request_abort_for(tenant, run_id, AbortReason::Requested)
            .await
    }

    /// Sets `abort_requested` on a run, with `reason` as its `abort_reason` unless an abort was
    /// already requested (the first request's reason stays). Returns the run after the change,
    /// `None` if unknown.
    async fn request_abort_for(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>>;

    /// Records `answer` for the run's pause `answer.action_id`, in one conditional write: only
    /// while the run is `requires_action` and no answer for that pause (or a later one) is
    /// recorded. The answer lives beside the run record ([`Run::action_answer`]): no runner
    /// commit changes it. Scheduling the resume is the caller's (one lane message).
    async fn answer_action(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        answer: crate::action::RecordedAnswer,
    ) -> StoreResult<AnswerOutcome>;

    /// Gives the key a new session id, unless a live lock is held: then it raises the
    /// session's `reset_barrier` to `runs_accepted` (the runs accepted so far will not start)
    /// and answers `Busy` (see [`Session::lock_is_live`]). In the same write as the new id the lock is cleared, so no fence taken
    /// before the reset is current after it. Runs accepted before the reset keep the old
    /// session id: a runner ends them `aborted` (`session_reset`) without reading or writing
    /// the new session. `NotFound` when the key has no session.
    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session>;

    /// Sets (or with `None` clears) the key's default queue mode: the mode of a turn accepted
    /// without one from then on. Answers the session after the change; `NotFound` when the key
    /// has no session.
    async fn set_queue_mode(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        mode: Option<QueueMode>,
        now: u64,
    ) -> StoreResult<Session>;
}
