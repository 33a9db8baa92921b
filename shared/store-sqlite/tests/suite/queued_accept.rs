//! A backend that is its own lane queue (`queue_accepted_turns`, as `serve` opens it): an accept
//! and its run's lane message are one transaction, so neither is ever stored without the other.

use agentlane_conformance::fixtures;
use agentlane_core::{
    AcceptedRecord, HistoryReader, Lane, LaneMessage, LaneQueue, LockAttempt, NewTurn, SessionLock,
    TurnIntake, TurnMessage,
};
use agentlane_store_sqlite::{DB_FILE_NAME, SqliteBackend};
use std::future::Future;
use std::time::{Duration, Instant};

fn queueing(dir: &std::path::Path) -> SqliteBackend {
    let backend = SqliteBackend::open(dir).unwrap();
    backend.queue_accepted_turns();
    backend
}

/// Everything the queue would deliver now.
async fn queued(backend: &SqliteBackend) -> Vec<LaneMessage> {
    backend
        .receive(100, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message)
        .collect()
}

fn message_of(turn: &NewTurn) -> LaneMessage {
    LaneMessage {
        lane: Lane::for_session(&turn.tenant, &turn.session_key),
        dedup_id: turn.run_id.to_string(),
        body: TurnMessage {
            tenant: turn.tenant.clone(),
            run_id: turn.run_id.clone(),
            session_key: Some(turn.session_key.clone()),
            accepted: None,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_turn_is_queued_in_its_own_commit_and_wakes_a_waiting_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let backend = queueing(dir.path());
    assert!(backend.queues_accepted_turns());
    let turn = fixtures::turn(
        &fixtures::tenant(),
        &fixtures::session_key(),
        fixtures::wall_ms(),
    );

    // GIVEN a lane worker waiting on an empty queue
    let receiver = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = backend
                .receive(1, Duration::from_secs(30), Duration::from_secs(5))
                .await
                .unwrap();
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    // WHEN a turn is accepted (and nobody enqueues it)
    let outcome = backend.accept_turn(turn.clone()).await.unwrap();
    assert!(outcome.created);

    // THEN the worker gets its message at once, the one the API would have sent, carrying the
    // run as accepted (its pickup takes the run from it instead of reading it)
    let (got, waited) = receiver.await.unwrap();
    let accepted = AcceptedRecord::of(&outcome.run);
    assert!(accepted.is_some());
    let stored = backend.get_run(&turn.tenant, &turn.run_id).await.unwrap();
    assert_eq!(accepted.as_ref().and_then(AcceptedRecord::run), stored);
    let mut first = message_of(&turn);
    first.body.accepted = accepted;
    assert_eq!(
        got.iter().map(|d| d.message.clone()).collect::<Vec<_>>(),
        vec![first]
    );
    assert!(
        waited < Duration::from_secs(1),
        "woken, not polled: {waited:?}"
    );

    // AND the same message delivered again (handed back) carries no record: that pickup reads
    backend
        .set_visibility(&got[0].receipt, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(queued(&backend).await, vec![message_of(&turn)]);

    // AND a retry with the same idempotency key queues nothing more
    let keyed = NewTurn {
        idempotency_key: Some("once".into()),
        ..fixtures::turn(&turn.tenant, &turn.session_key, turn.now)
    };
    assert!(backend.accept_turn(keyed.clone()).await.unwrap().created);
    let retry = NewTurn {
        run_id: agentlane_core::RunId::generate(),
        ..keyed.clone()
    };
    let replayed = backend.accept_turn(retry).await.unwrap();
    assert!(!replayed.created);
    assert_eq!(replayed.run.run_id, keyed.run_id);
    let lane_head = queued(&backend).await;
    assert!(
        lane_head.is_empty(),
        "the lane's head is still in flight: {lane_head:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_and_its_message_survive_a_restart_together_or_neither_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (tenant, now) = (fixtures::tenant(), fixtures::wall_ms());
    let ok = fixtures::turn(&tenant, &fixtures::session_key(), now);
    let lost_message = fixtures::turn(&tenant, &fixtures::session_key(), now);
    let lost_run = fixtures::turn(&tenant, &fixtures::session_key(), now);
    {
        let backend = queueing(dir.path());
        backend.accept_turn(ok.clone()).await.unwrap();
        // GIVEN the message's write fails inside the accept (a trigger stands in for a disk
        // error or a crash between the two writes) ...
        let raw = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        raw.execute_batch(&format!(
            "CREATE TRIGGER fail_message BEFORE INSERT ON lane_pending
               WHEN NEW.dedup_id = '{}' BEGIN SELECT RAISE(ABORT, 'queue write failed'); END;
             CREATE TRIGGER fail_run BEFORE INSERT ON runs
               WHEN NEW.run_id = '{}' BEGIN SELECT RAISE(ABORT, 'run write failed'); END;",
            lost_message.run_id, lost_run.run_id
        ))
        .unwrap();
        // ... or the run's write does
        for turn in [&lost_message, &lost_run] {
            let refused = backend.accept_turn(turn.clone()).await;
            assert!(refused.is_err(), "{refused:?}");
        }
    }

    // WHEN the process starts again
    let backend = SqliteBackend::open(dir.path()).unwrap();

    // THEN the accepted turn has its run and its message; each refused one has neither
    let messages = queued(&backend).await;
    assert_eq!(messages, vec![message_of(&ok)]);
    assert!(
        backend
            .get_run(&tenant, &ok.run_id)
            .await
            .unwrap()
            .is_some()
    );
    for turn in [&lost_message, &lost_run] {
        assert_eq!(backend.get_run(&tenant, &turn.run_id).await.unwrap(), None);
        assert_eq!(
            backend
                .get_session(&tenant, &turn.session_key)
                .await
                .unwrap(),
            None
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_not_told_it_is_the_queue_leaves_enqueueing_to_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    assert!(!backend.queues_accepted_turns());
    let turn = fixtures::turn(
        &fixtures::tenant(),
        &fixtures::session_key(),
        fixtures::wall_ms(),
    );
    assert!(backend.accept_turn(turn).await.unwrap().created);
    assert_eq!(queued(&backend).await, Vec::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_changed_while_queued_is_delivered_without_its_accepted_record() {
    let dir = tempfile::tempdir().unwrap();
    let backend = queueing(dir.path());
    let (tenant, now) = (fixtures::tenant(), fixtures::wall_ms());
    let kept = fixtures::turn(&tenant, &fixtures::session_key(), now);
    let aborted = fixtures::turn(&tenant, &fixtures::session_key(), now);
    let kept_run = backend.accept_turn(kept.clone()).await.unwrap().run;
    backend.accept_turn(aborted.clone()).await.unwrap();

    // WHEN one of two runs this process accepted is asked to abort while it is queued
    backend
        .request_abort_for(
            &tenant,
            &aborted.run_id,
            agentlane_core::AbortReason::Requested,
        )
        .await
        .unwrap();

    // THEN its delivery carries no record (its pickup reads the run, and finds the abort
    // before any model call), while the unchanged run's still carries its own
    let mut got = queued(&backend).await;
    got.sort_by_key(|m| m.body.run_id != kept.run_id);
    let mut expected_kept = message_of(&kept);
    expected_kept.body.accepted = AcceptedRecord::of(&kept_run);
    assert!(expected_kept.body.accepted.is_some());
    assert_eq!(got, vec![expected_kept, message_of(&aborted)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_told_to_lock_takes_each_free_sessions_lock_in_the_same_write() {
    let dir = tempfile::tempdir().unwrap();
    let backend = queueing(dir.path());
    backend.lock_on_receive("serve-1", Duration::from_secs(30));
    let (tenant, now) = (fixtures::tenant(), fixtures::wall_ms());
    let free = fixtures::turn(&tenant, &fixtures::session_key(), now);
    let busy = fixtures::turn(&tenant, &fixtures::session_key(), now);
    backend.accept_turn(free.clone()).await.unwrap();
    backend.accept_turn(busy.clone()).await.unwrap();
    // GIVEN one of the two sessions locked by a live runner
    let held = backend
        .acquire_lock(
            &tenant,
            &busy.session_key,
            "other",
            30_000,
            fixtures::wall_ms(),
        )
        .await
        .unwrap();
    assert!(matches!(held, LockAttempt::Acquired(..)));

    // WHEN both messages are delivered
    let got = backend
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    let lock_of = |turn: &NewTurn| {
        got.iter()
            .find(|d| d.message.body.run_id == turn.run_id)
            .unwrap()
            .lock
            .clone()
    };

    // THEN the free session's message comes with its lock, which the store holds as taken
    // for this receive (a runner's acquire finds it held), and its fence releases it
    let lock = lock_of(&free).expect("the free session's lock");
    assert_eq!(lock.fence.session_key, free.session_key);
    assert!(lock.fence.owner.starts_with("serve-1:"));
    let stored = backend
        .get_session(&tenant, &free.session_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, *lock.session);
    let again = backend
        .acquire_lock(
            &tenant,
            &free.session_key,
            "other",
            30_000,
            fixtures::wall_ms(),
        )
        .await
        .unwrap();
    assert!(matches!(again, LockAttempt::Held { .. }), "{again:?}");
    backend.release_lock(&lock.fence).await.unwrap();
    // AND the busy session's message comes without one: its holder keeps it
    assert_eq!(lock_of(&busy), None);
    let session = backend
        .get_session(&tenant, &busy.session_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.lock_owner.as_deref(), Some("other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_received_before_its_accept_returns_still_carries_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let backend = queueing(dir.path());
    let turn = fixtures::turn(
        &fixtures::tenant(),
        &fixtures::session_key(),
        fixtures::wall_ms(),
    );

    // GIVEN an accept whose write has gone to the writer, and whose caller has not resumed
    // since (a busy API thread): polled once, then left alone
    let mut accept = Box::pin(backend.accept_turn(turn.clone()));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(accept.as_mut().poll(&mut cx).is_pending());

    // WHEN a lane worker receives meanwhile (its look comes right after the accept commits)
    let deadline = Instant::now() + Duration::from_secs(20);
    let delivered = loop {
        let got = backend
            .receive(1, Duration::from_secs(60), Duration::from_secs(2))
            .await
            .unwrap();
        if let Some(delivery) = got.into_iter().next() {
            break delivery.message;
        }
        assert!(
            Instant::now() < deadline,
            "the accepted turn was never delivered"
        );
    };

    // THEN the delivery carries the run as accepted (its pickup does not read the run)
    let outcome = accept.await.unwrap();
    assert!(outcome.created);
    let mut expected = message_of(&turn);
    expected.body.accepted = AcceptedRecord::of(&outcome.run);
    assert!(expected.body.accepted.is_some());
    assert_eq!(delivered, expected);
}
