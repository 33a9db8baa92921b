//! The ticker over the SQLite backend with a hand-moved clock: fires, records ends, times out
//! overdue fires, heals a fire whose submit was lost, and delivers finished fires to a webhook.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_core::cron::{
    CronJob, CronStore, JobDelivery, JobId, JobRun, JobRunStatus, Schedule, WebhookTarget,
};
use agentlane_core::{
    Clock, Commit, FencedWriter, HistoryReader, LaneQueue, LockAttempt, Payload, RunId, RunStatus,
    SessionLock, TenantId,
};
use agentlane_scheduler::plan::SlotOutcome;
use agentlane_scheduler::{Ticker, TickerConfig, WebhookSender};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_tools::ssrf::SsrfPolicy;
use axum::Json;
use axum::http::HeaderMap;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;

/// What the webhook received: the Authorization header and the body.
type Received = (Option<String>, Value);

#[derive(Debug)]
struct ManualClock(AtomicU64);

impl ManualClock {
    fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct World {
    backend: SqliteBackend,
    clock: Arc<ManualClock>,
    ticker: Ticker,
    tenant: TenantId,
    _dir: tempfile::TempDir,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock(AtomicU64::new(T0)));
    let backend = SqliteBackend::open_with_clock(dir.path(), clock.clone()).unwrap();
    let mut sender = WebhookSender::new(SsrfPolicy {
        allow_hosts: vec!["127.0.0.1".into()],
        ..SsrfPolicy::default()
    });
    sender.first_backoff = Duration::from_millis(20);
    let ticker = Ticker::new(
        Arc::new(backend.clone()),
        Arc::new(backend.clone()),
        Arc::new(backend.clone()),
        clock.clone(),
        TickerConfig::default(),
        sender,
    );
    World {
        backend,
        clock,
        ticker,
        tenant: TenantId::new("acme"),
        _dir: dir,
    }
}

fn job(w: &World, schedule: Schedule, next: u64, timeout: Option<u64>) -> CronJob {
    CronJob {
        tenant: w.tenant.clone(),
        job_id: JobId::generate(),
        name: "j".into(),
        schedule,
        message: "hello".into(),
        model: None,
        timeout_seconds: timeout,
        agent_id: None,
        budget: None,
        enabled: true,
        delete_after_run: false,
        delivery: None,
        next_run_at: Some(next),
        last_runs: Vec::new(),
        consecutive_errors: 0,
        disabled_reason: None,
        created_at: T0,
        updated_at: T0,
        anchor_at: T0,
        version: 1,
    }
}

impl World {
    async fn stored(&self, job: &CronJob) -> CronJob {
        self.backend
            .get_job(&self.tenant, &job.job_id)
            .await
            .unwrap()
            .unwrap()
    }

