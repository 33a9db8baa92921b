//! Per-session order kept by the store: each run's `session_seq` at accept, the session (with
//! `runs_finished`) answered by the lock acquire, and idempotency keys that cannot be reused
//! for a different turn.

use crate::fixtures;
use agentlane_core::{
    Commit, LockAttempt, RESET_HOLD_MS, RunStatus, SessionId, SessionUpdate, Store, StoreError,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Runs are numbered 0, 1, 2… per session key, in acceptance order; a reset does not restart
/// the count (runs queued before it still come first).
pub async fn case_runs_are_numbered_in_session_order_across_resets(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let first = fixtures::accept(&store, &tenant, &key, now).await;
    let second = fixtures::accept(&store, &tenant, &key, now + 1).await;
    assert_eq!((first.session_seq, second.session_seq), (0, 1));

    store
        .reset_session(&tenant, &key, SessionId::generate(), now + 2)
        .await
        .expect("reset_session");
    let third = fixtures::accept(&store, &tenant, &key, now + 3).await;
    assert_eq!(third.session_seq, 2);
    assert_ne!(third.session_id, first.session_id);
    let stored = store
        .get_run(&tenant, &third.run_id)
        .await
        .expect("get_run")
        .expect("run");
    assert_eq!(stored.session_seq, 2);
}

/// Turns accepted at the same time on one key never share a `session_seq`: the numbers are
/// exactly 0..n. (Four racers: moto rolls a failed transaction back by restoring a snapshot of
/// the whole table, which can undo a concurrent successful one; real DynamoDB cannot.)
pub async fn case_concurrent_accepts_get_distinct_session_seqs(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let racers: Vec<_> = (0..4)
        .map(|i| {
            let (store, tenant, key) = (store.clone(), tenant.clone(), key.clone());
            tokio::spawn(async move {
                store
                    .accept_turn(fixtures::turn(&tenant, &key, now + 1 + i))
                    .await
            })
        })
        .collect();
    let mut seqs = BTreeSet::from([0]);
    for racer in racers {
        let outcome = racer.await.expect("racer task").expect("accept_turn");
        assert!(
            seqs.insert(outcome.run.session_seq),
            "a seq was given twice"
        );
    }
    assert_eq!(seqs, (0..5).collect::<BTreeSet<u64>>());
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.runs_accepted, 5);
}

/// The acquire answers the session as it left it: its id and how many runs finished, which is
/// the order check (only the run numbered `runs_finished` may go).
pub async fn case_acquire_answers_the_session_for_the_order_check(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let first = fixtures::accept(&store, &tenant, &key, now).await;
    let second = fixtures::accept(&store, &tenant, &key, now + 1).await;

    let attempt = store
        .acquire_lock(&tenant, &key, "runner-a", 30_000, now + 2)
        .await
        .expect("acquire_lock");
    let LockAttempt::Acquired(fence, session) = attempt else {
        panic!("the lock was free: {attempt:?}");
    };
    assert_eq!(session.session_id, first.session_id);
    assert_eq!(session.lock_owner.as_deref(), Some("runner-a"));
    assert_eq!(session.fence, fence.token.0);
    assert!(session.is_turn_of(first.session_seq));
    assert!(!session.is_turn_of(second.session_seq));

    // WHEN the first run finishes (the commit counts it) and the lock is taken again
    let mut done = fixtures::running(&first, now + 3);
    done.status = RunStatus::Ok;
    let commit = Commit {
        run: Some(done),
        session: Some(SessionUpdate {
            status: agentlane_core::SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: now + 3,
            finished_delta: 1,
        }),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");
    let attempt = store
        .acquire_lock(&tenant, &key, "runner-b", 30_000, now + 4)
        .await
        .expect("acquire_lock");
    let LockAttempt::Acquired(_, session) = attempt else {
        panic!("the lock was released: {attempt:?}");
    };

    // THEN the second run's turn has come
    assert_eq!(session.runs_finished, 1);
    assert!(session.is_turn_of(second.session_seq));
}

/// The same idempotency key with a different message, or on another session key, is a
/// `Conflict` and writes nothing; the same request again answers the first run.
pub async fn case_idempotency_key_with_a_different_request_conflicts(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let idem = fixtures::unique("idem");
    let mut turn = fixtures::turn(&tenant, &key, now);
    turn.idempotency_key = Some(idem.clone());
    let first = store.accept_turn(turn).await.expect("accept_turn");

    let mut other_text = fixtures::turn(&tenant, &key, now + 1);
    other_text.idempotency_key = Some(idem.clone());
    other_text.request = fixtures::request("a different message");
    let refused = store.accept_turn(other_text.clone()).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );

    let other_key = fixtures::session_key();
    let mut elsewhere = fixtures::turn(&tenant, &other_key, now + 2);
    elsewhere.idempotency_key = Some(idem.clone());
    let refused = store.accept_turn(elsewhere).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(
        store
            .get_session(&tenant, &other_key)
            .await
            .expect("get_session"),
        None
    );
    assert_eq!(
        store
            .get_run(&tenant, &other_text.run_id)
            .await
            .expect("get_run"),
        None
    );

    let mut same = fixtures::turn(&tenant, &key, now + 3);
    same.idempotency_key = Some(idem);
    let again = store.accept_turn(same).await.expect("accept_turn");
    assert!(!again.created);
    assert_eq!(again.run.run_id, first.run.run_id);
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.runs_accepted, 1);
}

