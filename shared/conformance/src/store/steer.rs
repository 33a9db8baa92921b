//! Steering (SPEC §4): the running run takes the steer messages accepted after it, in one fenced
//! write, and nothing else.

use crate::fixtures;
use agentlane_core::{
    AbortReason, Message, QueueMode, QueueOutcome, Run, RunId, RunStatus, SessionKey, SteerTake,
    Store, StoreError, TenantId,
};
use std::sync::Arc;

async fn accept_as(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    key: &SessionKey,
    now: u64,
    mode: QueueMode,
    message: &str,
) -> Run {
    let mut turn = fixtures::turn(tenant, key, now);
    turn.request.queue_mode = Some(mode);
    turn.request.message = message.to_owned();
    store.accept_turn(turn).await.expect("accept_turn").run
}

async fn run(store: &Arc<dyn Store>, tenant: &TenantId, id: &RunId) -> Run {
    store
        .get_run(tenant, id)
        .await
        .expect("get_run")
        .expect("the run exists")
}

/// GIVEN a steer accepted before the carrier, the carrier, a followup, two steers and a steer
/// asked to abort, WHEN the carrier takes its steers, THEN exactly the two steers after it are
/// taken, oldest first: appended to the transcript as the carrier's user entries from its next
/// seq, their runs `steered` into it (still `queued`); a second take finds nothing, and a take
/// with a stale fence writes nothing. `steers_waiting` says a steer waits before the take
/// (writing nothing) and none after it.
pub async fn case_a_running_run_takes_the_steers_accepted_after_it(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let early = accept_as(&store, &tenant, &key, now, QueueMode::Steer, "early").await;
    let carrier = accept_as(&store, &tenant, &key, now + 1, QueueMode::Followup, "go").await;
    let followup = accept_as(&store, &tenant, &key, now + 2, QueueMode::Followup, "later").await;
    let first = accept_as(
        &store,
        &tenant,
        &key,
        now + 3,
        QueueMode::Steer,
        "turn left",
    )
    .await;
    let second = accept_as(
        &store,
        &tenant,
        &key,
        now + 4,
        QueueMode::Steer,
        "then right",
    )
    .await;
    let aborted = accept_as(
        &store,
        &tenant,
        &key,
        now + 5,
        QueueMode::Steer,
        "never mind",
    )
    .await;
    store
        .request_abort(&tenant, &aborted.run_id)
        .await
        .expect("request_abort");
    let take = SteerTake {
        carrier: carrier.run_id.clone(),
        carrier_seq: carrier.session_seq,
        session_id: carrier.session_id.clone(),
        next_seq: 0,
        now: now + 6,
        mode: QueueMode::Steer,
    };

    // A writer whose fence is stale takes nothing.
    let stale = fixtures::lock(&store, &tenant, &key, "runner-a", 10, now + 6).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-b", 30_000, now + 20).await;
    assert_eq!(
        store.take_steers(&stale, take.clone()).await,
        Err(StoreError::FenceLost)
    );
    assert_eq!(run(&store, &tenant, &first.run_id).await.into_run_id, None);

    // Asking whether a steer waits takes nothing.
    assert_eq!(store.steers_waiting(&fence, &take).await, Ok(true));
    assert_eq!(run(&store, &tenant, &first.run_id).await.into_run_id, None);
    assert!(
        store
            .read_transcript(&tenant, &carrier.session_id, None, 10)
            .await
            .expect("read_transcript")
            .is_empty()
    );

    // WHEN the carrier takes its steers
    let taken = store
        .take_steers(&fence, take.clone())
        .await
        .expect("take_steers");

    // THEN the two steers after it, oldest first, marked steered into it
    let ids: Vec<_> = taken.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(ids, [first.run_id.clone(), second.run_id.clone()]);
    for id in [&first.run_id, &second.run_id] {
        let stored = run(&store, &tenant, id).await;
        assert_eq!(stored.queue_outcome, QueueOutcome::Steered);
        assert_eq!(stored.into_run_id.as_ref(), Some(&carrier.run_id));
        assert_eq!(stored.status, RunStatus::Queued);
        let progress = store.run_progress(&tenant, id).await.expect("run_progress");
        assert_eq!(
            progress,
            Some(agentlane_core::RunProgress {
                status: RunStatus::Queued,
                carried: true
            }),
            "a wait on a carried run does not only wait"
        );
    }
    // AND their messages are the carrier's next transcript entries
    let transcript = store
        .read_transcript(&tenant, &carrier.session_id, None, 10)
        .await
        .expect("read_transcript");
    let seen: Vec<_> = transcript
        .iter()
        .map(|e| (e.seq, e.run_id.clone(), e.message.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (0, carrier.run_id.clone(), Message::user("turn left")),
            (1, carrier.run_id.clone(), Message::user("then right")),
        ]
    );
    // AND the others are untouched
    for other in [&early, &followup, &aborted] {
        let stored = run(&store, &tenant, &other.run_id).await;
        assert_eq!(
            (stored.queue_outcome, stored.into_run_id, stored.status),
            (QueueOutcome::Ran, None, RunStatus::Queued),
            "{}",
            other.request.message
        );
    }

    // AND a second take finds nothing to take, nor does asking
    assert_eq!(store.steers_waiting(&fence, &take).await, Ok(false));
    let again = store
        .take_steers(
            &fence,
            SteerTake {
                next_seq: 2,
                ..take
            },
        )
        .await
        .expect("take_steers");
    assert!(again.is_empty(), "{again:?}");
}

