//! Ingress writes: `accept_turn`, idempotency keys and tenant isolation.

use crate::fixtures;
use agentlane_core::{
    Commit, LivenessState, Run, RunId, RunProgress, RunStatus, SessionStatus, Store, StoreError,
    TenantId, Usage,
};
use std::sync::Arc;

/// The first turn of a key creates its session with the id the caller minted and a `queued` run
/// on it; both read back exactly as written.
pub async fn case_accept_turn_creates_session_and_queued_run(store: Arc<dyn Store>) {
    // GIVEN a key nobody used yet
    let (tenant, key, now) = fixtures::fresh();
    assert_eq!(
        store.get_session(&tenant, &key).await.expect("get_session"),
        None
    );
    let turn = fixtures::turn(&tenant, &key, now);

    // WHEN a turn is accepted
    let outcome = store.accept_turn(turn.clone()).await.expect("accept_turn");

    // THEN the run is new, queued, on the minted session id
    assert!(outcome.created);
    let expected = Run {
        run_id: turn.run_id.clone(),
        tenant: tenant.clone(),
        session_key: key.clone(),
        session_id: turn.new_session_id.clone(),
        status: RunStatus::Queued,
        liveness_state: LivenessState::Working,
        // The store records the agent's version at accept: 0 is the deployment's own `main`.
        request: agentlane_core::TurnRequest {
            agent_version: Some(agentlane_core::agent::DEPLOYMENT_VERSION),
            ..turn.request.clone()
        },
        idempotency_key: None,
        accepted_at: now,
        started_at: None,
        ended_at: None,
        model: None,
        attempts: vec![],
        usage: Usage::default(),
        cost_usd: None,
        payloads: vec![],
        error: None,
        abort_requested: false,
        abort_reason: None,
        pickups: 0,
        hand_backs: 0,
        checkpoint: None,
        session_seq: 0,
        request_fingerprint: Some(turn.request.fingerprint(&key)),
        queue_outcome: Default::default(),
        into_run_id: None,
        out_of_turn: false,
        warnings: Vec::new(),
        required_action: None,
        paused_ms: 0,
        action_answer: None,
    };
    assert_eq!(outcome.run, expected);
    let stored = store.get_run(&tenant, &turn.run_id).await.expect("get_run");
    assert_eq!(stored, Some(expected));

    // AND the session exists, idle, unlocked, counting one accepted turn
    let session = store
        .get_session(&tenant, &key)
        .await
        .expect("get_session")
        .expect("the session was created");
    assert_eq!(session.tenant, tenant);
    assert_eq!(session.session_key, key);
    assert_eq!(session.session_id, turn.new_session_id);
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.active_run_id, None);
    assert_eq!(session.created_at, now);
    assert_eq!(session.runs_accepted, 1);
    assert_eq!(session.runs_finished, 0);
    assert_eq!(session.lock_owner, None);
}

/// A second turn of the same key lands on the same session id (the id the caller minted for it is
/// ignored) and the session counts both.
pub async fn case_second_turn_keeps_session_id(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let first = fixtures::accept(&store, &tenant, &key, now).await;

    let second_turn = fixtures::turn(&tenant, &key, now + 10);
    let second = store
        .accept_turn(second_turn.clone())
        .await
        .expect("accept_turn");

    assert!(second.created);
    assert_eq!(second.run.run_id, second_turn.run_id);
    assert_ne!(second.run.run_id, first.run_id);
    assert_eq!(second.run.session_id, first.session_id);
    assert_ne!(second.run.session_id, second_turn.new_session_id);
    assert_eq!(second.run.status, RunStatus::Queued);
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.session_id, first.session_id);
    assert_eq!(session.runs_accepted, 2);
    for run_id in [&first.run_id, &second.run.run_id] {
        let run = store.get_run(&tenant, run_id).await.expect("get_run");
        assert!(run.is_some(), "{run_id} is stored");
    }
}

/// The same idempotency key within its TTL answers the first run, `created: false`, and writes
/// nothing: no second run, no second accepted turn.
pub async fn case_idempotency_key_answers_the_same_run(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let idem = fixtures::unique("idem");
    let mut first_turn = fixtures::turn(&tenant, &key, now);
    first_turn.idempotency_key = Some(idem.clone());
    let first = store.accept_turn(first_turn).await.expect("accept_turn");
    assert!(first.created);
    assert_eq!(first.run.idempotency_key.as_deref(), Some(idem.as_str()));

    // WHEN the client retries (same request, new run id) a minute later
    let mut retry = fixtures::turn(&tenant, &key, now + 60_000);
    retry.idempotency_key = Some(idem.clone());
    let again = store.accept_turn(retry.clone()).await.expect("accept_turn");

    // THEN it gets the first run back and nothing new exists
    assert!(!again.created);
    assert_eq!(again.run, first.run);
    assert_eq!(
        store
            .get_run(&tenant, &retry.run_id)
            .await
            .expect("get_run"),
        None
    );
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.runs_accepted, 1);
}

