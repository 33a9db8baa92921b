//! Sessions and the session write lock (owner + lease + fencing token).

use crate::ids::{FencingToken, RunId, SessionId, SessionKey, TenantId};
use crate::run::{QueueMode, Run, RunStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Whether a session is running a turn (`GET /v1/sessions/{key}` shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum SessionStatus {
    /// No turn is running (the default).
    #[default]
    Idle,
    /// A runner holds the session and is running a turn (`activeRunId`).
    Processing,
}

impl SessionStatus {
    /// The status as the API and the stores spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Processing => "processing",
        }
    }

    /// The status named `value` (as [`as_str`](Self::as_str) spells it).
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "idle" => Some(SessionStatus::Idle),
            "processing" => Some(SessionStatus::Processing),
            _ => None,
        }
    }
}

/// A session key's current state. Lock fields are part of the record so that a fenced write can
/// check them in the same conditional write (DynamoDB) or transaction (SQLite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The tenant that owns the session; another tenant never sees it.
    pub tenant: TenantId,
    /// The client's name for the conversation (1–256 chars of `[A-Za-z0-9:._@-]`).
    pub session_key: SessionKey,
    /// The key's current session id; a reset replaces it, and transcripts belong to it.
    pub session_id: SessionId,
    /// Whether a turn is running now.
    pub status: SessionStatus,
    /// The run being processed; `None` while idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    /// When the key's first turn created the session (ms since the epoch).
    pub created_at: u64,
    /// When the record last changed (ms since the epoch).
    pub updated_at: u64,
    /// Last time a run of this session made progress (a reply, a tool, a status change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<u64>,
    /// Turns accepted for this key (all session ids).
    pub runs_accepted: u64,
    /// The agent the session belongs to (that of its first turn); `None`: `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Turns that reached a terminal status.
    pub runs_finished: u64,
    /// Bumped by every reset.
    pub generation: u64,
    /// Current lock holder, if any (its lease may have expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_owner: Option<String>,
    /// Lease end, ms since the epoch.
    pub lock_until: u64,
    /// The last fencing token handed out; only grows.
    pub fence: u64,
    /// Set by a reset that had to wait for the lock: runs of this key numbered below it that
    /// have not started are held (not started, not ended) until `reset_barrier_until`, so the
    /// reset gets the lock before them. Only grows.
    #[serde(default)]
    pub reset_barrier: u64,
    /// When the hold of `reset_barrier` ends (ms since the epoch; 0 = no hold). Every busy
    /// answer to a waiting reset moves it to `now +` [`RESET_HOLD_MS`]: a reset that gives up
    /// (or whose caller dies) stops holding the runs soon after, and they run as if no reset
    /// had been asked for.
    #[serde(default)]
    pub reset_barrier_until: u64,
    /// The queue mode of a turn that asks for none (`PATCH /v1/sessions/{key}`); `None`:
    /// `followup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
    /// The last `interrupt` message accepted behind unfinished runs (set by its accept): it
    /// runs as soon as the run that was oldest unfinished then is terminal, ahead of the
    /// runs accepted between them (see [`Session::interrupt_ahead_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<InterruptMark>,
    /// Since when accepted work of this session has been waiting to finish: set by an accept
    /// when absent (in the accept's own write), moved forward or cleared only by the sweep.
    /// Indexed (DynamoDB sparse GSI `pending`, SQLite partial index), so the sweep finds an idle
    /// session whose queued run lost its lane message without scanning (issue 11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_at: Option<u64>,
    /// The runs accepted while pending, by `session_seq` (set by each accept; the sweep prunes
    /// the finished ones), so the sweep knows the oldest unfinished run without a query.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub open_runs: BTreeMap<u64, RunId>,
    /// Lane messages the sweep re-enqueued for the oldest unfinished run without it making
    /// progress (reset when the session moves on).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub redrives: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where an `interrupt` message goes in its session's order (SPEC §4 `interrupt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptMark {
    /// The interrupting run.
    pub run_id: RunId,
    /// Its `session_seq`.
    pub session_seq: u64,
    /// `runs_finished` when it was accepted: the seq of the run it interrupts. Once that run
    /// is terminal (`runs_finished > after`), the interrupting run goes next.
    pub after: u64,
}

