//! Lane admission (SPEC §4, §10): what one delivered lane message may do, decided from what was
//! read under its session's lock. One pure rule, [`admit`], table-tested below; the pickup
//! acquires the lock, reads, asks [`admit`] (reading the other runs it names first) and carries
//! out the answer in one `match`.
//!
//! The order rule: runs of a session finish in the order they were accepted (each counted once
//! in `runs_finished`), except an `interrupt`, which goes as soon as the run it interrupts is
//! terminal, ahead of the runs accepted between them, and is counted when its own turn comes.

use super::pause::may_resume;
use agentlane_core::{Run, RunId, RunStatus, Session, SessionKey, TurnMessage};
use std::collections::BTreeMap;

/// What was read under the lock for one delivery: the input of [`admit`].
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The session key of the lane the message came on.
    pub(super) key: SessionKey,
    /// The session, as the lock's acquire read it.
    pub(super) session: Session,
    /// The delivered run, read under the lock (`None`: it does not exist).
    pub(super) run: Option<Run>,
    /// Other runs of the session, read because [`admit`] asked for them ([`ReadFirst`]);
    /// `None`: that run does not exist.
    pub(super) others: BTreeMap<RunId, Option<Run>>,
    /// When it was read (ms since the epoch).
    pub(super) now: u64,
    /// `RunnerConfig::unsent_after`, in ms.
    pub(super) unsent_after_ms: u64,
}

impl Found {
    /// The other run `id`, or the read [`admit`] needs first.
    fn other(&self, id: &RunId) -> Result<Option<&Run>, ReadFirst> {
        match self.others.get(id) {
            Some(run) => Ok(run.as_ref()),
            None => Err(ReadFirst(id.clone())),
        }
    }

    /// Takes the run `id` (the delivered one or another one read) out of what was read.
    pub(super) fn take(&mut self, id: &RunId) -> Option<Run> {
        match &self.run {
            Some(run) if run.run_id == *id => self.run.take(),
            _ => self.others.remove(id).flatten(),
        }
    }
}

/// [`admit`] cannot decide before this run of the session is read: read it (under the same
/// lock) into [`Found::others`] and ask again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReadFirst(pub(super) RunId);

/// What a delivery does, by the order rule. Every variant but [`Admission::Go`] runs nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Admission {
    /// A run goes (the delivered one, or an interrupt in its place).
    Go(Go),
    /// Nothing to do: the run does not exist, belongs to another session key, or is terminal
    /// (a redelivery: never run twice). Release the lock; the message is done with.
    AlreadyDone,
    /// The delivered run is an interrupt that ended ahead of earlier runs, and its own turn
    /// has come: count it in `runs_finished` (that commit releases the lock).
    CountOutOfTurn,
    /// The run is paused, with no answer and no abort yet: release the lock; the message is
    /// done with (the answer sends a new one).
    StillPaused,
    /// The interrupt that goes ahead of the delivered run is paused, with no answer yet: the
    /// delivered message comes back after a pause (not at once, or every delivery would hand
    /// it back again until the answer comes; the answer's message is queued behind it).
    BehindPausedInterrupt(RunId),
    /// An earlier run of the session is paused: this turn is parked (its message done with)
    /// and the paused run sends it again when it ends.
    ParkedBehindPause,
    /// An earlier run of the session must go first and its lane message may be lost (a
    /// paused run that was answered or aborted, or a run never picked up long after its
    /// accept): send that message again and this one behind it.
    BehindUnsent(TurnMessage),
    /// An earlier run of the session is not finished and no one holds the lane: its message
    /// is due now; hand this one back (after a short pause, so a queue that misbehaves does
    /// not spin on it).
    BehindEarlier,
    /// Steered into an earlier run that has not ended (cannot happen while the order rule
    /// holds): come back later.
    CarrierUnfinished,
    /// A reset accepted after this run waits for the lock: let it have it; come back later.
    HeldForReset,
}

