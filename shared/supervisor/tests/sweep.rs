//! The sweep on the real embedded store: a stuck session (its runner died holding the lane) is
//! recovered — run `aborted`/`stuck`/`abandoned`, its tool call paired, session idle, lock
//! released — while a run with a live owner is only asked to abort (a sweep racing a live runner
//! writes nothing of its own); a dead-lettered turn ends `dead_lettered`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_agent::writer::{CommitKind, DeltaFlush, Positions, RunWriter};
use agentlane_conformance::fixtures;
use agentlane_core::{
    AbortReason, Clock, Lane, LaneMessage, LaneQueue, LivenessState, LockAttempt, Message, Run,
    RunStatus, SessionKey, SessionStatus, Store, SystemClock, TenantId, ToolCall, TurnMessage,
};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_supervisor::{DiagnosticClass, Supervisor, SweepReport, Thresholds};
use std::sync::Arc;
use std::time::Duration;

struct World {
    backend: SqliteBackend,
    store: Arc<dyn Store>,
    supervisor: Supervisor,
    tenant: TenantId,
}

fn world() -> World {
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let thresholds = Thresholds::new(Duration::from_millis(100), Some(Duration::from_millis(250)));
    let supervisor = Supervisor::new(
        store.clone(),
        Arc::new(backend.clone()),
        Arc::new(SystemClock),
        thresholds,
    );
    World {
        backend,
        store,
        supervisor,
        tenant: TenantId::new("acme"),
    }
}

impl World {
    async fn accept(&self, key: &str) -> Run {
        let turn = fixtures::turn(&self.tenant, &SessionKey::new(key), SystemClock.now_ms());
        self.store.accept_turn(turn).await.unwrap().run
    }

    /// A supervisor with the world's thresholds that re-enqueues lost lane messages on the
    /// embedded queue, and that queue.
    fn redriving(&self) -> (Supervisor, Arc<dyn LaneQueue>) {
        let queue: Arc<dyn LaneQueue> = Arc::new(self.backend.clone());
        let supervisor = Supervisor::new(
            self.store.clone(),
            Arc::new(self.backend.clone()),
            Arc::new(SystemClock),
            *self.supervisor.thresholds(),
        )
        .with_queue(queue.clone());
        (supervisor, queue)
    }

    /// A runner picks `run` up with a lease of `lease_ms`, writes its prompt and a tool call, and
    /// then goes silent (dies, or its stream stalls) without releasing the lock.
    async fn start_and_go_silent(&self, run: Run, lease_ms: u64) {
        let now = SystemClock.now_ms();
        let fence = match self
            .store
            .acquire_lock(&run.tenant, &run.session_key, "runner-1", lease_ms, now)
            .await
            .unwrap()
        {
            LockAttempt::Acquired(f, _) => f,
            held => panic!("{held:?}"),
        };
        let mut writer = RunWriter::new(
            self.store.clone(),
            Arc::new(SystemClock),
            fence,
            run,
            Positions {
                next_seq: 0,
                next_event_seq: 0,
            },
            DeltaFlush {
                bytes: 512,
                every: Duration::ZERO,
            },
        );
        writer.begin_pickup("demo/m".into());
        let call = ToolCall {
            id: "call_1".into(),
            name: "slow".into(),
            arguments: "{}".into(),
        };
        let messages = vec![
            Message::user("do it"),
            Message::Assistant {
                content: String::new(),
                reasoning: None,
                tool_calls: vec![call],
                model: Some("demo/m".into()),
            },
        ];
        writer.commit(CommitKind::Progress(messages)).await.unwrap();
    }
}

