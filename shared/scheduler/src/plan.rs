//! Pure decisions on a job's state: claim a due slot (fire or skip, collapsing missed slots),
//! record a run's end (backoff after failures, auto-disable, one-shot retries), and what to do
//! with a fire past its deadline. No I/O: the ticker reads, calls these, and writes the result
//! conditionally.

use crate::schedule::CompiledSchedule;
use agentlane_core::cron::{CronJob, JobRun, JobRunStatus};
use agentlane_core::{RunId, RunStatus};

/// Delay before the next fire after 1, 2, 3, 4 and ≥ 5 consecutive failures (reset on success).
pub const ERROR_BACKOFF_MS: [u64; 5] = [30_000, 60_000, 300_000, 900_000, 3_600_000];
/// Consecutive failures after which a job is disabled.
pub const AUTO_DISABLE_AFTER: u32 = 10;
/// Transient failures a one-shot job retries.
pub const ONE_SHOT_RETRIES: u32 = 3;
/// After a fire's deadline the scheduler asks the run to abort, and records `timeout` once this
/// much more has passed, whatever the run does (the bounded cleanup).
pub const TIMEOUT_CLEANUP_MS: u64 = 20_000;
/// With an explicit job timeout, a cloud model stream idle for this long is cut.
pub const EXPLICIT_TIMEOUT_IDLE_CAP_MS: u64 = 60_000;

/// The wait before the next fire after `consecutive_errors` failures in a row (0 = none).
pub fn error_backoff_ms(consecutive_errors: u32) -> u64 {
    match consecutive_errors {
        0 => 0,
        n => ERROR_BACKOFF_MS[(n as usize - 1).min(ERROR_BACKOFF_MS.len() - 1)],
    }
}

/// Failure codes a one-shot job retries (the model or network may do better later).
pub fn is_transient(code: &str) -> bool {
    [
        "rate_limit",
        "overloaded",
        "timeout",
        "network",
        "server",
        "unavailable",
    ]
    .iter()
    .any(|t| code.contains(t))
}

/// What claiming a due slot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcome {
    /// A run is to be fired (the entry is in `lastRuns`, status `queued`).
    Fired(JobRun),
    /// The previous fire still runs: the slot is recorded `skipped`.
    Skipped,
    /// The tenant's fire budget was spent: the slot is recorded `skipped`, saying why.
    OverBudget,
}

/// Whether the tenant's fire budget has room for a fire now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// A fire fits.
    Free,
    /// The budget (fires per minute) is spent.
    Spent(u32),
}

/// Claims the job's slot if it is due at `now` with room in the tenant's fire budget (see
/// [`claim_slot_within`]).
pub fn claim_slot(
    job: &CronJob,
    schedule: &CompiledSchedule,
    now: u64,
    run_id: RunId,
) -> Option<(CronJob, SlotOutcome)> {
    claim_slot_within(job, schedule, now, run_id, Room::Free)
}

/// Claims the job's slot if it is due at `now`: the job's new state and what happened, or
/// `None` when nothing is due. Missed slots collapse: the next slot is the first one after
/// `now`, so a job that missed many slots (downtime, a slow ticker) fires once, then goes on.
/// A slot due while the previous fire runs, or while the tenant's fire budget is spent
/// (`room`), is recorded `skipped`; a one-shot waits instead (it never loses its only slot).
pub fn claim_slot_within(
    job: &CronJob,
    schedule: &CompiledSchedule,
    now: u64,
    run_id: RunId,
    room: Room,
) -> Option<(CronJob, SlotOutcome)> {
    let due = job.next_run_at.filter(|d| job.enabled && *d <= now)?;
    let busy = job.in_flight().next().is_some();
    let skip = match (busy, room) {
        (true, _) => Some((
            SlotOutcome::Skipped,
            "the previous run was still in progress".to_owned(),
        )),
        (false, Room::Spent(n)) => Some((
            SlotOutcome::OverBudget,
            format!("the tenant's cron fire budget ({n} per minute) was spent"),
        )),
        (false, Room::Free) => None,
    };
    if skip.is_some() && job.schedule.is_one_shot() {
        return None;
    }
    let mut next = job.clone();
    let outcome = if let Some((outcome, why)) = skip {
        next.push_run(JobRun {
            run_id: None,
            session_key: None,
            status: JobRunStatus::Skipped,
            fired_at: now,
            due_at: due,
            started_at: None,
            ended_at: None,
            error: Some(why),
            manual: false,
            abort_requested_at: None,
        });
        outcome
    } else {
        let entry = fire_entry(job, run_id, now, due, false);
        next.push_run(entry.clone());
        SlotOutcome::Fired(entry)
    };
    if job.schedule.is_one_shot() {
        next.enabled = false;
        next.next_run_at = None;
    } else {
        next.next_run_at = schedule.next_after(job.anchor_at, now);
    }
    next.updated_at = now;
    Some((next, outcome))
}