    /// Plays the runner: the run ends with `status` and a payload.
    async fn end_run(&self, run_id: &RunId, status: RunStatus) {
        let mut run = self
            .backend
            .get_run(&self.tenant, run_id)
            .await
            .unwrap()
            .unwrap();
        let now = self.clock.now_ms();
        let LockAttempt::Acquired(fence, _) = self
            .backend
            .acquire_lock(&self.tenant, &run.session_key, "test", 30_000, now)
            .await
            .unwrap()
        else {
            panic!("lock held")
        };
        run.status = status;
        run.started_at = Some(now - 100);
        run.ended_at = Some(now);
        run.payloads = vec![Payload {
            text: "done".into(),
            is_error: false,
        }];
        self.backend
            .commit(
                &fence,
                Commit {
                    run: Some(run),
                    release_lock: true,
                    ..Commit::default()
                },
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_due_job_fires_and_its_end_is_recorded_on_the_next_tick() {
    // GIVEN a job every 10 s, due at T0 + 10 s
    let w = world();
    let j = job(&w, Schedule::Every { every_seconds: 10 }, T0 + 10_000, None);
    w.backend.create_job(&j, 10).await.unwrap();

    // WHEN the ticker runs before and at the slot
    assert!(w.ticker.tick().await.fired.is_empty(), "not due yet");
    w.clock.set(T0 + 10_200);
    let report = w.ticker.tick().await;

    // THEN one run fired: accepted on its cron session and on its lane
    assert_eq!(report.fired.len(), 1);
    let run_id = report.fired[0].clone();
    let run = w
        .backend
        .get_run(&w.tenant, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        run.session_key.as_str(),
        format!("cron:{}:{}", j.job_id, run_id)
    );
    assert_eq!(run.request.deadline_at, Some(T0 + 10_200 + 3_600_000));
    assert_eq!(
        run.request.model_idle_timeout_ms, None,
        "no explicit timeout, no stall cap"
    );
    let delivered = w
        .backend
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    let stored = w.stored(&j).await;
    assert_eq!(stored.next_run_at, Some(T0 + 20_000));
    assert_eq!(stored.last_runs[0].status, JobRunStatus::Queued);

    // WHEN the run ends ok and the ticker looks again (the job is watched while it runs)
    w.end_run(&run_id, RunStatus::Ok).await;
    w.clock.set(T0 + 11_000);
    let report = w.ticker.tick().await;

    // THEN the end is recorded, and nothing new fired
    assert_eq!((report.ended, report.fired.len()), (1, 0));
    let stored = w.stored(&j).await;
    assert_eq!(stored.last_runs[0].status, JobRunStatus::Ok);
    assert_eq!(stored.last_runs[0].ended_at, Some(T0 + 10_200));
    // AND with nothing in flight and nothing due, the job is not even read
    assert_eq!(w.backend.due_jobs(T0 + 11_000, 10).await.unwrap(), vec![]);

    // AND a day after its end the fire's session is gone; its run record stays
    assert!(
        w.backend
            .get_session(&w.tenant, &run.session_key)
            .await
            .unwrap()
            .is_some()
    );
    w.clock.set(T0 + 10_200 + 24 * 3_600_000 + 1);
    w.ticker.tick().await;
    assert!(
        w.backend
            .get_session(&w.tenant, &run.session_key)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        w.backend
            .get_run(&w.tenant, &run_id)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn an_overdue_fire_is_aborted_then_recorded_timeout_after_the_cleanup() {
    // GIVEN a job with a 5 s timeout that fired at T0, and a run that never ends
    let w = world();
    let j = job(
        &w,
        Schedule::Every {
            every_seconds: 3600,
        },
        T0,
        Some(5),
    );
    w.backend.create_job(&j, 10).await.unwrap();
    let run_id = w.ticker.tick().await.fired[0].clone();
    let run = w
        .backend
        .get_run(&w.tenant, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.request.deadline_at, Some(T0 + 5_000));
    assert_eq!(run.request.model_idle_timeout_ms, Some(60_000));

    // WHEN the deadline passes THEN the run is asked to abort, once
    w.clock.set(T0 + 5_000);
    w.ticker.tick().await;
    assert!(w.backend.abort_requested(&w.tenant, &run_id).await.unwrap());
    assert_eq!(w.stored(&j).await.last_runs[0].status, JobRunStatus::Queued);

    // WHEN the 20 s cleanup passes too THEN the job records `timeout` and counts a failure
    w.clock.set(T0 + 25_000);
    let report = w.ticker.tick().await;
    assert_eq!(report.timed_out, 1);
    let stored = w.stored(&j).await;
    assert_eq!(stored.last_runs[0].status, JobRunStatus::Timeout);
    assert_eq!(stored.consecutive_errors, 1);
    // AND the next fire is held back by the 30 s backoff (the natural next is an hour away)
    assert_eq!(stored.next_run_at, Some(T0 + 3_600_000));
}

/// An hourly job due at T0 whose slot was claimed (fire `run_id` listed `queued`) and nothing
/// more: the job as written, and the fire.
async fn claimed_fire(w: &World, run_id: &str) -> (CronJob, JobRun) {
    let every = Schedule::Every {
        every_seconds: 3600,
    };
    let j = job(w, every, T0, None);
    w.backend.create_job(&j, 10).await.unwrap();
    let schedule = agentlane_scheduler::CompiledSchedule::compile(&j.schedule).unwrap();
    let (mut claimed, outcome) =
        agentlane_scheduler::plan::claim_slot(&j, &schedule, T0, RunId::new(run_id)).unwrap();
    claimed.version = 2;
    w.backend.replace_job(&claimed, 1).await.unwrap();
    let SlotOutcome::Fired(entry) = outcome else {
        panic!("the slot fired")
    };
    (claimed, entry)
}

#[tokio::test]
async fn a_fire_whose_submit_was_lost_is_submitted_again() {
    // GIVEN a job whose fire was claimed but never accepted (the ticker died in between)
    let w = world();
    claimed_fire(&w, "run_lost").await;

    // WHEN a ticker comes by 5 s later
    w.clock.set(T0 + 5_000);
    w.ticker.tick().await;

    // THEN the run exists, queued, on its lane
    let run = w
        .backend
        .get_run(&w.tenant, &RunId::new("run_lost"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    let delivered = w
        .backend
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(delivered[0].message.body.run_id.as_str(), "run_lost");
}

#[tokio::test]
async fn a_finished_fire_is_delivered_to_the_webhook_with_its_token() {
    // GIVEN a webhook that fails once, then records what it gets
    let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
    let calls = Arc::new(AtomicU64::new(0));
    let app = {
        let (seen, calls) = (seen.clone(), calls.clone());
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, Json(body): Json<Value>| {
                let (seen, calls) = (seen.clone(), calls.clone());
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    seen.lock().unwrap().push((auth, body));
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // AND a job delivering there, fired and finished
    let w = world();
    let mut j = job(
        &w,
        Schedule::Every {
            every_seconds: 3600,
        },
        T0,
        None,
    );
    j.delivery = Some(JobDelivery {
        webhook: WebhookTarget {
            url: format!("http://{addr}/hook"),
            token: Some("tok-123".into()),
        },
    });
    w.backend.create_job(&j, 10).await.unwrap();
    let run_id = w.ticker.tick().await.fired[0].clone();
    w.end_run(&run_id, RunStatus::Ok).await;

    // WHEN the ticker records the end
    w.clock.set(T0 + 1_000);
    assert_eq!(w.ticker.tick().await.ended, 1);
    w.ticker.drain_deliveries(Duration::from_secs(10)).await;

    // THEN the payloads arrived once, with the bearer token, after one retry
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer tok-123"));
    assert_eq!(body["runId"], run_id.as_str());
    assert_eq!(body["status"], "ok");
    assert_eq!(body["payloads"][0]["text"], "done");

    // AND a loopback webhook without the allow list is refused by the SSRF guard
    let strict = WebhookSender::new(SsrfPolicy::default());
    let err = strict
        .deliver(&j.delivery.as_ref().unwrap().webhook, &Value::Null)
        .await
        .unwrap_err();
    assert!(err.contains("127.0.0.1"), "{err}");
}

/// A lane queue whose enqueues fail (the process died between the accept and the enqueue).
struct DeadQueue;

#[async_trait::async_trait]
impl LaneQueue for DeadQueue {
    async fn enqueue(&self, _: &agentlane_core::LaneMessage) -> agentlane_core::QueueResult<()> {
        Err(agentlane_core::QueueError::Unavailable("killed".into()))
    }
    async fn receive(
        &self,
        _: usize,
        _: Duration,
        _: Duration,
    ) -> agentlane_core::QueueResult<Vec<agentlane_core::Delivery>> {
        Ok(Vec::new())
    }
    async fn ack(&self, _: &agentlane_core::Receipt) -> agentlane_core::QueueResult<()> {
        Ok(())
    }
    async fn set_visibility(
        &self,
        _: &agentlane_core::Receipt,
        _: Duration,
    ) -> agentlane_core::QueueResult<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_fire_accepted_but_never_enqueued_is_enqueued_again() {
    // GIVEN a fire claimed and accepted whose lane message was never sent
    let w = world();
    let (claimed, entry) = claimed_fire(&w, "run_unsent").await;
    let sent = agentlane_scheduler::fire::submit(&w.backend, &DeadQueue, &claimed, &entry, T0);
    assert!(sent.await.is_err(), "the enqueue failed");
    let queued = |w: &World| {
        let backend = w.backend.clone();
        async move {
            backend
                .receive(10, Duration::from_secs(30), Duration::ZERO)
                .await
                .unwrap()
                .into_iter()
                .filter(|d| d.message.body.run_id.as_str() == "run_unsent")
                .count()
        }
    };

    // WHEN a ticker comes by before the resubmit delay, THEN nothing is sent yet
    w.clock.set(T0 + 1_000);
    w.ticker.tick().await;
    assert_eq!(queued(&w).await, 0);

    // WHEN it comes by 5 s after the fire, THEN the run is on its lane, once, still queued
    w.clock.set(T0 + 5_000);
    w.ticker.tick().await;
    w.clock.set(T0 + 5_250);
    w.ticker.tick().await;
    assert_eq!(queued(&w).await, 1);
    let run = w
        .backend
        .get_run(&w.tenant, &RunId::new("run_unsent"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Queued);
}

#[tokio::test]
async fn an_edited_jobs_unsent_fire_is_sent_again_as_it_was_accepted() {
    // GIVEN a fire claimed and accepted whose lane message was never sent
    let w = world();
    let (claimed, entry) = claimed_fire(&w, "run_edited").await;
    let sent = agentlane_scheduler::fire::submit(&w.backend, &DeadQueue, &claimed, &entry, T0);
    assert!(sent.await.is_err(), "the enqueue failed");

    // AND the job edited since (another message and timeout: another request)
    let mut edited = w.stored(&claimed).await;
    edited.message = "something else".into();
    edited.timeout_seconds = Some(60);
    edited.version = claimed.version + 1;
    w.backend
        .replace_job(&edited, claimed.version)
        .await
        .unwrap();

    // WHEN tickers come by 5 s after the fire and again later
    for at in [T0 + 5_000, T0 + 5_250, T0 + 11_000] {
        w.clock.set(at);
        assert_eq!(w.ticker.tick().await.failures, 0);
    }

    // THEN the run is on its lane once, with the message it was fired with
    let delivered = w
        .backend
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    let ours: Vec<_> = delivered
        .iter()
        .filter(|d| d.message.body.run_id.as_str() == "run_edited")
        .collect();
    assert_eq!(ours.len(), 1, "sent once");
    let run = w
        .backend
        .get_run(&w.tenant, &RunId::new("run_edited"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    assert_eq!(run.request.message, "hello");
}

#[tokio::test]
async fn fires_beyond_the_tenants_budget_are_skipped_and_say_so() {
    // GIVEN a ticker with a budget of 3 fires a minute, and 8 hourly jobs of one tenant due now
    let mut w = world();
    let (backend, clock) = (w.backend.clone(), w.clock.clone());
    w.ticker = Ticker::new(
        Arc::new(backend.clone()),
        Arc::new(backend.clone()),
        Arc::new(backend),
        clock,
        TickerConfig {
            fire_budget: agentlane_scheduler::FireBudget {
                per_minute: 3,
                ..Default::default()
            },
            ..TickerConfig::default()
        },
        WebhookSender::new(SsrfPolicy::default()),
    );
    let every = Schedule::Every {
        every_seconds: 3600,
    };
    let mut jobs = Vec::new();
    for _ in 0..8 {
        let j = job(&w, every.clone(), T0, None);
        w.backend.create_job(&j, 100).await.unwrap();
        jobs.push(j);
    }

    // WHEN the ticker comes by
    let report = w.ticker.tick().await;

    // THEN 3 fired and 5 were skipped over the budget, each listing why
    assert_eq!((report.fired.len(), report.over_budget), (3, 5));
    let mut skipped = 0;
    for j in &jobs {
        let stored = w.stored(j).await;
        let last = &stored.last_runs[0];
        if last.status == JobRunStatus::Skipped {
            skipped += 1;
            let why = last.error.as_deref().unwrap();
            assert!(why.contains("fire budget (3 per minute)"), "{why}");
            assert_eq!(
                stored.next_run_at,
                Some(T0 + 3_600_000),
                "the schedule goes on"
            );
        }
    }
    assert_eq!(skipped, 5);
}

/// A lane queue whose first `failures` enqueues fail `Unavailable`, then delivers to `inner`.
struct BlippingQueue {
    inner: SqliteBackend,
    failures: AtomicU64,
}

#[async_trait::async_trait]
impl LaneQueue for BlippingQueue {
    async fn enqueue(&self, m: &agentlane_core::LaneMessage) -> agentlane_core::QueueResult<()> {
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(agentlane_core::QueueError::Unavailable("blip".into()));
        }
        self.inner.enqueue(m).await
    }
    async fn receive(
        &self,
        n: usize,
        v: Duration,
        w: Duration,
    ) -> agentlane_core::QueueResult<Vec<agentlane_core::Delivery>> {
        self.inner.receive(n, v, w).await
    }
    async fn ack(&self, r: &agentlane_core::Receipt) -> agentlane_core::QueueResult<()> {
        self.inner.ack(r).await
    }
    async fn set_visibility(
        &self,
        r: &agentlane_core::Receipt,
        v: Duration,
    ) -> agentlane_core::QueueResult<()> {
        self.inner.set_visibility(r, v).await
    }
}

#[tokio::test]
async fn a_fire_rides_out_a_queue_blip_and_gives_up_after_three_tries() {
    // GIVEN a fire claimed, and a queue that fails twice, then works
    let w = world();
    let (claimed, entry) = claimed_fire(&w, "run_blip").await;
    let blip = BlippingQueue {
        inner: w.backend.clone(),
        failures: AtomicU64::new(2),
    };

    // WHEN it is submitted, THEN it is on its lane at once
    agentlane_scheduler::fire::submit(&w.backend, &blip, &claimed, &entry, T0)
        .await
        .unwrap();
    let delivered = w
        .backend
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(delivered[0].message.body.run_id.as_str(), "run_blip");

    // AND a queue that keeps failing is given up on after three tries (the ticker resubmits)
    let down = BlippingQueue {
        inner: w.backend.clone(),
        failures: AtomicU64::new(3),
    };
    let sent = agentlane_scheduler::fire::send(&down, &w.tenant, &entry).await;
    assert!(sent.is_err());
    assert_eq!(down.failures.load(Ordering::SeqCst), 0, "three tries");
}