/// A reset refused because a turn holds the lock holds the runs accepted before it for
/// [`RESET_HOLD_MS`] ([`Session::holds_for_reset`](agentlane_core::Session::holds_for_reset)),
/// not a run accepted after it, nor a run already started; once the reset goes through they
/// are reset runs ([`Session::was_reset_under`](agentlane_core::Session::was_reset_under)).
pub async fn case_a_reset_that_waits_holds_the_runs_accepted_before_it(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let running = fixtures::accept(&store, &tenant, &key, now).await;
    let queued = fixtures::accept(&store, &tenant, &key, now + 1).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 30_000, now + 2).await;

    // WHEN a reset finds the lock held
    let busy = store
        .reset_session(&tenant, &key, SessionId::generate(), now + 3)
        .await;
    assert_eq!(busy, Err(StoreError::Busy));
    let later = fixtures::accept(&store, &tenant, &key, now + 4).await;

    // THEN the session still has its id, and holds the two runs accepted before the reset
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.session_id, running.session_id);
    assert_eq!(session.reset_barrier, 2);
    assert_eq!(session.reset_barrier_until, now + 3 + RESET_HOLD_MS);
    assert!(session.holds_for_reset(&queued, now + 4));
    assert!(!session.was_reset_under(&queued), "nothing is reset yet");
    assert!(!session.holds_for_reset(&later, now + 4));
    // a run already started is not held: it ends as it would have
    assert!(!session.holds_for_reset(&fixtures::running(&running, now + 2), now + 4));

    // AND once the lock is free the reset goes through: the runs before it are reset runs
    store.release_lock(&fence).await.expect("release_lock");
    let reset = store
        .reset_session(&tenant, &key, SessionId::generate(), now + 5)
        .await
        .expect("reset_session");
    assert!(reset.was_reset_under(&queued));
    assert!(reset.was_reset_under(&later), "accepted on the old id");
}

/// The cap on a session's open runs is hard: with room for `ROOM` more runs under
/// `max_open_runs = CAP`, of `ROOM + 10` turns accepted at the same time on the key exactly
/// `ROOM` are accepted and every other one is refused `SessionFull` with nothing written; a key
/// with room (another session) is unaffected. The guard is the one that numbers runs (the
/// accept is conditional on the count it read), so on moto this case shares the flakiness of
/// the case above: moto's transactions are not isolated and now and then hand one count to
/// two accepts, which real DynamoDB cannot.
pub async fn case_concurrent_accepts_stop_at_the_session_cap(store: Arc<dyn Store>) {
    const CAP: u64 = 4;
    const ROOM: u64 = CAP - 1;
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let racers: Vec<_> = (0..ROOM + 10)
        .map(|i| {
            let (store, tenant, key) = (store.clone(), tenant.clone(), key.clone());
            tokio::spawn(async move {
                let turn = agentlane_core::NewTurn {
                    max_open_runs: CAP,
                    default_mode: None,
                    ..fixtures::turn(&tenant, &key, now + 1 + i)
                };
                let run_id = turn.run_id.clone();
                (run_id, store.accept_turn(turn).await)
            })
        })
        .collect();
    let (mut accepted, mut refused) = (0, Vec::new());
    for racer in racers {
        let (run_id, outcome) = racer.await.expect("racer task");
        match outcome {
            Ok(outcome) => {
                assert!(outcome.created);
                accepted += 1;
            }
            Err(StoreError::SessionFull { open, cap }) => {
                assert_eq!((open, cap), (CAP, CAP));
                refused.push(run_id);
            }
            Err(other) => panic!("an accept failed otherwise: {other:?}"),
        }
    }
    assert_eq!(accepted, ROOM, "exactly the room left is accepted");
    assert_eq!(refused.len(), 10);
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.runs_accepted, CAP);
    for run_id in refused {
        assert_eq!(
            store.get_run(&tenant, &run_id).await.expect("get_run"),
            None,
            "a refused turn wrote no run"
        );
    }
    // Another session of the tenant still has room.
    let other = agentlane_core::SessionKey::new(format!("{}-other", key.as_str()));
    let turn = agentlane_core::NewTurn {
        max_open_runs: CAP,
        default_mode: None,
        ..fixtures::turn(&tenant, &other, now)
    };
    store.accept_turn(turn).await.expect("another session");
}

/// A reset that gives up changes nothing: every busy answer holds the runs accepted before it
/// only for [`RESET_HOLD_MS`] from that answer; once the last hold is over they are neither
/// held nor reset runs.
pub async fn case_a_reset_that_gives_up_changes_nothing(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let running = fixtures::accept(&store, &tenant, &key, now).await;
    let queued = fixtures::accept(&store, &tenant, &key, now + 1).await;
    let _fence = fixtures::lock(&store, &tenant, &key, "runner-a", 60_000, now + 2).await;

    // WHEN a reset is refused twice (it keeps trying), then gives up
    for at in [now + 3, now + 1_000] {
        let busy = store
            .reset_session(&tenant, &key, SessionId::generate(), at)
            .await;
        assert_eq!(busy, Err(StoreError::Busy));
    }

    // THEN the hold runs from the last refusal, and after it the queued run is free to run
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.session_id, running.session_id);
    assert!(session.holds_for_reset(&queued, now + 3 + RESET_HOLD_MS + 1));
    let after = now + 1_000 + RESET_HOLD_MS + 1;
    assert!(!session.holds_for_reset(&queued, after));
    assert!(!session.was_reset_under(&queued));
}