/// A manual fire (`POST …/run`): listed at once, the schedule unchanged.
pub fn manual_fire(job: &CronJob, now: u64, run_id: RunId) -> (CronJob, JobRun) {
    let entry = fire_entry(job, run_id, now, now, true);
    let mut next = job.clone();
    next.push_run(entry.clone());
    next.updated_at = now;
    (next, entry)
}

fn fire_entry(job: &CronJob, run_id: RunId, now: u64, due: u64, manual: bool) -> JobRun {
    JobRun {
        session_key: Some(job.job_id.session_key(&run_id)),
        run_id: Some(run_id),
        status: JobRunStatus::Queued,
        fired_at: now,
        due_at: due,
        started_at: None,
        ended_at: None,
        error: None,
        manual,
        abort_requested_at: None,
    }
}

/// How a fired run ended (or where it is), as the scheduler learned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunProgress {
    /// Where the fired run is (queued, running, paused) or how it ended.
    pub status: JobRunStatus,
    /// When a runner started the run, ms since the epoch; `None` while queued.
    pub started_at: Option<u64>,
    /// When the run reached a terminal status, ms since the epoch; `None` until then.
    pub ended_at: Option<u64>,
    /// `(code, message)` of a failed run.
    pub error: Option<(String, String)>,
}

impl RunProgress {
    /// The progress a run record shows.
    pub fn of_run(run: &agentlane_core::Run) -> Self {
        let status = match run.status {
            RunStatus::Queued => JobRunStatus::Queued,
            RunStatus::Running => JobRunStatus::Running,
            RunStatus::RequiresAction => JobRunStatus::RequiresAction,
            RunStatus::Ok => JobRunStatus::Ok,
            RunStatus::Error => JobRunStatus::Error,
            RunStatus::Aborted => JobRunStatus::Aborted,
            RunStatus::Timeout => JobRunStatus::Timeout,
        };
        RunProgress {
            status,
            started_at: run.started_at,
            ended_at: run.ended_at,
            error: run
                .error
                .as_ref()
                .map(|e| (e.code.clone(), e.message.clone())),
        }
    }
}

/// What recording an end asks the ticker to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndEffects {
    /// The entry reached a final status now.
    pub ended: bool,
    /// A one-shot with `deleteAfterRun` succeeded: delete the job.
    pub delete_job: bool,
}