/// A run that goes, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Go {
    /// The run that goes.
    pub(super) run: RunId,
    /// How it goes.
    pub(super) how: How,
    /// The delivered run it goes in place of (an interrupt ahead of it): whatever the
    /// interrupt's pickup ends with, the delivered message is handed back.
    pub(super) in_place_of: Option<RunId>,
    /// Whether it goes ahead of earlier runs (an interrupt; counted when its turn comes).
    pub(super) out_of_turn: bool,
}

/// How a run that goes is brought to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum How {
    /// Its turn: started, or resumed. `then`: the next run of the session, which may have
    /// been parked while this one was paused, is sent again when this one finishes.
    Turn { then: Option<TurnMessage> },
    /// Steered into `carrier`, which has ended: it ends as the carrier did.
    EndCarried { carrier: RunId },
    /// Accepted before its session was reset: it ends `aborted` (`session_reset`).
    EndReset,
}

/// The lane message of `run`.
fn message_of(run: &Run) -> TurnMessage {
    TurnMessage {
        tenant: run.tenant.clone(),
        run_id: run.run_id.clone(),
        session_key: Some(run.session_key.clone()),
        accepted: None,
    }
}

/// What the delivery of `found.run` does, given what was read under the lock; or the run of
/// the session to read first.
pub(super) fn admit(found: &Found) -> Result<Admission, ReadFirst> {
    let session = &found.session;
    let Some(delivered) = found.run.as_ref().filter(|r| r.session_key == found.key) else {
        return Ok(Admission::AlreadyDone);
    };
    if delivered.status.is_terminal() {
        let counts = delivered.out_of_turn && delivered.session_seq == session.runs_finished;
        return Ok(if counts {
            Admission::CountOutOfTurn
        } else {
            Admission::AlreadyDone
        });
    }
    let (run, in_place_of) = match started_ahead(found, delivered)? {
        Some(ahead) => (ahead, Some(delivered.run_id.clone())),
        None => match interrupt_first(found, delivered)? {
            Some(interrupt) => (interrupt, Some(delivered.run_id.clone())),
            None => (delivered, None),
        },
    };
    let resumes_ahead =
        session.active_run_id.as_ref() == Some(&run.run_id) && !session.is_turn_of(run.session_seq);
    if !resumes_ahead && !session.may_start(&run.run_id, run.session_seq) {
        return behind_an_earlier_run(found, run);
    }
    let carrier = run
        .into_run_id
        .as_ref()
        .filter(|_| run.status == RunStatus::Queued);
    let how = if let Some(carrier) = carrier {
        // Steered into an earlier run, which has ended (every earlier run has).
        match found.other(carrier)? {
            Some(c) if c.status.is_terminal() => How::EndCarried {
                carrier: carrier.clone(),
            },
            _ => return Ok(Admission::CarrierUnfinished),
        }
    } else if session.holds_for_reset(run, found.now) {
        return Ok(Admission::HeldForReset);
    } else if session.was_reset_under(run) {
        How::EndReset
    } else if run.status == RunStatus::RequiresAction && !may_resume(run) {
        return Ok(match in_place_of {
            Some(_) => Admission::BehindPausedInterrupt(run.run_id.clone()),
            None => Admission::StillPaused,
        });
    } else {
        // The run after a run that paused may have been parked: it is sent again at the end.
        let then = run.required_action.as_ref().and_then(|_| {
            session
                .open_runs
                .get(&(run.session_seq + 1))
                .map(|next| TurnMessage {
                    tenant: run.tenant.clone(),
                    run_id: next.clone(),
                    session_key: Some(run.session_key.clone()),
                    accepted: None,
                })
        });
        How::Turn { then }
    };
    Ok(Admission::Go(Go {
        run: run.run_id.clone(),
        how,
        in_place_of,
        out_of_turn: !session.is_turn_of(run.session_seq),
    }))
}

/// Whether `run`, decoded from the accepted record `message` carries, may stand for the run
/// without a read: the run the message names, fresh (queued, never picked up, not aborted,
/// not steered). The store still checks the record at the run's first commit.
pub(super) fn is_fresh_for(run: &Run, message: &TurnMessage) -> bool {
    run.run_id == message.run_id
        && run.tenant == message.tenant
        && message.session_key.as_ref() == Some(&run.session_key)
        && run.status == RunStatus::Queued
        && run.pickups == 0
        && !run.abort_requested
        && run.into_run_id.is_none()
        && run.required_action.is_none()
}