/// What a run whose start was held back (not yet written, so the session names no active run)
/// watches for when its start is written: an `interrupt` accepted meanwhile found no active run
/// to ask to abort, and set the session's mark on this run instead (SPEC §4 `interrupt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptWatch {
    /// The run whose start was held.
    pub run_id: RunId,
    /// Its `session_seq`.
    pub session_seq: u64,
    /// The session's interrupt mark when the run's pickup took the lock: an interrupt accepted
    /// before that found the run queued, and lets it run (it goes once the run has ended).
    pub seen: Option<InterruptMark>,
}

impl InterruptWatch {
    /// Whether `session`'s interrupt mark interrupts the watched run and was set since the
    /// watch began: the run is then asked to abort (`interrupted`), as the interrupt's accept
    /// would have asked had the run's start been written.
    pub fn interrupted_by(&self, session: &Session) -> bool {
        session.interrupt.as_ref().is_some_and(|mark| {
            mark.after == self.session_seq
                && mark.run_id != self.run_id
                && self.seen.as_ref() != Some(mark)
        })
    }
}

/// How long one busy answer to a waiting reset holds the runs accepted before it (longer than
/// the pause between two tries of a waiting reset).
pub const RESET_HOLD_MS: u64 = 3_000;

impl Session {
    /// A new session of `key`: idle, no runs yet, unlocked, fence 0. The one constructor every
    /// adapter uses (see also [`NewTurn::first_session`](crate::NewTurn::first_session)).
    pub fn new(tenant: TenantId, session_key: SessionKey, session_id: SessionId, now: u64) -> Self {
        Self {
            tenant,
            session_key,
            session_id,
            status: SessionStatus::Idle,
            active_run_id: None,
            created_at: now,
            updated_at: now,
            last_progress_at: None,
            runs_accepted: 0,
            agent_id: None,
            runs_finished: 0,
            generation: 0,
            lock_owner: None,
            lock_until: 0,
            fence: 0,
            reset_barrier: 0,
            reset_barrier_until: 0,
            queue_mode: None,
            interrupt: None,
            pending_at: None,
            open_runs: BTreeMap::new(),
            redrives: 0,
        }
    }

    /// Marks a turn accepted as run `session_seq` (`run_id`) at `now` as pending work: what
    /// every adapter's accept writes along with the count.
    pub fn note_accepted(&mut self, session_seq: u64, run_id: &RunId, now: u64) {
        self.pending_at.get_or_insert(now);
        self.open_runs.insert(session_seq, run_id.clone());
    }

    /// The oldest run accepted and not yet finished, as recorded at accept: the first open run
    /// numbered at or after `runs_finished`.
    pub fn oldest_open_run(&self) -> Option<(u64, &RunId)> {
        self.open_runs
            .range(self.runs_finished..)
            .next()
            .map(|(seq, id)| (*seq, id))
    }

    /// Drops the open runs numbered below `runs_finished` (finished: runs end in lane order).
    /// Every commit that finishes a run applies it, so a busy session's record stays the size
    /// of its queue instead of growing by a run id per turn until a sweep settles it.
    pub fn drop_finished_runs(&mut self) {
        let finished = self.runs_finished;
        self.open_runs.retain(|seq, _| *seq >= finished);
    }

    /// Applies a sweep's [`PendingSettle`] (the adapters' shared rule): the finished open runs
    /// are dropped; `Clear` ends the pending state, `Defer` and `Redrive` move it to `since`.
    pub fn settle_pending(&mut self, settle: PendingSettle) {
        self.drop_finished_runs();
        match settle {
            PendingSettle::Clear => {
                self.pending_at = None;
                self.open_runs.clear();
                self.redrives = 0;
            }
            PendingSettle::Defer { since } => {
                self.pending_at = Some(since);
                self.redrives = 0;
            }
            PendingSettle::Redrive { since } => {
                self.pending_at = Some(since);
                self.redrives = self.redrives.saturating_add(1);
            }
        }
    }

    /// Whether a writer holds the lock at `now`: an owner is set and its lease has not ended
    /// (`lock_until >= now`). The one liveness rule: a live lock cannot be acquired, and a
    /// session with a live lock cannot be reset.
    pub fn lock_is_live(&self, now: u64) -> bool {
        self.lock_owner.is_some() && self.lock_until >= now
    }

    /// `Held` by the live holder at `now`; `None` when the lock may be taken.
    pub fn lock_holder(&self, now: u64) -> Option<LockAttempt> {
        match &self.lock_owner {
            Some(owner) if self.lock_is_live(now) => Some(LockAttempt::Held {
                owner: owner.clone(),
                until: self.lock_until,
            }),
            _ => None,
        }
    }

