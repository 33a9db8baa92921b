//! The cron handler on a real EventBridge scheduled event, against DynamoDB + SQS FIFO on the
//! emulator (`AWS_ENDPOINT_URL`, default `http://127.0.0.1:4566`).

use crate::support::{Aws, FIXTURE, event, event_sent, fresh_aws, ticker};
use agentlane_core::cron::{CronJob, CronStore, JobId, JobRunStatus, Schedule};
use agentlane_core::{Clock, HistoryReader, LaneQueue, RunStatus, SystemClock, TenantId};
use agentlane_cron::{CronFunction, TickError};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

fn handler(aws: &Aws) -> CronFunction {
    CronFunction::new(ticker(aws), Arc::new(SystemClock))
}

fn every_second_job(tenant: &TenantId) -> CronJob {
    let now = SystemClock.now_ms();
    CronJob {
        tenant: tenant.clone(),
        job_id: JobId::generate(),
        name: "heartbeat".into(),
        schedule: Schedule::Every { every_seconds: 1 },
        message: "check in".into(),
        model: None,
        timeout_seconds: None,
        agent_id: None,
        budget: None,
        enabled: true,
        delete_after_run: false,
        delivery: None,
        next_run_at: Some(now + 1_000),
        last_runs: Vec::new(),
        consecutive_errors: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
        anchor_at: now,
        version: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduled_event_fires_the_jobs_due_within_its_minute_on_time() {
    // GIVEN a job due every second, and two overlapping invocations (an event sent 56 s ago, so
    // its minute ends in ~4 s, and the same event delivered twice)
    let aws = fresh_aws("cron").await;
    let tenant = TenantId::new("acme");
    let job = every_second_job(&tenant);
    aws.store.create_job(&job, 10).await.unwrap();
    let (first, second) = (handler(&aws), handler(&aws));
    let deadline = SystemClock.now_ms() + 120_000;
    let started = SystemClock.now_ms();

    // WHEN both handle the event
    let (a, b) = tokio::join!(
        first.handle(event_sent(Duration::from_secs(56)), Some(deadline)),
        second.handle(event_sent(Duration::from_secs(56)), Some(deadline)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let elapsed = SystemClock.now_ms() - started;

    // THEN they returned at the end of the event's minute, not after a full minute
    assert!(elapsed < 10_000, "took {elapsed} ms");
    assert!(a.ticks >= 2, "{a:?}");
    // AND between them they claimed each 1-second slot once: the first slot fired, and the
    // later ones were skipped because that fire is still queued (no runner here) — a job never
    // overlaps itself
    let fired: Vec<String> = a
        .fired_run_ids
        .iter()
        .chain(&b.fired_run_ids)
        .cloned()
        .collect();
    assert_eq!(a.jobs_fired + b.jobs_fired, 1, "{a:?} {b:?}");
    let skipped = a.slots_skipped + b.slots_skipped;
    assert!((1..=4).contains(&skipped), "{a:?} {b:?}");
    let stored = aws
        .store
        .get_job(&tenant, &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.last_runs.len() as u32,
        1 + skipped,
        "{:?}",
        stored.last_runs
    );
    let slots: HashSet<u64> = stored.last_runs.iter().map(|r| r.due_at).collect();
    assert_eq!(
        slots.len(),
        stored.last_runs.len(),
        "a slot claimed twice: {:?}",
        stored.last_runs
    );
    for entry in &stored.last_runs {
        // claimed within 1.5 s of its slot
        assert!(
            entry.fired_at >= entry.due_at && entry.fired_at - entry.due_at < 1_500,
            "{entry:?}"
        );
    }

    // AND the fire is a queued run in its own cron session, its deadline an hour from the fire
    let entry = stored.last_runs.last().unwrap();
    assert_eq!(entry.status, JobRunStatus::Queued);
    let run_id = entry.run_id.clone().unwrap();
    assert_eq!(fired, vec![run_id.to_string()]);
    let run = aws.store.get_run(&tenant, &run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    assert_eq!(
        run.session_key.as_str(),
        format!("cron:{}:{}", job.job_id, run_id)
    );
    assert_eq!(run.request.message, "check in");
    assert_eq!(run.request.deadline_at, Some(entry.fired_at + 3_600_000));

    // AND the fired run waits on its lane of the FIFO queue
    let mut queued = HashSet::new();
    for _ in 0..10 {
        let got = aws
            .queue
            .receive(10, Duration::from_secs(30), Duration::from_secs(1))
            .await
            .unwrap();
        for d in got {
            queued.insert(d.message.body.run_id.to_string());
        }
        if queued.len() >= fired.len() {
            break;
        }
    }
    assert_eq!(queued, fired.iter().cloned().collect::<HashSet<_>>());
}

#[tokio::test]
async fn another_event_is_refused() {
    let aws = fresh_aws("cron").await;
    let json = FIXTURE.replace("Scheduled Event", "Object Created");
    let err = handler(&aws).handle(event(&json), None).await.unwrap_err();
    assert_eq!(err, TickError::NotScheduled("Object Created".into()));
}

#[tokio::test]
async fn a_stale_event_ticks_once_and_returns() {
    // GIVEN the fixture's event, long past (a delayed delivery)
    let aws = fresh_aws("cron").await;
    let tenant = TenantId::new("acme");
    let mut job = every_second_job(&tenant);
    job.next_run_at = Some(SystemClock.now_ms() - 90_000);
    aws.store.create_job(&job, 10).await.unwrap();

    // WHEN it is handled
    let report = handler(&aws).handle(event(FIXTURE), None).await.unwrap();

    // THEN one tick fired the overdue job once (missed slots collapse), and it returned
    assert_eq!(report.scheduled_for, "2026-11-30T04:00:00+00:00");
    assert_eq!(report.ticks, 1);
    assert_eq!(report.jobs_fired, 1, "{report:?}");
    let stored = aws
        .store
        .get_job(&tenant, &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.last_runs.len(), 1);
    assert!(stored.next_run_at.unwrap() > SystemClock.now_ms() - 1_000);
}