/// Applies `progress` to the entry of `run_id`. Final entries never change again. A final
/// status updates the failure count: success resets it; an error or timeout of a scheduled fire
/// adds one, pushes the next fire back by the backoff, and disables the job after
/// [`AUTO_DISABLE_AFTER`]; a one-shot retries a transient failure up to [`ONE_SHOT_RETRIES`]
/// times. Manual runs and aborts leave the count alone.
pub fn record_progress(
    job: &mut CronJob,
    run_id: &RunId,
    progress: &RunProgress,
    now: u64,
) -> EndEffects {
    let Some(entry) = job
        .last_runs
        .iter_mut()
        .find(|r| r.run_id.as_ref() == Some(run_id))
    else {
        return EndEffects::default();
    };
    if entry.status.is_final() {
        return EndEffects::default();
    }
    let before = entry.clone();
    entry.status = progress.status;
    entry.started_at = progress.started_at.or(entry.started_at);
    entry.ended_at = progress.ended_at.or(entry.ended_at);
    if let Some((code, message)) = &progress.error {
        entry.error = Some(format!("{code}: {message}"));
    }
    let manual = entry.manual;
    let changed = *entry != before;
    if changed {
        job.updated_at = now;
    }
    if !progress.status.is_final() {
        return EndEffects::default();
    }
    let ended_at = progress.ended_at.unwrap_or(now);
    let mut effects = EndEffects {
        ended: true,
        delete_job: false,
    };
    if manual {
        return effects;
    }
    match progress.status {
        JobRunStatus::Ok => {
            job.consecutive_errors = 0;
            if job.schedule.is_one_shot() && job.delete_after_run {
                effects.delete_job = true;
            }
        }
        JobRunStatus::Error | JobRunStatus::Timeout => {
            job.consecutive_errors += 1;
            let code = progress
                .error
                .as_ref()
                .map_or("timeout", |(code, _)| code.as_str());
            if job.consecutive_errors >= AUTO_DISABLE_AFTER {
                job.enabled = false;
                job.next_run_at = None;
                job.disabled_reason = Some(format!(
                    "disabled after {} consecutive failures (last: {code})",
                    job.consecutive_errors
                ));
            } else if job.schedule.is_one_shot() {
                let retry = is_transient(code) || progress.status == JobRunStatus::Timeout;
                if retry && job.consecutive_errors <= ONE_SHOT_RETRIES {
                    job.enabled = true;
                    job.next_run_at = Some(ended_at + error_backoff_ms(job.consecutive_errors));
                } else {
                    job.disabled_reason = Some(format!("the one-shot run failed ({code})"));
                }
            } else if let Some(next) = job.next_run_at {
                let backoff = ended_at + error_backoff_ms(job.consecutive_errors);
                job.next_run_at = Some(next.max(backoff));
            }
        }
        JobRunStatus::Aborted
        | JobRunStatus::Skipped
        | JobRunStatus::Queued
        | JobRunStatus::Running
        | JobRunStatus::RequiresAction => {}
    }
    effects
}

/// What a fire past its deadline needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// Within its time (or no timeout).
    No,
    /// The deadline passed: ask the run to abort (once).
    RequestAbort,
    /// The cleanup time passed too: record `timeout`.
    RecordTimeout,
}