#[tokio::test]
async fn a_stuck_session_is_diagnosed_then_recovered_with_its_tool_call_paired() {
    // GIVEN a run whose runner died mid tool call (lease 50 ms, long gone)
    let w = world();
    let run = w.accept("s1").await;
    w.start_and_go_silent(run.clone(), 50).await;

    // WHEN a sweep runs past the warn threshold but before the abort threshold
    tokio::time::sleep(Duration::from_millis(150)).await;
    let report = w.supervisor.sweep().await.unwrap();
    // THEN it is diagnosed stuck and left alone
    assert_eq!((report.swept, report.stuck, report.recovered), (1, 1, 0));
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    let diagnostic = w.supervisor.diagnose(&session).await.unwrap().unwrap();
    assert_eq!(diagnostic.class, DiagnosticClass::Stuck);

    // WHEN a sweep runs past the abort threshold
    tokio::time::sleep(Duration::from_millis(150)).await;
    let report = w.supervisor.sweep().await.unwrap();

    // THEN the session is recovered: run aborted with code stuck, abandoned
    assert_eq!((report.stuck, report.recovered), (1, 1));
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(ended.status, RunStatus::Aborted);
    assert_eq!(ended.liveness_state, LivenessState::Abandoned);
    assert_eq!(ended.error.as_ref().unwrap().code, "stuck");
    // AND its tool call got a result; the session is idle, unlocked, one more run finished
    let entries = w
        .store
        .read_transcript(&w.tenant, &ended.session_id, None, 100)
        .await
        .unwrap();
    let roles: Vec<&str> = entries
        .iter()
        .map(|e| match &e.message {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { tool_call_id, .. } if tool_call_id == "call_1" => "tool call_1",
            _ => "other",
        })
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool call_1"]);
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.active_run_id, None);
    assert_eq!(session.lock_owner, None);
    assert_eq!(session.runs_finished, 1);
    // AND the next sweep finds nothing to look at
    assert_eq!(w.supervisor.sweep().await.unwrap(), SweepReport::default());
}

#[tokio::test]
async fn a_stalled_run_with_a_live_owner_is_asked_to_abort_and_nothing_else_is_written() {
    // GIVEN a run whose runner holds a live lease but makes no progress
    let w = world();
    let run = w.accept("s2").await;
    w.start_and_go_silent(run.clone(), 60_000).await;
    let before = fixtures::session(&w.store, &w.tenant, &run.session_key).await;

    // WHEN sweeps run past the warn, then the abort threshold
    tokio::time::sleep(Duration::from_millis(150)).await;
    let first = w.supervisor.sweep().await.unwrap();
    assert_eq!((first.stalled, first.aborted), (1, 0));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = w.supervisor.sweep().await.unwrap();

    // THEN the run is asked to abort (its runner ends it), and the session is untouched
    assert_eq!(
        (second.stalled, second.aborted, second.recovered),
        (1, 1, 0)
    );
    let after = fixtures::stored_run(&w.store, &run).await;
    assert!(after.abort_requested);
    assert_eq!(
        after.abort_reason,
        Some(AbortReason::Stuck),
        "its runner will end it `stuck`, not `aborted`"
    );
    assert_eq!(after.status, RunStatus::Running);
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(
        session, before,
        "a sweep racing a live runner writes nothing to its session"
    );
}

#[tokio::test]
async fn a_dead_lettered_turn_ends_dead_lettered_and_frees_its_session() {
    let w = world();
    let run = w.accept("s3").await;
    w.start_and_go_silent(run.clone(), 50).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(
        w.supervisor
            .reconcile_dead_letter(&w.tenant, &run.run_id)
            .await
            .unwrap()
    );
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(ended.status, RunStatus::Error);
    assert_eq!(ended.error.unwrap().code, "dead_lettered");
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(session.status, SessionStatus::Idle);
    // twice is a no-op
    assert!(
        !w.supervisor
            .reconcile_dead_letter(&w.tenant, &run.run_id)
            .await
            .unwrap()
    );
    let _ = &w.backend;
}