/// Whether `admission` is the plain start of `delivered`: its own turn, in order, with nothing
/// to send after it. Only then may a run taken from its accepted record go without a read.
pub(super) fn goes_as_accepted(admission: &Admission, delivered: &RunId) -> bool {
    matches!(
        admission,
        Admission::Go(Go {
            run,
            how: How::Turn { then: None },
            in_place_of: None,
            out_of_turn: false,
        }) if run == delivered
    )
}

/// The run that started ahead of its turn (an interrupt that went ahead) and has not ended —
/// it died, paused, or was handed back — when it is not `delivered`: it goes (resumes) in
/// this delivery, before any other run of the session starts. The session names it active
/// until it ends. A later interrupt takes over the session's mark, so without this rule the
/// run whose turn it is would start after the dead run's unanswered tool calls.
fn started_ahead<'f>(found: &'f Found, delivered: &Run) -> Result<Option<&'f Run>, ReadFirst> {
    let session = &found.session;
    match &session.active_run_id {
        Some(active) if *active != delivered.run_id => Ok(found.other(active)?.filter(|r| {
            !r.status.is_terminal()
                && r.session_key == found.key
                && !session.is_turn_of(r.session_seq)
        })),
        _ => Ok(None),
    }
}

/// The interrupt that goes ahead of `delivered`, in this delivery: one accepted behind it,
/// not ended, when it is `delivered`'s turn.
fn interrupt_first<'f>(found: &'f Found, delivered: &Run) -> Result<Option<&'f Run>, ReadFirst> {
    let session = &found.session;
    match session.interrupt_ahead_of(delivered.session_seq) {
        Some(mark)
            if mark.run_id != delivered.run_id && session.is_turn_of(delivered.session_seq) =>
        {
            Ok(found
                .other(&mark.run_id)?
                .filter(|i| !i.status.is_terminal() && i.session_key == found.key))
        }
        _ => Ok(None),
    }
}