/// An idempotency key maps to its run only for its TTL; afterwards the same key makes a new run.
pub async fn case_idempotency_key_expires_after_ttl(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let idem = fixtures::unique("idem");
    let keyed = |at: u64| {
        let mut turn = fixtures::turn(&tenant, &key, at);
        turn.idempotency_key = Some(idem.clone());
        turn.idempotency_ttl_ms = 1_000;
        turn
    };
    let first = store.accept_turn(keyed(now)).await.expect("accept_turn");
    assert!(first.created);

    let within = store
        .accept_turn(keyed(now + 500))
        .await
        .expect("accept_turn");
    assert!(
        !within.created,
        "the key is live 500 ms after a 1000 ms TTL started"
    );
    assert_eq!(within.run.run_id, first.run.run_id);

    let late_turn = keyed(now + 1_500);
    let late = store
        .accept_turn(late_turn.clone())
        .await
        .expect("accept_turn");
    assert!(
        late.created,
        "the key expired 1000 ms after it was recorded"
    );
    assert_eq!(late.run.run_id, late_turn.run_id);
    assert_eq!(late.run.session_id, first.run.session_id);

    // and the renewed key now answers the new run
    let after = store
        .accept_turn(keyed(now + 1_700))
        .await
        .expect("accept_turn");
    assert!(!after.created);
    assert_eq!(after.run.run_id, late_turn.run_id);
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.runs_accepted, 2);
}

/// Two tenants using the same session key and the same idempotency key get independent runs
/// and sessions.
pub async fn case_idempotency_keys_are_per_tenant(store: Arc<dyn Store>) {
    let (key, now, idem) = (
        fixtures::session_key(),
        fixtures::wall_ms(),
        fixtures::unique("idem"),
    );
    let (a, b) = (fixtures::tenant(), fixtures::tenant());
    let keyed = |tenant: &TenantId| {
        let mut turn = fixtures::turn(tenant, &key, now);
        turn.idempotency_key = Some(idem.clone());
        turn
    };
    let (turn_a, turn_b) = (keyed(&a), keyed(&b));
    let run_a = store.accept_turn(turn_a.clone()).await.expect("accept a");
    let run_b = store.accept_turn(turn_b.clone()).await.expect("accept b");

    assert!(run_a.created && run_b.created);
    assert_eq!(run_a.run.run_id, turn_a.run_id);
    assert_eq!(run_b.run.run_id, turn_b.run_id);
    assert_eq!(run_a.run.session_id, turn_a.new_session_id);
    assert_eq!(run_b.run.session_id, turn_b.new_session_id);
    for tenant in [&a, &b] {
        let session = store
            .get_session(tenant, &key)
            .await
            .expect("get_session")
            .expect("session");
        assert_eq!(session.runs_accepted, 1, "{tenant}");
    }
}