/// A steer accepted on a session id that was reset since is not taken by a run of the new one.
pub async fn case_a_steer_from_before_a_reset_is_not_taken(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let old = accept_as(&store, &tenant, &key, now, QueueMode::Steer, "old").await;
    let reset = store
        .reset_session(
            &tenant,
            &key,
            agentlane_core::SessionId::generate(),
            now + 1,
        )
        .await
        .expect("reset_session");
    let carrier = accept_as(&store, &tenant, &key, now + 2, QueueMode::Followup, "new").await;
    assert_eq!(carrier.session_id, reset.session_id);
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 30_000, now + 3).await;
    let taken = store
        .take_steers(
            &fence,
            SteerTake {
                carrier: carrier.run_id.clone(),
                // as if the old run were numbered after the carrier: the session id still keeps it out
                carrier_seq: 0,
                session_id: carrier.session_id.clone(),
                next_seq: 0,
                now: now + 3,
                mode: QueueMode::Steer,
            },
        )
        .await
        .expect("take_steers");
    assert!(taken.is_empty(), "{taken:?}");
    assert_eq!(run(&store, &tenant, &old.run_id).await.into_run_id, None);
}

/// A session's default queue mode applies to the turns accepted without one from then on; a
/// turn that names its mode keeps it; clearing the default brings `followup` back; a key
/// without a session is `NotFound`.
pub async fn case_a_sessions_default_queue_mode_applies_to_turns_without_one(
    store: Arc<dyn Store>,
) {
    let (tenant, key, now) = fixtures::fresh();
    let before = store
        .accept_turn(unset_mode(&tenant, &key, now))
        .await
        .expect("accept_turn")
        .run;
    assert_eq!(before.request.queue_mode, Some(QueueMode::Followup));

    // WHEN the session's default becomes steer
    let session = store
        .set_queue_mode(&tenant, &key, Some(QueueMode::Steer), now + 1)
        .await
        .expect("set_queue_mode");
    assert_eq!(session.queue_mode, Some(QueueMode::Steer));
    assert_eq!(
        fixtures::session(&store, &tenant, &key).await.queue_mode,
        Some(QueueMode::Steer)
    );

    // THEN a turn without a mode is a steer (and is found as one), a turn with one keeps it
    let steer = store
        .accept_turn(unset_mode(&tenant, &key, now + 2))
        .await
        .expect("accept_turn")
        .run;
    assert_eq!(steer.request.queue_mode, Some(QueueMode::Steer));
    let explicit = accept_as(&store, &tenant, &key, now + 3, QueueMode::Followup, "f").await;
    assert_eq!(explicit.request.queue_mode, Some(QueueMode::Followup));
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 30_000, now + 4).await;
    let taken = store
        .take_steers(
            &fence,
            SteerTake {
                carrier: before.run_id.clone(),
                carrier_seq: before.session_seq,
                session_id: before.session_id.clone(),
                next_seq: 0,
                now: now + 4,
                mode: QueueMode::Steer,
            },
        )
        .await
        .expect("take_steers");
    let ids: Vec<_> = taken.iter().map(|r| &r.run_id).collect();
    assert_eq!(ids, [&steer.run_id]);

    // AND cleared, the default is followup again
    let cleared = store
        .set_queue_mode(&tenant, &key, None, now + 5)
        .await
        .expect("set_queue_mode");
    assert_eq!(cleared.queue_mode, None);
    let after = store
        .accept_turn(unset_mode(&tenant, &key, now + 6))
        .await
        .expect("accept_turn")
        .run;
    assert_eq!(after.request.queue_mode, Some(QueueMode::Followup));

    // AND a key without a session is not found
    let unknown = store
        .set_queue_mode(
            &tenant,
            &fixtures::session_key(),
            Some(QueueMode::Steer),
            now,
        )
        .await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
}

