//! Steering and collecting (SPEC §4 `steer`, `collect`): a message accepted with `queueMode:
//! steer` while a run of its session is active is taken by that run at its next model boundary,
//! in one fenced write that appends it to the transcript and marks its own run `steered` into
//! the carrier. Messages accepted with `queueMode: collect` are taken the same way by the first
//! collect run whose turn comes (after a quiet window): their runs end `collected` into it. The
//! rules every adapter applies live here; the adapters only find the candidates and write.

use crate::ids::{RunId, SessionId};
use crate::run::{QueueMode, QueueOutcome, Run, RunStatus};
use crate::transcript::{Message, TranscriptEntry};

/// At most this many steer messages are taken in one write (the rest wait for the next
/// boundary, or run as followups).
pub const MAX_STEERS_PER_TAKE: usize = 20;

/// What the carrier asks for: the steer messages accepted after it on its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerTake {
    /// The running run that carries them.
    pub carrier: RunId,
    /// Its place in the session key's order: only runs numbered after it are taken.
    pub carrier_seq: u64,
    /// Its session id: a run accepted on another one (before a reset) is never taken.
    pub session_id: SessionId,
    /// The transcript seq the first taken message gets (the carrier's next entry).
    pub next_seq: u64,
    /// Now, ms since the epoch.
    pub now: u64,
    /// The mode of the messages taken: [`QueueMode::Steer`] or [`QueueMode::Collect`].
    pub mode: QueueMode,
}

impl SteerTake {
    /// Whether `run` (with the API's `abort_requested` as stored) is a message this carrier
    /// takes: accepted in the take's [`mode`](Self::mode) after the carrier on the same session
    /// id, never picked up, not taken yet, and not asked to abort.
    pub fn takes(&self, run: &Run) -> bool {
        run.request.queue_mode == Some(self.mode) && self.waits(run)
    }

    /// Whether the pending record of `run` (`None`: the run is gone) must stay after this take
    /// although it did not take it: a message of the other mode that a later take of that mode
    /// can still take. Every other pending record this take read is dropped.
    pub fn keeps(&self, run: Option<&Run>) -> bool {
        run.is_some_and(|run| {
            run.request.queue_mode != Some(self.mode)
                && matches!(
                    run.request.queue_mode,
                    Some(QueueMode::Steer | QueueMode::Collect)
                )
                && self.waits(run)
        })
    }

    /// Everything [`takes`](Self::takes) asks but the mode.
    fn waits(&self, run: &Run) -> bool {
        run.status == RunStatus::Queued
            && run.pickups == 0
            && run.queue_outcome == QueueOutcome::Ran
            && run.into_run_id.is_none()
            && !run.abort_requested
            && run.session_seq > self.carrier_seq
            && run.session_id == self.session_id
    }

    /// Whether a pending-steer record numbered `session_seq` can still be taken by this or a
    /// later carrier; older records are stale (their run ran, or was taken) and can be dropped.
    pub fn is_pending_after(&self, session_seq: u64) -> bool {
        session_seq > self.carrier_seq
    }

    /// `run` as taken: `steered` (or `collected`) into the carrier. Its status stays `queued`
    /// until its own message comes, after the carrier ended, and mirrors the carrier's end.
    pub fn mark(&self, run: &Run) -> Run {
        Run {
            queue_outcome: match self.mode {
                QueueMode::Collect => QueueOutcome::Collected,
                _ => QueueOutcome::Steered,
            },
            into_run_id: Some(self.carrier.clone()),
            ..run.clone()
        }
    }

    /// The transcript entry of the `index`-th taken message: the user's text, written by the
    /// carrier (its turn goes on after it).
    pub fn entry(&self, run: &Run, index: usize) -> TranscriptEntry {
        TranscriptEntry {
            seq: self.next_seq + index as u64,
            run_id: self.carrier.clone(),
            ts: self.now,
            message: Message::user(run.request.message.clone()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(seq: u64, mode: &str) -> Run {
        serde_json::from_value(serde_json::json!({
            "runId": format!("run_{seq}"), "tenant": "t", "sessionKey": "k", "sessionId": "s",
            "status": "queued", "livenessState": "working",
            "request": { "message": format!("m{seq}"), "queueMode": mode },
            "acceptedAt": 1, "sessionSeq": seq
        }))
        .unwrap()
    }

    fn take() -> SteerTake {
        SteerTake {
            carrier: RunId::new("run_0"),
            carrier_seq: 0,
            session_id: SessionId::new("s"),
            next_seq: 7,
            now: 9,
            mode: QueueMode::Steer,
        }
    }

    #[test]
    fn only_untouched_steers_after_the_carrier_on_its_session_are_taken() {
        let t = take();
        assert!(t.takes(&run(1, "steer")));
        assert!(!t.takes(&run(1, "followup")));
        assert!(!t.takes(&run(0, "steer")), "the carrier itself");
        let started = Run {
            pickups: 1,
            ..run(2, "steer")
        };
        assert!(!t.takes(&started));
        let aborted = Run {
            abort_requested: true,
            ..run(2, "steer")
        };
        assert!(!t.takes(&aborted));
        let other_session = Run {
            session_id: SessionId::new("old"),
            ..run(2, "steer")
        };
        assert!(!t.takes(&other_session));
        let taken = t.mark(&run(3, "steer"));
        assert!(!t.takes(&taken), "taken twice");
        assert_eq!(taken.queue_outcome, QueueOutcome::Steered);
        assert_eq!(taken.into_run_id, Some(RunId::new("run_0")));
        assert_eq!(taken.status, RunStatus::Queued);
    }

    #[test]
    fn a_take_takes_its_own_mode_and_keeps_the_others_pending_messages() {
        let steer = take();
        let collect = SteerTake {
            mode: QueueMode::Collect,
            ..take()
        };
        assert!(!steer.takes(&run(1, "collect")));
        assert!(steer.keeps(Some(&run(1, "collect"))));
        assert!(collect.takes(&run(1, "collect")));
        assert!(!collect.takes(&run(1, "steer")));
        assert!(collect.keeps(Some(&run(1, "steer"))));
        assert!(!collect.keeps(Some(&run(1, "collect"))), "taken, not kept");
        assert!(!collect.keeps(Some(&run(0, "steer"))), "stale");
        assert!(!collect.keeps(None));
        assert!(!collect.keeps(Some(&run(2, "followup"))));
        let marked = collect.mark(&run(1, "collect"));
        assert_eq!(marked.queue_outcome, QueueOutcome::Collected);
        assert_eq!(marked.into_run_id, Some(RunId::new("run_0")));
    }

    #[test]
    fn taken_messages_are_user_entries_of_the_carrier_from_its_next_seq() {
        let t = take();
        let entry = t.entry(&run(2, "steer"), 1);
        assert_eq!(entry.seq, 8);
        assert_eq!(entry.run_id, RunId::new("run_0"));
        assert_eq!(entry.message, Message::user("m2"));
        assert!(t.is_pending_after(1));
        assert!(!t.is_pending_after(0));
    }
}