    /// Whether a run `session_seq`-th of this key may start (or resume): every earlier run of
    /// the key is terminal. Runs finish in order (this rule), each counted once in
    /// `runs_finished`, so that count is the seq of the only run allowed to go.
    pub fn is_turn_of(&self, session_seq: u64) -> bool {
        session_seq <= self.runs_finished
    }

    /// The run of the session's [interrupt mark](Self::interrupt) when it goes now, ahead of
    /// the run numbered `session_seq` whose turn it otherwise is: the interrupted run is
    /// terminal, the mark is numbered after `session_seq` and not counted yet. The caller
    /// checks that run is not terminal.
    pub fn interrupt_ahead_of(&self, session_seq: u64) -> Option<&InterruptMark> {
        self.interrupt.as_ref().filter(|m| {
            self.runs_finished > m.after
                && m.session_seq > session_seq
                && m.session_seq >= self.runs_finished
        })
    }

    /// Whether the run numbered `session_seq` may go now: in its turn, or as the session's
    /// pending [interrupt](Self::interrupt_ahead_of).
    pub fn may_start(&self, run_id: &RunId, session_seq: u64) -> bool {
        self.is_turn_of(session_seq)
            || self
                .interrupt_ahead_of(self.runs_finished)
                .is_some_and(|m| m.run_id == *run_id)
    }

    /// Whether `run` belongs to a reset: accepted on another session id than the current one.
    /// Such a run ends `aborted` (`session_reset`) without reading or writing the session.
    pub fn was_reset_under(&self, run: &Run) -> bool {
        run.session_id != self.session_id
    }

    /// Whether `run` must wait at `now` for a reset that is waiting for the lock: not started,
    /// numbered below the reset's barrier, and the barrier's hold not over. Such a run is
    /// handed back untouched: if the reset goes through it is a [reset run](Self::was_reset_under),
    /// if the reset gives up it runs as usual.
    pub fn holds_for_reset(&self, run: &Run, now: u64) -> bool {
        let unstarted = run.status == RunStatus::Queued && run.pickups == 0;
        unstarted && run.session_seq < self.reset_barrier && now <= self.reset_barrier_until
    }

    /// Whether `fence` is the current lock: the session names its owner and token (whatever the
    /// lease says: a fenced write is refused only once another writer took the lock or it was
    /// released).
    pub fn is_fenced_by(&self, fence: &Fence) -> bool {
        self.lock_owner.as_deref() == Some(fence.owner.as_str()) && self.fence == fence.token.0
    }
}

/// What the sweep does with a pending session (see [`Session::pending_at`]). Applied only if
/// the session's counters and `pendingAt` are still those the sweep read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingSettle {
    /// Every accepted run finished: the session leaves the index.
    Clear,
    /// Busy or recently accepted: look again one threshold after `since`; no redrive counted.
    Defer {
        /// The session's new `pendingAt` (ms since the epoch).
        since: u64,
    },
    /// The oldest unfinished run's lane message was re-enqueued: look again one threshold after
    /// `since`, counting one redrive.
    Redrive {
        /// The session's new `pendingAt` (ms since the epoch).
        since: u64,
    },
}

/// Proof of holding a session's write lock. Pass it to every fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The tenant whose session is locked.
    pub tenant: TenantId,
    /// The locked session's key.
    pub session_key: SessionKey,
    /// Who holds the lock (`<instance>:<uuid>`, unique per acquire).
    pub owner: String,
    /// The token the acquire handed out; a write carrying an older one is refused.
    pub token: FencingToken,
}

/// The answer to one acquire try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    /// The lock is ours; the session as the acquire left it (its id, `runs_finished` for the
    /// order check, ...), read in the same write.
    Acquired(Fence, Box<Session>),
    /// Someone else holds an unexpired lease.
    Held {
        /// The holder's owner id.
        owner: String,
        /// When its lease ends (ms since the epoch).
        until: u64,
    },
}