fn unset_mode(tenant: &TenantId, key: &SessionKey, now: u64) -> agentlane_core::NewTurn {
    let mut turn = fixtures::turn(tenant, key, now);
    turn.request.queue_mode = None;
    turn
}

/// GIVEN a collect carrier, then a collect, a steer, two collects and a collect asked to abort,
/// WHEN the carrier takes its collects, THEN the three collects after it are taken, oldest
/// first: the carrier's next user entries, their runs `collected` into it (still `queued`);
/// the steer stays pending (a steer take afterwards still takes it), and the taken collects
/// are not taken again.
pub async fn case_a_collect_carrier_takes_the_collects_and_leaves_the_steers(
    store: Arc<dyn Store>,
) {
    let (tenant, key, now) = fixtures::fresh();
    let carrier = accept_as(&store, &tenant, &key, now, QueueMode::Collect, "one").await;
    let two = accept_as(&store, &tenant, &key, now + 1, QueueMode::Collect, "two").await;
    let steer = accept_as(&store, &tenant, &key, now + 2, QueueMode::Steer, "left").await;
    let three = accept_as(&store, &tenant, &key, now + 3, QueueMode::Collect, "three").await;
    let four = accept_as(&store, &tenant, &key, now + 4, QueueMode::Collect, "four").await;
    let aborted = accept_as(&store, &tenant, &key, now + 5, QueueMode::Collect, "no").await;
    store
        .request_abort(&tenant, &aborted.run_id)
        .await
        .expect("request_abort");
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 30_000, now + 6).await;
    let take = SteerTake {
        carrier: carrier.run_id.clone(),
        carrier_seq: carrier.session_seq,
        session_id: carrier.session_id.clone(),
        next_seq: 1,
        now: now + 6,
        mode: QueueMode::Collect,
    };

    // WHEN the carrier takes its collects
    let taken = store
        .take_steers(&fence, take.clone())
        .await
        .expect("take collects");

    // THEN the three collects after it, oldest first, collected into it
    let ids: Vec<_> = taken.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(
        ids,
        [
            two.run_id.clone(),
            three.run_id.clone(),
            four.run_id.clone()
        ]
    );
    for id in &ids {
        let stored = run(&store, &tenant, id).await;
        assert_eq!(
            (stored.queue_outcome, stored.into_run_id, stored.status),
            (
                QueueOutcome::Collected,
                Some(carrier.run_id.clone()),
                RunStatus::Queued
            )
        );
    }
    let transcript = store
        .read_transcript(&tenant, &carrier.session_id, None, 10)
        .await
        .expect("read_transcript");
    let seen: Vec<_> = transcript
        .iter()
        .map(|e| (e.seq, e.message.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, Message::user("two")),
            (2, Message::user("three")),
            (3, Message::user("four")),
        ]
    );
    // AND the steer and the aborted collect were not taken
    for other in [&steer, &aborted] {
        let stored = run(&store, &tenant, &other.run_id).await;
        assert_eq!(
            (stored.queue_outcome, stored.into_run_id),
            (QueueOutcome::Ran, None)
        );
    }

    // AND a second collect take finds nothing, while a steer take still finds the steer
    let again = store
        .take_steers(
            &fence,
            SteerTake {
                next_seq: 4,
                ..take.clone()
            },
        )
        .await
        .expect("take collects");
    assert!(again.is_empty(), "{again:?}");
    let steered = store
        .take_steers(
            &fence,
            SteerTake {
                next_seq: 4,
                mode: QueueMode::Steer,
                ..take
            },
        )
        .await
        .expect("take_steers");
    let ids: Vec<_> = steered.iter().map(|r| &r.run_id).collect();
    assert_eq!(ids, [&steer.run_id]);
    assert_eq!(
        run(&store, &tenant, &steer.run_id).await.queue_outcome,
        QueueOutcome::Steered
    );
}

