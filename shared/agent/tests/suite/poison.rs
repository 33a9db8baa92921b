//! Poison turns (SPEC §10): a run whose final commit can never land fails every delivery; after
//! `max_failed_pickups` failed deliveries its next pickup ends it `error`/`poisoned` with the last
//! error, without calling the model, the message is deleted, and the session's next turn answers.
//! A clean hand-back is not a failure.

use crate::support::*;
use agentlane_agent::{LaneWorker, RunnerConfig, Settlement, TurnExit};
use agentlane_core::{
    Clock, Commit, Fence, Lane, LaneMessage, LaneQueue, Layered, RunId, RunStatus, SessionStatus,
    Store, StoreError, StoreLayer, StoreResult, TurnMessage,
};
use agentlane_store_sqlite::SqliteBackend;
use async_trait::async_trait;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The embedded store, except that the `ok` final commit of one run is always refused as too
/// large (a run record that can never be stored).
struct RefusesOneFinish {
    inner: Arc<dyn Store>,
    poisoned_run: Arc<Mutex<Option<RunId>>>,
    refused: Arc<AtomicUsize>,
}

#[async_trait]
impl StoreLayer for RefusesOneFinish {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        let target = self.poisoned_run.lock().unwrap().clone();
        let refuse = commit
            .run
            .as_ref()
            .is_some_and(|r| Some(&r.run_id) == target.as_ref() && r.status == RunStatus::Ok);
        if refuse {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::TooLarge(
                "injected: run record too large".into(),
            ));
        }
        self.inner.commit(fence, commit).await
    }
}

fn poison_config(cap: u32) -> RunnerConfig {
    RunnerConfig {
        lock_lease: Duration::from_millis(200),
        visibility_timeout: Duration::from_millis(300),
        failed_pickup_pause: Duration::from_millis(100),
        max_failed_pickups: cap,
        ..config()
    }
}

struct PoisonFixture {
    f: Fixture,
    target: Arc<Mutex<Option<RunId>>>,
    refused: Arc<AtomicUsize>,
}

fn poison_fixture(script: Vec<Script>, cap: u32) -> PoisonFixture {
    poison_fixture_with(script, poison_config(cap))
}

fn poison_fixture_with(script: Vec<Script>, config: RunnerConfig) -> PoisonFixture {
    let target = Arc::new(Mutex::new(None));
    let refused = Arc::new(AtomicUsize::new(0));
    let (t, r) = (target.clone(), refused.clone());
    let f = fixture_on(
        script,
        config,
        |router, model| router.with_provider(model.clone()),
        move |inner| {
            Arc::new(Layered(RefusesOneFinish {
                inner,
                poisoned_run: t,
                refused: r,
            }))
        },
    );
    PoisonFixture { f, target, refused }
}