/// Activity fields a runner sets on its session while it holds the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUpdate {
    /// The status to set (`processing` while a run is active, `idle` when it ends).
    pub status: SessionStatus,
    /// The run being processed; `None` when the session goes idle.
    pub active_run_id: Option<RunId>,
    /// When the run last made progress (ms since the epoch): the supervisor's stuck check reads it.
    pub last_progress_at: u64,
    /// Add this to `runs_finished`.
    pub finished_delta: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(owner: Option<&str>, until: u64, fence: u64) -> Session {
        Session {
            lock_owner: owner.map(str::to_owned),
            lock_until: until,
            fence,
            ..Session::new(
                TenantId::new("t"),
                SessionKey::new("k"),
                SessionId::new("s"),
                1,
            )
        }
    }

    #[test]
    fn a_held_start_is_interrupted_only_by_a_mark_set_on_it_since_its_pickup() {
        let mark = |run: &str, after: u64| InterruptMark {
            run_id: RunId::new(run),
            session_seq: 9,
            after,
        };
        let watch = |seen: Option<InterruptMark>| InterruptWatch {
            run_id: RunId::new("held"),
            session_seq: 4,
            seen,
        };
        // (mark now, mark seen at pickup, interrupted)
        let cases = [
            (None, None, false),
            (Some(mark("i", 4)), None, true),
            // set before the pickup, while the run was queued: it runs, the interrupt after
            (Some(mark("i", 4)), Some(mark("i", 4)), false),
            // a later interrupt replaced the one seen
            (Some(mark("j", 4)), Some(mark("i", 4)), true),
            // a mark on another run
            (Some(mark("i", 3)), None, false),
            (Some(mark("held", 4)), None, false),
        ];
        for (now, seen, interrupted) in cases {
            let session = Session {
                interrupt: now.clone(),
                ..Session::new(
                    TenantId::new("t"),
                    SessionKey::new("k"),
                    SessionId::new("s"),
                    1,
                )
            };
            assert_eq!(
                watch(seen.clone()).interrupted_by(&session),
                interrupted,
                "{now:?} seen {seen:?}"
            );
        }
    }

    #[test]
    fn an_interrupt_goes_once_the_interrupted_run_is_terminal_ahead_of_the_ones_between() {
        let mut session = locked(None, 0, 0);
        session.runs_accepted = 4;
        session.runs_finished = 0;
        session.interrupt = Some(InterruptMark {
            run_id: RunId::new("i"),
            session_seq: 3,
            after: 0,
        });
        // the interrupted run 0 is still running: nothing jumps the queue
        assert_eq!(session.interrupt_ahead_of(0), None);
        assert!(!session.may_start(&RunId::new("i"), 3));
        // once it is terminal, the interrupt goes ahead of runs 1 and 2, and only it
        session.runs_finished = 1;
        assert!(session.interrupt_ahead_of(1).is_some());
        assert!(session.may_start(&RunId::new("i"), 3));
        assert!(!session.may_start(&RunId::new("other"), 3));
        assert!(session.may_start(&RunId::new("f1"), 1));
        assert!(!session.may_start(&RunId::new("f2"), 2));
        // counted (its turn came): the mark is spent
        session.runs_finished = 4;
        assert_eq!(session.interrupt_ahead_of(4), None);
    }

    #[test]
    fn a_new_session_is_idle_unlocked_and_empty() {
        let session = locked(None, 0, 0);
        assert_eq!(session.status, SessionStatus::Idle);
        assert_eq!((session.runs_accepted, session.generation), (0, 0));
        assert_eq!((session.created_at, session.updated_at), (1, 1));
        assert!(!session.lock_is_live(0));
    }

    #[test]
    fn a_lock_is_live_through_the_last_ms_of_its_lease() {
        let session = locked(Some("a"), 100, 3);
        assert!(session.lock_is_live(99));
        assert!(session.lock_is_live(100));
        assert!(!session.lock_is_live(101));
        assert_eq!(
            session.lock_holder(100),
            Some(LockAttempt::Held {
                owner: "a".into(),
                until: 100
            })
        );
        assert_eq!(session.lock_holder(101), None);
        // a released lock (owner cleared) is free whatever the lease said
        assert!(!locked(None, 100, 3).lock_is_live(50));
    }

    #[test]
    fn a_fence_is_current_while_owner_and_token_match() {
        let session = locked(Some("a"), 100, 3);
        let fence = |owner: &str, token| Fence {
            tenant: TenantId::new("t"),
            session_key: SessionKey::new("k"),
            owner: owner.into(),
            token: FencingToken(token),
        };
        assert!(session.is_fenced_by(&fence("a", 3)));
        assert!(!session.is_fenced_by(&fence("a", 2)));
        assert!(!session.is_fenced_by(&fence("b", 3)));
        assert!(!locked(None, 0, 3).is_fenced_by(&fence("a", 3)));
    }
}