#[tokio::test]
async fn the_sweep_reconciles_the_embedded_dead_letters() {
    // GIVEN a started run whose lane message failed its one allowed delivery (cap 1)
    let w = world();
    let run = w.accept("s4").await;
    w.start_and_go_silent(run.clone(), 50).await;
    w.backend.set_max_failed_deliveries(1);
    let message = LaneMessage {
        lane: Lane::new("acme/s4"),
        dedup_id: run.run_id.to_string(),
        body: TurnMessage {
            tenant: w.tenant.clone(),
            run_id: run.run_id.clone(),
            session_key: Some(run.session_key.clone()),
            accepted: None,
        },
    };
    w.backend.enqueue(&message).await.unwrap();
    let short = Duration::from_millis(50);
    assert_eq!(
        w.backend
            .receive(1, short, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(
        w.backend
            .receive(1, short, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(w.backend.dead_letters(10).await.unwrap().len(), 1);

    // WHEN a supervisor with the dead letters sweeps
    let supervisor = Supervisor::new(
        w.store.clone(),
        Arc::new(w.backend.clone()),
        Arc::new(SystemClock),
        Thresholds::default(),
    )
    .with_dead_letters(Arc::new(w.backend.clone()));
    let counted = || {
        agentlane_core::metrics::global()
            .value(agentlane_core::metrics::DEAD_LETTERED, &[])
            .unwrap_or(0.0)
    };
    let before = counted();
    let report = supervisor.sweep().await.unwrap();

    // THEN the run ended dead_lettered, the session is idle, the dead letter forgotten, and
    // counted once in `dead_lettered`
    assert_eq!(report.dead_lettered, 1);
    assert_eq!(counted() - before, 1.0);
    supervisor.sweep().await.unwrap();
    assert_eq!(
        counted() - before,
        1.0,
        "a forgotten letter is not counted again"
    );
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(
        (ended.status, ended.error.unwrap().code.as_str()),
        (RunStatus::Error, "dead_lettered")
    );
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(session.status, SessionStatus::Idle);
    assert!(w.backend.dead_letters(10).await.unwrap().is_empty());
}

/// Issue 11: a turn whose lane message was lost (accepted, never enqueued) on an idle session is
/// diagnosed `session.stuck` ("queued work without an active run"); the sweep re-enqueues its
/// lane message, and after `MAX_REDRIVES` re-enqueues without progress ends it
/// `error`/`lost_message`, after which the session leaves the pending index.
#[tokio::test]
async fn a_queued_run_whose_lane_message_was_lost_is_redriven_then_ended_lost_message() {
    let w = world();
    let (supervisor, queue) = w.redriving();
    let run = w.accept("lost").await;
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert!(
        session.pending_at.is_some(),
        "the accept marks pending work"
    );
    assert_eq!(supervisor.diagnose(&session).await.unwrap(), None, "young");
    let report = supervisor.sweep().await.unwrap();
    assert_eq!((report.pending, report.redriven), (0, 0), "not yet old");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    let d = supervisor.diagnose(&session).await.unwrap().unwrap();
    assert_eq!(d.class, DiagnosticClass::Stuck);
    assert_eq!(d.reason, "queued work without an active run");

    let report = supervisor.sweep().await.unwrap();
    assert_eq!((report.pending, report.redriven), (1, 1), "{report:?}");
    let deliveries = queue
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 1, "the lane message is back on the queue");
    assert_eq!(deliveries[0].message.body.run_id, run.run_id);
    assert_eq!(
        deliveries[0].message.lane,
        Lane::for_session(&w.tenant, &run.session_key)
    );
    // The re-enqueued message is lost as well (acked without running): more redrives, then
    // the run ends `lost_message` and the session's later turns may run.
    queue.ack(&deliveries[0].receipt).await.unwrap();
    for _ in 1..agentlane_supervisor::MAX_REDRIVES {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(supervisor.sweep().await.unwrap().redriven, 1);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = supervisor.sweep().await.unwrap();
    assert_eq!((report.redriven, report.lost), (0, 1), "{report:?}");
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(ended.status, RunStatus::Error);
    assert_eq!(ended.error.unwrap().code, "lost_message");
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!((session.runs_accepted, session.runs_finished), (1, 1));
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(supervisor.diagnose(&session).await.unwrap(), None);
    let report = supervisor.sweep().await.unwrap();
    assert_eq!(report.pending, 1, "cleared by this sweep");
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(
        session.pending_at, None,
        "every run finished: out of the index"
    );
    assert!(session.open_runs.is_empty());
    assert_eq!(supervisor.sweep().await.unwrap().pending, 0);
}

/// A pending session whose lock has a live holder is left alone: nothing re-enqueued.
#[tokio::test]
async fn a_pending_session_with_a_live_lock_holder_is_not_redriven() {
    let w = world();
    let (supervisor, queue) = w.redriving();
    let run = w.accept("busy").await;
    w.store
        .acquire_lock(
            &w.tenant,
            &run.session_key,
            "runner-1",
            60_000,
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = supervisor.sweep().await.unwrap();
    assert_eq!((report.pending, report.redriven, report.lost), (1, 0, 0));
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(
        session.redrives, 0,
        "nothing written while the lock is live"
    );
    assert_eq!(supervisor.diagnose(&session).await.unwrap(), None);
    let none = queue
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// Without a lane queue nothing is re-enqueued, but the redrives still count: the lost run ends
/// `lost_message` after as many thresholds, never on the first sweep.
#[tokio::test]
async fn without_a_queue_a_lost_run_still_ends_lost_message_after_the_redrives() {
    let w = world();
    let run = w.accept("no-queue").await;
    for sweep in 0..agentlane_supervisor::MAX_REDRIVES {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let report = w.supervisor.sweep().await.unwrap();
        assert_eq!((report.redriven, report.lost), (0, 0), "sweep {sweep}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.supervisor.sweep().await.unwrap().lost, 1);
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(ended.error.unwrap().code, "lost_message");
}