#[tokio::test]
async fn a_turn_failing_every_delivery_ends_poisoned_after_the_cap_and_the_next_turn_answers() {
    // GIVEN a cap of 3 failed deliveries and a first turn whose answer can never be stored,
    // over a real embedded lane queue
    let script = vec![
        Script::Text("never stored 1"),
        Script::Text("never stored 2"),
        Script::Text("never stored 3"),
        Script::Text("the second turn's answer"),
    ];
    let p = poison_fixture(script, 3);
    let qdir = tempfile::tempdir().unwrap();
    let queue = Arc::new(SqliteBackend::open(qdir.path()).unwrap());
    let worker = LaneWorker::new(queue.clone(), p.f.runner.clone());
    let first = p.f.accept("first").await;
    *p.target.lock().unwrap() = Some(first.run_id.clone());
    let second = p.f.accept("second").await;
    for (i, msg) in [&first, &second].into_iter().enumerate() {
        queue
            .enqueue(&LaneMessage {
                lane: Lane::new("acme/s1"),
                dedup_id: format!("d{i}"),
                body: msg.clone(),
            })
            .await
            .unwrap();
    }

    // WHEN the worker takes deliveries until both runs are terminal
    let mut outcomes = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while p
        .f
        .store
        .get_run(&p.f.tenant, &second.run_id)
        .await
        .unwrap()
        .unwrap()
        .status
        != RunStatus::Ok
    {
        assert!(tokio::time::Instant::now() < deadline, "{outcomes:?}");
        let got = queue
            .receive(1, Duration::from_millis(300), Duration::from_secs(1))
            .await
            .unwrap();
        for d in got {
            let outcome = worker.process(&d, &CancellationToken::new()).await;
            worker.settle(&d, &outcome).await;
            outcomes.push((d.message.body.run_id == first.run_id, outcome));
        }
    }

    // THEN the first run failed three deliveries, then ended poisoned without a fourth model call
    let firsts: Vec<Settlement> = outcomes
        .iter()
        .filter(|(is_first, _)| *is_first)
        .map(|(_, o)| match o {
            // the failed pickup's pause, jittered
            Settlement::VisibleAfter(d) if !d.is_zero() => {
                Settlement::VisibleAfter(Duration::from_millis(100))
            }
            other => *other,
        })
        .collect();
    let failed = Settlement::VisibleAfter(Duration::from_millis(100));
    assert_eq!(firsts, [failed, failed, failed, Settlement::Ack]);
    // (each pickup's final commit refused twice: as is, then with the record shrunk to fit)
    assert_eq!(p.refused.load(Ordering::SeqCst), 2 * 3);
    let run = finished_run(&p.f, &first).await;
    assert_eq!(run.status, RunStatus::Error);
    let error = run.error.clone().unwrap();
    assert_eq!(error.code, "poisoned");
    assert!(error.message.contains("3 deliveries"), "{}", error.message);
    assert_eq!(
        p.f.model.requests().len(),
        4,
        "three failed pickups and the second turn"
    );

    // AND the second turn answered, the session is idle, the queue empty
    let second_run = finished_run(&p.f, &second).await;
    assert_eq!(second_run.payloads[0].text, "the second turn's answer");
    let session =
        p.f.store
            .get_session(&p.f.tenant, &p.f.key)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(session.status, SessionStatus::Idle);
    let stats = queue.queue_stats().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

#[tokio::test]
async fn clean_hand_backs_never_poison_a_run() {
    // GIVEN a cap of 1 and a run picked up three times, each pickup handed back by a shutdown
    // that lands while its model call streams
    let stall = Script::Silent(Duration::from_secs(30));
    let script = vec![
        stall.clone(),
        stall.clone(),
        stall,
        Script::Text("answered"),
    ];
    let p = poison_fixture(script, 1);
    let msg: TurnMessage = p.f.accept("hello").await;
    for _ in 0..3 {
        let shutdown = CancellationToken::new();
        let later = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            later.cancel();
        });
        let exit = p.f.runner.execute(&msg, &shutdown).await.unwrap();
        assert_eq!(exit, TurnExit::HandBack);
    }
    let run = p.f.run(&msg.run_id).await;
    assert_eq!(
        (run.pickups, run.hand_backs),
        (3, 3),
        "three clean hand-backs"
    );
    // WHEN it is picked up normally
    let exit = p.f.execute(&msg).await;
    // THEN it answers: clean hand-backs are not failed deliveries
    assert_eq!(exit, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(finished_run(&p.f, &msg).await.payloads[0].text, "answered");
}

#[tokio::test]
async fn a_failed_pickup_releases_the_lock_and_its_message_comes_back_after_a_short_pause() {
    // GIVEN a turn whose answer can never be stored, on a lane queue whose visibility (and the
    // lock's lease) are 30 s, and a failed pickup pause of 300 ms
    let p = poison_fixture_with(
        vec![Script::Text("never stored"), Script::Text("never stored")],
        RunnerConfig {
            lock_lease: Duration::from_secs(30),
            visibility_timeout: Duration::from_secs(30),
            failed_pickup_pause: Duration::from_millis(300),
            ..config()
        },
    );
    let qdir = tempfile::tempdir().unwrap();
    let queue = Arc::new(SqliteBackend::open(qdir.path()).unwrap());
    let worker = LaneWorker::new(queue.clone(), p.f.runner.clone());
    let msg = p.f.accept("hello").await;
    *p.target.lock().unwrap() = Some(msg.run_id.clone());
    queue
        .enqueue(&LaneMessage {
            lane: Lane::new("acme/s1"),
            dedup_id: "d0".into(),
            body: msg.clone(),
        })
        .await
        .unwrap();

    // WHEN the worker takes the delivery and its final commit fails
    let got = queue
        .receive(1, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    let settlement = worker.process(&got[0], &CancellationToken::new()).await;
    worker.settle(&got[0], &settlement).await;
    let started = tokio::time::Instant::now();

    // THEN it is settled to come back after the pause, jittered, not the visibility timeout
    let Settlement::VisibleAfter(after) = settlement else {
        panic!("a failed pickup is not done with: {settlement:?}");
    };
    assert!(
        after >= Duration::from_millis(240) && after <= Duration::from_millis(360),
        "{after:?}"
    );
    // AND the session's lock is released (not left to its 30 s lease)
    let session =
        p.f.store
            .get_session(&p.f.tenant, &p.f.key)
            .await
            .unwrap()
            .unwrap();
    assert!(
        !session.lock_is_live(agentlane_core::SystemClock.now_ms()),
        "{session:?}"
    );
    // AND the message is delivered again within a second, and its pickup takes the lock at once
    let again = queue
        .receive(1, Duration::from_secs(30), Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "back after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(again[0].message.body.run_id, msg.run_id);
    let second = tokio::time::Instant::now();
    worker.process(&again[0], &CancellationToken::new()).await;
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "the second pickup did not wait for the lock: {:?}",
        second.elapsed()
    );
    assert_eq!(
        p.refused.load(Ordering::SeqCst),
        2 * 2,
        "both pickups ran the turn (each refused as is, then shrunk)"
    );
}