/// Where an in-flight `entry` of `job` stands against its deadline (fire + timeout) at `now`.
pub fn overdue(job: &CronJob, entry: &JobRun, now: u64) -> Overdue {
    let Some(timeout) = job.effective_timeout_seconds() else {
        return Overdue::No;
    };
    if entry.status.is_final() {
        return Overdue::No;
    }
    let deadline = entry.fired_at.saturating_add(timeout.saturating_mul(1000));
    // A paused fire is not asked to abort: its pause expires at the deadline and the resumed
    // run ends `timeout` itself (an abort would end it `aborted` instead).
    let paused = entry.status == JobRunStatus::RequiresAction;
    if now >= deadline.saturating_add(TIMEOUT_CLEANUP_MS) {
        Overdue::RecordTimeout
    } else if now >= deadline && entry.abort_requested_at.is_none() && !paused {
        Overdue::RequestAbort
    } else {
        Overdue::No
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::TenantId;
    use agentlane_core::cron::{JobId, Schedule};

    fn job(schedule: Schedule, next: Option<u64>) -> CronJob {
        CronJob {
            tenant: TenantId::new("t"),
            job_id: JobId::new("job_1"),
            name: "n".into(),
            schedule,
            message: "m".into(),
            model: None,
            timeout_seconds: None,
            agent_id: None,
            budget: None,
            enabled: true,
            delete_after_run: false,
            delivery: None,
            next_run_at: next,
            last_runs: Vec::new(),
            consecutive_errors: 0,
            disabled_reason: None,
            created_at: 0,
            updated_at: 0,
            anchor_at: 0,
            version: 1,
        }
    }

    fn every(secs: u64) -> (Schedule, CompiledSchedule) {
        let s = Schedule::Every {
            every_seconds: secs,
        };
        let c = CompiledSchedule::compile(&s).unwrap();
        (s, c)
    }

    fn ended(status: JobRunStatus, code: Option<&str>, at: u64) -> RunProgress {
        RunProgress {
            status,
            started_at: Some(at - 10),
            ended_at: Some(at),
            error: code.map(|c| (c.to_owned(), "boom".to_owned())),
        }
    }

    #[test]
    fn backoff_grows_then_caps() {
        let table = [
            (0, 0),
            (1, 30_000),
            (2, 60_000),
            (3, 300_000),
            (4, 900_000),
            (5, 3_600_000),
            (9, 3_600_000),
        ];
        for (errors, delay) in table {
            assert_eq!(error_backoff_ms(errors), delay, "{errors} errors");
        }
    }

    #[test]
    fn missed_slots_collapse_into_one_catch_up_fire() {
        // (due, now, expected next) for a 10 s interval anchored at 0
        let cases = [
            (10_000, 10_000, 20_000),
            (10_000, 10_400, 20_000),
            // three slots missed (downtime): one fire now, then the next slot after now
            (10_000, 43_000, 50_000),
            (10_000, 3_600_005, 3_610_000),
        ];
        for (due, now, expected) in cases {
            let (s, c) = every(10);
            let j = job(s, Some(due));
            let (next, outcome) = claim_slot(&j, &c, now, RunId::new("run_a")).unwrap();
            assert!(matches!(outcome, SlotOutcome::Fired(_)), "{due} {now}");
            assert_eq!(next.next_run_at, Some(expected), "{due} {now}");
            assert_eq!(next.last_runs.len(), 1, "one fire, not a burst");
            assert_eq!(next.last_runs[0].due_at, due);
            // claiming again at the same time finds nothing due
            assert!(claim_slot(&next, &c, now, RunId::new("run_b")).is_none());
        }
    }

    #[test]
    fn a_fire_names_its_fresh_session_and_is_listed_queued() {
        let (s, c) = every(10);
        let (next, outcome) =
            claim_slot(&job(s, Some(10_000)), &c, 10_001, RunId::new("run_a")).unwrap();
        let SlotOutcome::Fired(entry) = outcome else {
            panic!("fired")
        };
        assert_eq!(entry.session_key.unwrap().as_str(), "cron:job_1:run_a");
        assert_eq!(entry.status, JobRunStatus::Queued);
        assert_eq!(next.last_runs[0].run_id, Some(RunId::new("run_a")));
    }

    #[test]
    fn not_due_disabled_or_busy() {
        let (s, c) = every(10);
        let j = job(s.clone(), Some(10_000));
        assert!(
            claim_slot(&j, &c, 9_999, RunId::new("r")).is_none(),
            "not yet"
        );
        let mut off = j.clone();
        off.enabled = false;
        assert!(
            claim_slot(&off, &c, 10_000, RunId::new("r")).is_none(),
            "disabled"
        );
        // busy: the slot is skipped, and the schedule goes on
        let (busy, _) = claim_slot(&j, &c, 10_000, RunId::new("r1")).unwrap();
        let (after, outcome) = claim_slot(&busy, &c, 20_000, RunId::new("r2")).unwrap();
        assert_eq!(outcome, SlotOutcome::Skipped);
        assert_eq!(after.last_runs[0].status, JobRunStatus::Skipped);
        assert_eq!(after.last_runs[0].run_id, None);
        assert_eq!(after.next_run_at, Some(30_000));
    }

    /// (job, schedule, now, room, outcome (None = nothing claimed), error of the entry)
    type Case<'a> = (
        &'a CronJob,
        &'a CompiledSchedule,
        u64,
        Room,
        Option<SlotOutcome>,
        &'a str,
    );

    #[test]
    fn a_spent_fire_budget_skips_the_slot_and_a_one_shot_waits() {
        let (s, c) = every(10);
        let idle = job(s, Some(10_000));
        let (busy, _) = claim_slot(&idle, &c, 10_000, RunId::new("r1")).unwrap();
        let at = Schedule::At {
            at: "2030-01-01T00:00:00Z".into(),
        };
        let shot_at = 1_893_456_000_000;
        let shot = job(at.clone(), Some(shot_at));
        let shot_c = CompiledSchedule::compile(&at).unwrap();
        let cases: Vec<Case> = vec![
            (
                &idle,
                &c,
                10_000,
                Room::Spent(60),
                Some(SlotOutcome::OverBudget),
                "budget (60 per minute)",
            ),
            (
                &busy,
                &c,
                20_000,
                Room::Spent(60),
                Some(SlotOutcome::Skipped),
                "still in progress",
            ),
            (
                &busy,
                &c,
                20_000,
                Room::Free,
                Some(SlotOutcome::Skipped),
                "still in progress",
            ),
            (&shot, &shot_c, shot_at, Room::Spent(5), None, ""),
            (&idle, &c, 9_000, Room::Spent(5), None, ""),
        ];
        for (j, sched, now, room, want, why) in cases {
            let got = claim_slot_within(j, sched, now, RunId::new("r2"), room);
            match (got, want) {
                (None, None) => {}
                (Some((next, outcome)), Some(want)) => {
                    assert_eq!(outcome, want, "{now} {room:?}");
                    let entry = &next.last_runs[0];
                    assert_eq!(
                        (entry.status, entry.run_id.clone()),
                        (JobRunStatus::Skipped, None)
                    );
                    assert!(entry.error.as_deref().unwrap().contains(why), "{entry:?}");
                    // the schedule goes on
                    assert_eq!(next.next_run_at, Some(now + 10_000));
                }
                (got, want) => panic!("{now} {room:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn one_shots_fire_once_and_are_disabled() {
        let s = Schedule::At {
            at: "2030-01-01T00:00:00Z".into(),
        };
        let c = CompiledSchedule::compile(&s).unwrap();
        let at = 1_893_456_000_000;
        let (next, outcome) = claim_slot(&job(s, Some(at)), &c, at, RunId::new("r")).unwrap();
        assert!(matches!(outcome, SlotOutcome::Fired(_)));
        assert_eq!((next.enabled, next.next_run_at), (false, None));
    }

    #[test]
    fn failures_back_off_reset_on_success_and_disable_after_ten() {
        let (s, c) = every(10);
        let mut j = job(s, Some(10_000));
        for n in 1..=10u32 {
            let now = j.next_run_at.unwrap();
            let run = RunId::new(format!("r{n}"));
            let (next, _) = claim_slot(&j, &c, now, run.clone()).unwrap();
            j = next;
            let effects = record_progress(
                &mut j,
                &run,
                &ended(JobRunStatus::Error, Some("server"), now + 100),
                now + 100,
            );
            assert!(effects.ended);
            assert_eq!(j.consecutive_errors, n);
            if n < 10 {
                assert_eq!(
                    j.next_run_at,
                    Some(now + 100 + error_backoff_ms(n)),
                    "failure {n}"
                );
            }
        }
        assert!(!j.enabled);
        assert_eq!(j.next_run_at, None);
        assert!(
            j.disabled_reason
                .unwrap()
                .contains("10 consecutive failures")
        );

        let (s, c) = every(10);
        let mut j = job(s, Some(10_000));
        let (next, _) = claim_slot(&j, &c, 10_000, RunId::new("a")).unwrap();
        j = next;
        record_progress(
            &mut j,
            &RunId::new("a"),
            &ended(JobRunStatus::Error, Some("x"), 10_100),
            10_100,
        );
        let (next, _) = claim_slot(&j, &c, j.next_run_at.unwrap(), RunId::new("b")).unwrap();
        j = next;
        let ok = record_progress(
            &mut j,
            &RunId::new("b"),
            &ended(JobRunStatus::Ok, None, 50_000),
            50_000,
        );
        assert!(ok.ended);
        assert_eq!(j.consecutive_errors, 0, "success resets the count");
    }

    #[test]
    fn a_one_shot_retries_transient_failures_three_times() {
        let s = Schedule::At {
            at: "2030-01-01T00:00:00Z".into(),
        };
        let c = CompiledSchedule::compile(&s).unwrap();
        let mut j = job(s, Some(1_000));
        for n in 1..=4u32 {
            let now = j.next_run_at.unwrap();
            let run = RunId::new(format!("r{n}"));
            let (next, _) = claim_slot(&j, &c, now, run.clone()).unwrap();
            j = next;
            record_progress(
                &mut j,
                &run,
                &ended(JobRunStatus::Error, Some("rate_limit"), now + 1),
                now + 1,
            );
            if n <= 3 {
                assert!(j.enabled, "retry {n}");
                assert_eq!(j.next_run_at, Some(now + 1 + error_backoff_ms(n)));
            }
        }
        assert!(!j.enabled, "no fourth retry");
        assert!(j.disabled_reason.is_some());

        // a permanent failure is not retried
        let s = Schedule::At {
            at: "2030-01-01T00:00:00Z".into(),
        };
        let mut j = job(s, Some(1_000));
        let (next, _) = claim_slot(&j, &c, 1_000, RunId::new("p")).unwrap();
        j = next;
        record_progress(
            &mut j,
            &RunId::new("p"),
            &ended(JobRunStatus::Error, Some("auth"), 1_001),
            1_001,
        );
        assert!(!j.enabled);
    }

    #[test]
    fn delete_after_run_deletes_a_succeeded_one_shot() {
        let s = Schedule::At {
            at: "2030-01-01T00:00:00Z".into(),
        };
        let c = CompiledSchedule::compile(&s).unwrap();
        let mut j = job(s, Some(1_000));
        j.delete_after_run = true;
        let (mut j, _) = claim_slot(&j, &c, 1_000, RunId::new("r")).unwrap();
        let effects = record_progress(
            &mut j,
            &RunId::new("r"),
            &ended(JobRunStatus::Ok, None, 2_000),
            2_000,
        );
        assert!(effects.delete_job);
    }

    #[test]
    fn final_entries_never_change_and_progress_is_recorded() {
        let (s, c) = every(10);
        let (mut j, _) = claim_slot(&job(s, Some(10_000)), &c, 10_000, RunId::new("r")).unwrap();
        let running = RunProgress {
            status: JobRunStatus::Running,
            started_at: Some(10_050),
            ended_at: None,
            error: None,
        };
        assert!(!record_progress(&mut j, &RunId::new("r"), &running, 10_060).ended);
        assert_eq!(j.last_runs[0].status, JobRunStatus::Running);
        assert_eq!(j.last_runs[0].started_at, Some(10_050));
        assert!(
            record_progress(
                &mut j,
                &RunId::new("r"),
                &ended(JobRunStatus::Ok, None, 11_000),
                11_000
            )
            .ended
        );
        let again = record_progress(
            &mut j,
            &RunId::new("r"),
            &ended(JobRunStatus::Error, Some("x"), 12_000),
            12_000,
        );
        assert!(!again.ended);
        assert_eq!(j.last_runs[0].status, JobRunStatus::Ok);
    }

    #[test]
    fn overdue_fires_are_aborted_then_recorded_as_timeout() {
        let (s, c) = every(10);
        let mut j = job(s, Some(10_000));
        j.timeout_seconds = Some(5);
        let (j, _) = claim_slot(&j, &c, 10_000, RunId::new("r")).unwrap();
        let entry = j.last_runs[0].clone();
        // (now, expected)
        let cases = [
            (14_999, Overdue::No),
            (15_000, Overdue::RequestAbort),
            (34_999, Overdue::RequestAbort),
            (35_000, Overdue::RecordTimeout),
        ];
        for (now, expected) in cases {
            assert_eq!(overdue(&j, &entry, now), expected, "{now}");
        }
        let mut asked = entry.clone();
        asked.abort_requested_at = Some(15_000);
        assert_eq!(overdue(&j, &asked, 20_000), Overdue::No, "asked once");
        // A paused fire is left to its pause's expiry, then recorded as a timeout all the same.
        let mut paused = entry.clone();
        paused.status = JobRunStatus::RequiresAction;
        assert_eq!(overdue(&j, &paused, 15_000), Overdue::No, "paused");
        assert_eq!(overdue(&j, &paused, 35_000), Overdue::RecordTimeout);
        let mut no_timeout = j.clone();
        no_timeout.timeout_seconds = Some(0);
        assert_eq!(overdue(&no_timeout, &entry, 10_000_000), Overdue::No);
    }
}