/// An `interrupt` accepted behind unfinished runs marks the session in its accept (its run,
/// its seq, and the seq of the run it interrupts); one on a session with nothing unfinished
/// leaves the mark as it was; a later interrupt replaces it.
pub async fn case_an_interrupt_behind_unfinished_runs_marks_the_session(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let lone = accept_as(&store, &tenant, &key, now, QueueMode::Interrupt, "alone").await;
    assert_eq!(
        fixtures::session(&store, &tenant, &key).await.interrupt,
        None
    );
    let _followup = accept_as(&store, &tenant, &key, now + 1, QueueMode::Followup, "f").await;
    let first = accept_as(&store, &tenant, &key, now + 2, QueueMode::Interrupt, "i1").await;
    assert_eq!(
        fixtures::session(&store, &tenant, &key).await.interrupt,
        Some(agentlane_core::InterruptMark {
            run_id: first.run_id.clone(),
            session_seq: 2,
            after: lone.session_seq,
        })
    );
    let second = accept_as(&store, &tenant, &key, now + 3, QueueMode::Interrupt, "i2").await;
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(
        session
            .interrupt
            .map(|m| (m.run_id, m.session_seq, m.after)),
        Some((second.run_id, 3, 0))
    );
    assert_eq!(session.runs_accepted, 4);
}

/// An interrupt accepted while an interrupt that went ahead of the runs before it is active
/// takes its place in the session's mark: it goes once that one has ended, after the same run.
/// Accepted once that interrupt has ended, it goes after the runs not finished.
pub async fn case_an_interrupt_takes_the_place_of_an_active_interrupt(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let _busy = accept_as(&store, &tenant, &key, now, QueueMode::Followup, "busy").await;
    let _held = accept_as(&store, &tenant, &key, now + 1, QueueMode::Followup, "f").await;
    let first = accept_as(&store, &tenant, &key, now + 2, QueueMode::Interrupt, "i1").await;
    // the busy run ends; the first interrupt starts ahead of the held run
    let session_update = |status, active: Option<&Run>, finished| agentlane_core::Commit {
        session: Some(agentlane_core::SessionUpdate {
            status,
            active_run_id: active.map(|r| r.run_id.clone()),
            last_progress_at: now + 3,
            finished_delta: finished,
        }),
        release_lock: true,
        ..agentlane_core::Commit::default()
    };
    for (status, active, finished) in [
        (agentlane_core::SessionStatus::Idle, None, 1),
        (agentlane_core::SessionStatus::Processing, Some(&first), 0),
    ] {
        let fence = fixtures::lock(&store, &tenant, &key, "runner", 60_000, now + 3).await;
        store
            .commit(&fence, session_update(status, active, finished))
            .await
            .expect("commit");
    }
    let mark = |store: Arc<dyn Store>| {
        let (tenant, key) = (tenant.clone(), key.clone());
        async move {
            fixtures::session(&store, &tenant, &key)
                .await
                .interrupt
                .map(|m| (m.run_id, m.session_seq, m.after))
        }
    };

    // WHEN a second interrupt arrives while the first is active
    let second = accept_as(&store, &tenant, &key, now + 4, QueueMode::Interrupt, "i2").await;
    // THEN it goes after the busy run too, ahead of the held run
    assert_eq!(mark(store.clone()).await, Some((second.run_id, 3, 0)));

    // AND once the first interrupt has ended, a third goes after the held run
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 60_000, now + 5).await;
    store
        .commit(
            &fence,
            session_update(agentlane_core::SessionStatus::Idle, None, 0),
        )
        .await
        .expect("commit");
    let third = accept_as(&store, &tenant, &key, now + 6, QueueMode::Interrupt, "i3").await;
    assert_eq!(mark(store).await, Some((third.run_id, 4, 1)));
}

/// An abort requested for an interrupt keeps that reason (read back on the run), and a later
/// plain request does not change it.
pub async fn case_an_interrupt_abort_request_keeps_its_reason(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let active = accept_as(&store, &tenant, &key, now, QueueMode::Followup, "busy").await;
    let asked = store
        .request_abort_for(&tenant, &active.run_id, AbortReason::Interrupted)
        .await
        .expect("request_abort_for")
        .expect("the run exists");
    assert!(asked.abort_requested);
    assert_eq!(asked.abort_reason, Some(AbortReason::Interrupted));
    store
        .request_abort(&tenant, &active.run_id)
        .await
        .expect("request_abort");
    let stored = run(&store, &tenant, &active.run_id).await;
    assert_eq!(stored.abort_reason, Some(AbortReason::Interrupted));
    assert_eq!(AbortReason::Interrupted.code(), "interrupted");
}