/// `run` was delivered ahead of an earlier, unfinished run of its session (a redelivery, a
/// queue that misbehaves): it runs nothing. What it does depends on the run whose turn it is.
fn behind_an_earlier_run(found: &Found, run: &Run) -> Result<Admission, ReadFirst> {
    let session = &found.session;
    let head = match session.open_runs.get(&session.runs_finished) {
        Some(head) if *head != run.run_id => found.other(head)?,
        _ => None,
    };
    Ok(match head {
        Some(head) if head.status == RunStatus::RequiresAction => {
            if may_resume(head) {
                Admission::BehindUnsent(message_of(head))
            } else {
                Admission::ParkedBehindPause
            }
        }
        Some(head) if head.unsent_at(found.now, found.unsent_after_ms) => {
            Admission::BehindUnsent(message_of(head))
        }
        _ => Admission::BehindEarlier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{
        ActionAnswer, InterruptMark, RecordedAnswer, RequiredAction, SessionId, TenantId,
        TurnRequest,
    };

    const NOW: u64 = 100_000;
    const UNSENT_AFTER: u64 = 5_000;

    fn run(id: &str, seq: u64, status: RunStatus) -> Run {
        Run {
            run_id: RunId::new(id),
            tenant: TenantId::new("acme"),
            session_key: SessionKey::new("s1"),
            session_id: SessionId::new("sid-1"),
            status,
            liveness_state: Default::default(),
            request: TurnRequest::default(),
            idempotency_key: None,
            accepted_at: NOW - 60_000,
            started_at: None,
            ended_at: None,
            model: None,
            attempts: Vec::new(),
            usage: Default::default(),
            cost_usd: None,
            payloads: Vec::new(),
            error: None,
            abort_requested: false,
            abort_reason: None,
            pickups: u32::from(status != RunStatus::Queued),
            hand_backs: 0,
            checkpoint: None,
            session_seq: seq,
            request_fingerprint: None,
            queue_outcome: Default::default(),
            into_run_id: None,
            out_of_turn: false,
            warnings: Vec::new(),
            required_action: None,
            paused_ms: 0,
            action_answer: None,
        }
    }

    fn paused(id: &str, seq: u64, answered: bool) -> Run {
        let mut run = run(id, seq, RunStatus::RequiresAction);
        run.required_action = Some(RequiredAction {
            id: 1,
            tool_calls: Vec::new(),
            paused_at: NOW - 500,
            expires_at: NOW + 60_000,
            resumed: false,
            event_seq: None,
        });
        if answered {
            run.action_answer = Some(RecordedAnswer {
                action_id: 1,
                answer: ActionAnswer::default(),
                answered_at: NOW - 100,
                expired: false,
            });
        }
        run
    }

    /// A session of key `s1` with `finished` runs finished and the runs `open` accepted.
    fn session(finished: u64, open: &[&str]) -> Session {
        let mut s = Session::new(
            TenantId::new("acme"),
            SessionKey::new("s1"),
            SessionId::new("sid-1"),
            0,
        );
        s.runs_accepted = open.len() as u64;
        s.runs_finished = finished;
        for (seq, id) in open.iter().enumerate() {
            s.open_runs.insert(seq as u64, RunId::new(*id));
        }
        s
    }

    fn found(session: Session, delivered: Option<Run>, others: Vec<Run>) -> Found {
        Found {
            key: SessionKey::new("s1"),
            session,
            run: delivered,
            others: others
                .into_iter()
                .map(|r| (r.run_id.clone(), Some(r)))
                .collect(),
            now: NOW,
            unsent_after_ms: UNSENT_AFTER,
        }
    }

    fn go(run: &str, how: How, in_place_of: Option<&str>, out_of_turn: bool) -> Admission {
        Admission::Go(Go {
            run: RunId::new(run),
            how,
            in_place_of: in_place_of.map(RunId::new),
            out_of_turn,
        })
    }

    fn turn() -> How {
        How::Turn { then: None }
    }

    fn msg(id: &str) -> TurnMessage {
        TurnMessage {
            tenant: TenantId::new("acme"),
            run_id: RunId::new(id),
            session_key: Some(SessionKey::new("s1")),
            accepted: None,
        }
    }

    fn with<T>(mut t: T, f: impl FnOnce(&mut T)) -> T {
        f(&mut t);
        t
    }

    /// An interrupt `i` (seq 2) accepted while `a` (seq 0) ran, `b` (seq 1) queued between
    /// them; `a` has ended.
    fn interrupted() -> Session {
        with(session(1, &["a", "b", "i"]), |s| {
            s.interrupt = Some(InterruptMark {
                run_id: RunId::new("i"),
                session_seq: 2,
                after: 0,
            })
        })
    }

    type Case = (&'static str, Found, Admission);

    fn check(cases: Vec<Case>) {
        for (name, found, want) in cases {
            assert_eq!(admit(&found), Ok(want), "{name}");
        }
    }

    #[test]
    fn only_a_fresh_run_in_its_turn_goes_from_its_accepted_record() {
        use RunStatus as S;
        let fresh = run("a", 0, S::Queued);
        let freshness: Vec<(&str, Run, TurnMessage, bool)> = vec![
            ("queued, never picked up", fresh.clone(), msg("a"), true),
            ("another run's record", fresh.clone(), msg("b"), false),
            (
                "a message without the session key",
                fresh.clone(),
                with(msg("a"), |m| m.session_key = None),
                false,
            ),
            (
                "picked up before",
                with(fresh.clone(), |r| r.pickups = 1),
                msg("a"),
                false,
            ),
            ("running", run("a", 0, S::Running), msg("a"), false),
            ("ended", run("a", 0, S::Ok), msg("a"), false),
            ("paused", paused("a", 0, true), msg("a"), false),
            (
                "abort requested",
                with(fresh.clone(), |r| r.abort_requested = true),
                msg("a"),
                false,
            ),
            (
                "steered into another run",
                with(fresh.clone(), |r| r.into_run_id = Some(RunId::new("x"))),
                msg("a"),
                false,
            ),
        ];
        for (name, run, message, want) in freshness {
            assert_eq!(is_fresh_for(&run, &message), want, "{name}");
        }
        let next = msg("b");
        let plain: Vec<(&str, Admission, bool)> = vec![
            ("its own turn, in order", go("a", turn(), None, false), true),
            ("another run goes", go("b", turn(), None, false), false),
            (
                "an interrupt in its place",
                go("i", turn(), Some("a"), true),
                false,
            ),
            ("out of turn", go("a", turn(), None, true), false),
            (
                "a parked run is sent after it",
                go("a", How::Turn { then: Some(next) }, None, false),
                false,
            ),
            (
                "it ends as reset",
                go("a", How::EndReset, None, false),
                false,
            ),
            ("not its turn", Admission::BehindEarlier, false),
            ("already done", Admission::AlreadyDone, false),
        ];
        for (name, admission, want) in plain {
            assert_eq!(
                goes_as_accepted(&admission, &RunId::new("a")),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_run_in_its_turn_goes_and_a_finished_one_never_runs_twice() {
        use RunStatus as S;
        check(vec![
            (
                "a queued run in its turn goes",
                found(session(0, &["a"]), Some(run("a", 0, S::Queued)), vec![]),
                go("a", turn(), None, false),
            ),
            (
                "a run a dead pickup left running resumes",
                found(session(0, &["a"]), Some(run("a", 0, S::Running)), vec![]),
                go("a", turn(), None, false),
            ),
            (
                "an unknown run is done with",
                found(session(0, &[]), None, vec![]),
                Admission::AlreadyDone,
            ),
            (
                "a run of another session key is done with",
                found(
                    session(0, &["a"]),
                    Some(with(run("a", 0, S::Queued), |r| {
                        r.session_key = SessionKey::new("other")
                    })),
                    vec![],
                ),
                Admission::AlreadyDone,
            ),
            (
                "a redelivered finished run is done with",
                found(session(1, &["a"]), Some(run("a", 0, S::Ok)), vec![]),
                Admission::AlreadyDone,
            ),
            (
                "a redelivered aborted run is done with",
                found(session(1, &["a"]), Some(run("a", 0, S::Aborted)), vec![]),
                Admission::AlreadyDone,
            ),
            (
                "an interrupt that ran ahead is counted when its turn comes",
                found(
                    session(2, &["a", "b", "i"]),
                    Some(with(run("i", 2, S::Ok), |r| r.out_of_turn = true)),
                    vec![],
                ),
                Admission::CountOutOfTurn,
            ),
            (
                "an interrupt that ran ahead is not counted before its turn",
                found(
                    session(1, &["a", "b", "i"]),
                    Some(with(run("i", 2, S::Ok), |r| r.out_of_turn = true)),
                    vec![],
                ),
                Admission::AlreadyDone,
            ),
        ]);
    }

    #[test]
    fn an_interrupt_goes_ahead_of_the_runs_queued_before_it() {
        use RunStatus as S;
        check(vec![
            (
                "the next run's delivery runs the interrupt in its place",
                found(
                    interrupted(),
                    Some(run("b", 1, S::Queued)),
                    vec![run("i", 2, S::Queued)],
                ),
                go("i", turn(), Some("b"), true),
            ),
            (
                "the interrupt's own delivery runs it",
                found(interrupted(), Some(run("i", 2, S::Queued)), vec![]),
                go("i", turn(), None, true),
            ),
            (
                "once the interrupt ended, the held run goes",
                found(
                    interrupted(),
                    Some(run("b", 1, S::Queued)),
                    vec![with(run("i", 2, S::Ok), |r| r.out_of_turn = true)],
                ),
                go("b", turn(), None, false),
            ),
            (
                "an interrupt that paused with no answer sends the held run back later",
                found(
                    interrupted(),
                    Some(run("b", 1, S::Queued)),
                    vec![paused("i", 2, false)],
                ),
                Admission::BehindPausedInterrupt(RunId::new("i")),
            ),
            (
                "an answered interrupt resumes in the held run's place",
                found(
                    interrupted(),
                    Some(run("b", 1, S::Queued)),
                    vec![paused("i", 2, true)],
                ),
                go("i", turn(), Some("b"), true),
            ),
            (
                "a later run waits behind the held run",
                found(
                    with(interrupted(), |s| {
                        s.open_runs.insert(3, RunId::new("c"));
                    }),
                    Some(run("c", 3, S::Queued)),
                    vec![with(run("b", 1, S::Queued), |r| r.accepted_at = NOW - 100)],
                ),
                Admission::BehindEarlier,
            ),
        ]);
    }

    #[test]
    fn an_interrupt_that_started_ahead_and_did_not_end_goes_before_any_other_run() {
        use RunStatus as S;
        // `i` went ahead of `b` and died (or paused); a second interrupt `j` (seq 3) took over
        // the mark, after the same run `a`
        let taken_over = with(session(1, &["a", "b", "i", "j"]), |s| {
            s.active_run_id = Some(RunId::new("i"));
            s.interrupt = Some(InterruptMark {
                run_id: RunId::new("j"),
                session_seq: 3,
                after: 0,
            })
        });
        let died = || with(run("i", 2, S::Running), |r| r.out_of_turn = true);
        check(vec![
            (
                "the held run's delivery resumes it in its place",
                found(
                    taken_over.clone(),
                    Some(run("b", 1, S::Queued)),
                    vec![died(), run("j", 3, S::Queued)],
                ),
                go("i", turn(), Some("b"), true),
            ),
            (
                "its own delivery resumes it",
                found(taken_over.clone(), Some(died()), vec![]),
                go("i", turn(), None, true),
            ),
            (
                "the later interrupt's delivery resumes it in its place",
                found(
                    taken_over.clone(),
                    Some(run("j", 3, S::Queued)),
                    vec![died()],
                ),
                go("i", turn(), Some("j"), true),
            ),
            (
                "paused with no answer: the held run comes back later",
                found(
                    taken_over.clone(),
                    Some(run("b", 1, S::Queued)),
                    vec![paused("i", 2, false)],
                ),
                Admission::BehindPausedInterrupt(RunId::new("i")),
            ),
            (
                "once it ended (the session no longer names it), the later interrupt goes",
                found(
                    with(taken_over.clone(), |s| s.active_run_id = None),
                    Some(run("b", 1, S::Queued)),
                    vec![run("j", 3, S::Queued)],
                ),
                go("j", turn(), Some("b"), true),
            ),
            (
                "an active run in its turn is left to the order rule",
                found(
                    with(session(0, &["a", "b"]), |s| {
                        s.active_run_id = Some(RunId::new("a"))
                    }),
                    Some(run("b", 1, S::Queued)),
                    vec![with(run("a", 0, S::Running), |r| r.accepted_at = NOW - 100)],
                ),
                Admission::BehindEarlier,
            ),
        ]);
    }

    #[test]
    fn a_run_delivered_ahead_of_an_earlier_one_runs_nothing() {
        use RunStatus as S;
        let fresh = |id, seq, status| with(run(id, seq, status), |r| r.accepted_at = NOW - 100);
        check(vec![
            (
                "behind a queued run just accepted: hand back",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![fresh("a", 0, S::Queued)],
                ),
                Admission::BehindEarlier,
            ),
            (
                "behind a running run: hand back",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![run("a", 0, S::Running)],
                ),
                Admission::BehindEarlier,
            ),
            (
                "behind a run never picked up long after its accept: send it again",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![with(run("a", 0, S::Queued), |r| {
                        r.accepted_at = NOW - UNSENT_AFTER
                    })],
                ),
                Admission::BehindUnsent(msg("a")),
            ),
            (
                "behind a paused run: parked",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![paused("a", 0, false)],
                ),
                Admission::ParkedBehindPause,
            ),
            (
                "behind an answered paused run: its message is sent again",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![paused("a", 0, true)],
                ),
                Admission::BehindUnsent(msg("a")),
            ),
            (
                "behind a run not on record: hand back",
                found(session(0, &[]), Some(run("b", 1, S::Queued)), vec![]),
                Admission::BehindEarlier,
            ),
        ]);
    }

    #[test]
    fn carried_reset_and_paused_runs() {
        use RunStatus as S;
        let carried = with(run("b", 1, S::Queued), |r| {
            r.into_run_id = Some(RunId::new("a"))
        });
        let reset_barrier = |until| {
            with(session(1, &["a", "b"]), |s| {
                s.reset_barrier = 2;
                s.reset_barrier_until = until;
            })
        };
        let parked_next = session(0, &["a", "b"]);
        check(vec![
            (
                "a run steered into an ended one ends as it did",
                found(
                    session(1, &["a", "b"]),
                    Some(carried.clone()),
                    vec![run("a", 0, S::Ok)],
                ),
                go(
                    "b",
                    How::EndCarried {
                        carrier: RunId::new("a"),
                    },
                    None,
                    false,
                ),
            ),
            (
                "a run steered into an unfinished one comes back later",
                found(
                    session(1, &["a", "b"]),
                    Some(carried),
                    vec![run("a", 0, S::Running)],
                ),
                Admission::CarrierUnfinished,
            ),
            (
                "a reset waiting for the lock holds an unstarted run",
                found(reset_barrier(NOW), Some(run("b", 1, S::Queued)), vec![]),
                Admission::HeldForReset,
            ),
            (
                "a reset that gave up holds nothing",
                found(reset_barrier(NOW - 1), Some(run("b", 1, S::Queued)), vec![]),
                go("b", turn(), None, false),
            ),
            (
                "a run accepted before a reset ends aborted",
                found(
                    with(session(1, &["a", "b"]), |s| {
                        s.session_id = SessionId::new("sid-2")
                    }),
                    Some(run("b", 1, S::Queued)),
                    vec![],
                ),
                go("b", How::EndReset, None, false),
            ),
            (
                "a paused run delivered again with no answer stays paused",
                found(session(0, &["a"]), Some(paused("a", 0, false)), vec![]),
                Admission::StillPaused,
            ),
            (
                "an answered paused run resumes, and sends the next run again at its end",
                found(parked_next, Some(paused("a", 0, true)), vec![]),
                go(
                    "a",
                    How::Turn {
                        then: Some(msg("b")),
                    },
                    None,
                    false,
                ),
            ),
            (
                "an aborted paused run resumes to end",
                found(
                    session(0, &["a"]),
                    Some(with(paused("a", 0, false), |r| r.abort_requested = true)),
                    vec![],
                ),
                go("a", How::Turn { then: None }, None, false),
            ),
        ]);
    }

    #[test]
    fn the_rule_asks_for_each_run_it_needs_before_it_decides() {
        use RunStatus as S;
        let cases = [
            (
                "the interrupt going ahead",
                found(interrupted(), Some(run("b", 1, S::Queued)), vec![]),
                "i",
            ),
            (
                "the run whose turn it is",
                found(
                    session(0, &["a", "b"]),
                    Some(run("b", 1, S::Queued)),
                    vec![],
                ),
                "a",
            ),
            (
                "the carrier",
                found(
                    session(1, &["a", "b"]),
                    Some(with(run("b", 1, S::Queued), |r| {
                        r.into_run_id = Some(RunId::new("a"))
                    })),
                    vec![],
                ),
                "a",
            ),
        ];
        for (name, found, read) in cases {
            assert_eq!(admit(&found), Err(ReadFirst(RunId::new(read))), "{name}");
        }
    }

    #[test]
    fn take_moves_the_admitted_run_out_of_what_was_read() {
        let mut f = found(
            interrupted(),
            Some(run("b", 1, RunStatus::Queued)),
            vec![run("i", 2, RunStatus::Queued)],
        );
        assert_eq!(
            f.take(&RunId::new("i")).map(|r| r.run_id),
            Some(RunId::new("i"))
        );
        assert_eq!(
            f.take(&RunId::new("b")).map(|r| r.run_id),
            Some(RunId::new("b"))
        );
        assert_eq!(f.take(&RunId::new("b")), None);
    }
}