/// Another tenant cannot see or touch a tenant's run, session, transcript or events, even
/// knowing every id.
pub async fn case_tenant_isolation(store: Arc<dyn Store>) {
    // GIVEN tenant A with a run, a transcript entry and an event
    let (owner, key, now) = (
        fixtures::tenant(),
        fixtures::session_key(),
        fixtures::wall_ms(),
    );
    let run = fixtures::accept(&store, &owner, &key, now).await;
    let fence = fixtures::lock(&store, &owner, &key, "runner-a", 30_000, now).await;
    let commit = Commit {
        run_id: None,
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        events: vec![fixtures::event(1, now)],
        run: Some(fixtures::running(&run, now)),
        session: None,
        release_lock: true,
    };
    store.commit(&fence, commit).await.expect("commit");

    // WHEN tenant B asks with A's ids
    let other = fixtures::tenant();
    assert_eq!(
        store.get_run(&other, &run.run_id).await.expect("get_run"),
        None
    );
    assert_eq!(
        store.get_session(&other, &key).await.expect("get_session"),
        None
    );
    let transcript = store
        .read_transcript(&other, &run.session_id, None, 100)
        .await
        .expect("read_transcript");
    assert!(transcript.is_empty(), "B reads none of A's transcript");
    let events = store
        .read_events(&other, &run.run_id, None, 100)
        .await
        .expect("read_events");
    assert!(events.is_empty(), "B reads none of A's events");
    assert_eq!(
        store
            .request_abort(&other, &run.run_id)
            .await
            .expect("abort"),
        None
    );
    let reset = store
        .reset_session(&other, &key, agentlane_core::SessionId::generate(), now + 1)
        .await;
    assert!(
        matches!(reset, Err(StoreError::NotFound(_))),
        "B cannot reset A's session: {reset:?}"
    );

    // THEN A's records are untouched
    let stored = store
        .get_run(&owner, &run.run_id)
        .await
        .expect("get_run")
        .expect("A's run");
    assert!(!stored.abort_requested);
    assert_eq!(stored.status, RunStatus::Running);
    let session = store
        .get_session(&owner, &key)
        .await
        .expect("get_session")
        .expect("A's session");
    assert_eq!(session.session_id, run.session_id);
    let own = store
        .read_transcript(&owner, &run.session_id, None, 100)
        .await
        .expect("read_transcript");
    assert_eq!(own, vec![fixtures::entry(1, &run.run_id, now)]);
}

/// `request_abort` of an unknown run answers `None` and creates nothing.
pub async fn case_request_abort_unknown_run_is_none(store: Arc<dyn Store>) {
    let tenant = fixtures::tenant();
    let run_id = RunId::generate();
    assert_eq!(
        store.request_abort(&tenant, &run_id).await.expect("abort"),
        None
    );
    assert_eq!(
        store.get_run(&tenant, &run_id).await.expect("get_run"),
        None
    );
}

/// `abort_requested` is false for an unknown run and for another tenant's run, and true once
/// the run's tenant asked for an abort.
pub async fn case_abort_requested_reads_the_flag(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let tenant = fixtures::tenant();
    let run = fixtures::accept(&store, &tenant, &fixtures::session_key(), now).await;
    let read = |t: TenantId, id: RunId| {
        let store = store.clone();
        async move {
            store
                .abort_requested(&t, &id)
                .await
                .expect("abort_requested")
        }
    };
    assert!(
        !read(tenant.clone(), RunId::generate()).await,
        "unknown run"
    );
    assert!(
        !read(tenant.clone(), run.run_id.clone()).await,
        "not asked yet"
    );
    store
        .request_abort(&tenant, &run.run_id)
        .await
        .expect("abort");
    assert!(read(tenant.clone(), run.run_id.clone()).await, "asked");
    assert!(
        !read(fixtures::tenant(), run.run_id.clone()).await,
        "another tenant sees nothing"
    );
}

/// `run_progress` follows the run: `None` for an unknown run and for another tenant's, then the
/// status as the run goes from queued through running to ok (a wait only waits while queued or
/// running).
pub async fn case_run_progress_follows_the_run(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (tenant, key) = (fixtures::tenant(), fixtures::session_key());
    let run = fixtures::accept(&store, &tenant, &key, now).await;
    let progress = |t: TenantId, id: RunId| {
        let store = store.clone();
        async move { store.run_progress(&t, &id).await.expect("run_progress") }
    };
    assert_eq!(
        progress(tenant.clone(), RunId::generate()).await,
        None,
        "unknown run"
    );
    assert_eq!(
        progress(fixtures::tenant(), run.run_id.clone()).await,
        None,
        "another tenant sees nothing"
    );
    let queued = progress(tenant.clone(), run.run_id.clone()).await;
    assert_eq!(
        queued,
        Some(RunProgress {
            status: RunStatus::Queued,
            carried: false
        })
    );
    assert!(queued.is_some_and(|p| p.only_waits()));

    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 60_000, now).await;
    let start = Commit {
        run: Some(fixtures::running(&run, now)),
        ..Commit::default()
    };
    store.commit(&fence, start).await.expect("start");
    let running = progress(tenant.clone(), run.run_id.clone()).await;
    assert_eq!(running.map(|p| p.status), Some(RunStatus::Running));
    store
        .commit(&fence, fixtures::finished(&run, now + 1))
        .await
        .expect("end");
    let ended = progress(tenant.clone(), run.run_id.clone()).await;
    assert_eq!(ended.map(|p| p.status), Some(RunStatus::Ok));
    assert!(ended.is_some_and(|p| !p.only_waits()));
}
