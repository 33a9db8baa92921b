//! Fenced writes: all-or-nothing commits, ordering and paging of what they wrote, and the fields a
//! commit must leave alone.

use crate::fixtures;
use agentlane_core::{
    AbortReason, AcceptedRecord, Commit, Fence, Payload, Run, RunStatus, SessionStatus,
    SessionUpdate, Store, StoreError, Usage,
};
use std::sync::Arc;

pub(crate) const LEASE_MS: u64 = 30_000;

/// A session with one queued run, locked by `runner-a`.
pub(crate) async fn locked_run(store: &Arc<dyn Store>, now: u64) -> (Run, Fence) {
    let (tenant, key) = (fixtures::tenant(), fixtures::session_key());
    let run = fixtures::accept(store, &tenant, &key, now).await;
    let fence = fixtures::lock(store, &tenant, &key, "runner-a", LEASE_MS, now).await;
    (run, fence)
}

pub(crate) use crate::fixtures::stored_run;

/// `run` finished `ok` with a reply.
pub(crate) fn finished(run: &Run, now: u64) -> Run {
    Run {
        status: RunStatus::Ok,
        ended_at: Some(now),
        usage: Usage {
            input_tokens: 12,
            output_tokens: 7,
            ..Default::default()
        },
        payloads: vec![Payload {
            text: "done".into(),
            is_error: false,
        }],
        ..run.clone()
    }
}

/// A writer whose lease was taken over writes nothing at all: no entry, no event, no run or
/// session change, no lock release.
pub async fn case_stale_fence_commit_writes_nothing(store: Arc<dyn Store>) {
    // GIVEN runner A wrote once, then lost its lease to runner B
    let now = fixtures::wall_ms();
    let (tenant, key) = (fixtures::tenant(), fixtures::session_key());
    let run = fixtures::accept(&store, &tenant, &key, now).await;
    let stale = fixtures::lock(&store, &tenant, &key, "runner-a", 1_000, now).await;
    let started = fixtures::running(&run, now);
    let first = Commit {
        run_id: None,
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        events: vec![fixtures::event(1, now)],
        run: Some(started.clone()),
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: Some(run.run_id.clone()),
            last_progress_at: now,
            finished_delta: 0,
        }),
        release_lock: false,
    };
    store.commit(&stale, first).await.expect("first commit");
    let current = fixtures::lock(&store, &tenant, &key, "runner-b", LEASE_MS, now + 1_001).await;
    let session_before = fixtures::session(&store, &tenant, &key).await;

    // WHEN A tries to finish the run
    let late = Commit {
        run_id: None,
        transcript: vec![fixtures::entry(2, &run.run_id, now + 1_100)],
        events: vec![fixtures::event(2, now + 1_100)],
        run: Some(finished(&started, now + 1_100)),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: now + 1_100,
            finished_delta: 1,
        }),
        release_lock: true,
    };
    let result = store.commit(&stale, late).await;

    // THEN it is refused and nothing of it is visible
    assert_eq!(result, Err(StoreError::FenceLost));
    let transcript = store
        .read_transcript(&tenant, &run.session_id, None, 100)
        .await
        .expect("read_transcript");
    assert_eq!(transcript, vec![fixtures::entry(1, &run.run_id, now)]);
    let events = store
        .read_events(&tenant, &run.run_id, None, 100)
        .await
        .expect("read_events");
    assert_eq!(events, vec![fixtures::event(1, now)]);
    assert_eq!(stored_run(&store, &run).await, started);
    let session_after = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session_after, session_before);

    // AND the current holder writes the very same seq without conflict
    let rightful = Commit {
        transcript: vec![fixtures::entry(2, &run.run_id, now + 1_200)],
        events: vec![fixtures::event(2, now + 1_200)],
        run: Some(started),
        ..Commit::default()
    };
    store
        .commit(&current, rightful)
        .await
        .expect("current holder commits");
}

/// A commit whose transcript seq (or event seq) is taken answers `Conflict` and none of its other
/// parts are visible.
pub async fn case_commit_is_atomic_on_seq_conflict(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let started = fixtures::running(&run, now);
    let base = Commit {
        transcript: vec![
            fixtures::entry(1, &run.run_id, now),
            fixtures::entry(2, &run.run_id, now),
        ],
        events: vec![fixtures::event(1, now)],
        run: Some(started.clone()),
        ..Commit::default()
    };
    store.commit(&fence, base).await.expect("first commit");
    let session_before = store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session");

    // a taken transcript seq, placed after a free one
    let transcript_clash = Commit {
        run_id: None,
        transcript: vec![
            fixtures::entry(3, &run.run_id, now + 1),
            fixtures::entry(2, &run.run_id, now + 1),
        ],
        events: vec![fixtures::event(2, now + 1)],
        run: Some(finished(&started, now + 1)),
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: Some(run.run_id.clone()),
            last_progress_at: now + 1,
            finished_delta: 1,
        }),
        release_lock: true,
    };
    let result = store.commit(&fence, transcript_clash).await;
    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");

    // a taken event seq, placed after a free one, with a free transcript seq
    let event_clash = Commit {
        run_id: None,
        transcript: vec![fixtures::entry(3, &run.run_id, now + 2)],
        events: vec![fixtures::event(2, now + 2), fixtures::event(1, now + 2)],
        run: Some(finished(&started, now + 2)),
        session: None,
        release_lock: true,
    };
    let result = store.commit(&fence, event_clash).await;
    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");

    let transcript = store
        .read_transcript(&run.tenant, &run.session_id, None, 100)
        .await
        .expect("read_transcript");
    assert_eq!(
        transcript,
        vec![
            fixtures::entry(1, &run.run_id, now),
            fixtures::entry(2, &run.run_id, now)
        ]
    );
    let events = store
        .read_events(&run.tenant, &run.run_id, None, 100)
        .await
        .expect("read_events");
    assert_eq!(events, vec![fixtures::event(1, now)]);
    assert_eq!(stored_run(&store, &run).await, started);
    let session_after = store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session");
    assert_eq!(
        session_after, session_before,
        "no session update, lock kept"
    );
    store
        .commit(&fence, Commit::default())
        .await
        .expect("the lock was not released by the refused commits");
}

/// Transcript entries read back in seq order (numeric, not lexical) across commits, whole; `after`
/// and `limit` page through them.
pub async fn case_transcript_order_and_paging(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let all: Vec<_> = (1..=12)
        .map(|seq| fixtures::entry(seq, &run.run_id, now + seq))
        .collect();
    for chunk in [&all[..4], &all[4..9], &all[9..]] {
        let commit = Commit {
            transcript: chunk.to_vec(),
            ..Commit::default()
        };
        store.commit(&fence, commit).await.expect("commit");
    }
    let read = |after: Option<u64>, limit: usize| {
        let store = store.clone();
        let (tenant, session_id) = (run.tenant.clone(), run.session_id.clone());
        async move {
            store
                .read_transcript(&tenant, &session_id, after, limit)
                .await
                .expect("read_transcript")
        }
    };

    assert_eq!(read(None, 100).await, all);
    assert_eq!(read(None, 3).await, all[..3].to_vec());
    assert_eq!(read(Some(3), 2).await, all[3..5].to_vec());
    assert_eq!(read(Some(9), 100).await, all[9..].to_vec());
    assert_eq!(read(Some(12), 100).await, vec![]);
    // paging by the last seq seen visits every entry once
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = read(after, 5).await;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        paged.extend(page);
    }
    assert_eq!(paged, all);
}

/// Events read back in seq order across commits, whole; `after` and `limit` page through them.
pub async fn case_events_order_and_paging(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let all: Vec<_> = (1..=12)
        .map(|seq| fixtures::event(seq, now + seq))
        .collect();
    let started = fixtures::running(&run, now);
    // The middle chunk is an events-only commit naming its run by `run_id` alone.
    for (i, chunk) in [&all[..2], &all[2..10], &all[10..]].into_iter().enumerate() {
        let commit = Commit {
            events: chunk.to_vec(),
            run: (i != 1).then(|| started.clone()),
            run_id: (i == 1).then(|| run.run_id.clone()),
            ..Commit::default()
        };
        store.commit(&fence, commit).await.expect("commit");
    }
    let read = |after: Option<u64>, limit: usize| {
        let store = store.clone();
        let (tenant, run_id) = (run.tenant.clone(), run.run_id.clone());
        async move {
            store
                .read_events(&tenant, &run_id, after, limit)
                .await
                .expect("read_events")
        }
    };

    assert_eq!(read(None, 100).await, all);
    assert_eq!(read(None, 1).await, all[..1].to_vec());
    assert_eq!(read(Some(8), 3).await, all[8..11].to_vec());
    assert_eq!(read(Some(11), 100).await, all[11..].to_vec());
    assert_eq!(read(Some(12), 100).await, vec![]);
    let other = fixtures::accept(&store, &run.tenant, &run.session_key, now).await;
    let other_events = store
        .read_events(&run.tenant, &other.run_id, None, 100)
        .await
        .expect("read_events");
    assert!(other_events.is_empty(), "events belong to their run only");
}

/// A commit with `release_lock` frees the lock in the same write: another owner acquires at the
/// same instant and the released fence is dead.
pub async fn case_commit_release_lock_frees_lock(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let commit = Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        run: Some(finished(&fixtures::running(&run, now), now)),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");

    let session = store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session")
        .expect("session");
    assert_eq!(session.lock_owner, None);
    let next = fixtures::lock(
        &store,
        &run.tenant,
        &run.session_key,
        "runner-b",
        LEASE_MS,
        now,
    )
    .await;
    assert!(next.token > fence.token);
    assert_eq!(
        store.commit(&fence, Commit::default()).await,
        Err(StoreError::FenceLost)
    );
    assert_eq!(stored_run(&store, &run).await.status, RunStatus::Ok);
}

/// `request_abort` sets the flag; a runner's later run replace (from a copy without the flag)
/// keeps it, while every other field comes from the runner.
pub async fn case_commit_preserves_abort_requested(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let started = fixtures::running(&run, now);
    let commit = Commit {
        run: Some(started.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");

    let aborted = store
        .request_abort(&run.tenant, &run.run_id)
        .await
        .expect("request_abort")
        .expect("the run exists");
    assert!(aborted.abort_requested);
    assert_eq!(aborted.status, RunStatus::Running);

    // WHEN the runner writes its stale copy (abort_requested = false)
    let progressed = Run {
        checkpoint: Some(serde_json::json!({ "attempt": 2 })),
        usage: Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Default::default()
        },
        ..started.clone()
    };
    assert!(!progressed.abort_requested);
    let commit = Commit {
        run: Some(progressed.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");

    // THEN the flag survives and everything else is the runner's
    let stored = stored_run(&store, &run).await;
    assert_eq!(
        stored,
        Run {
            abort_requested: true,
            abort_reason: None,
            ..progressed
        }
    );
}

/// The supervisor's abort (`request_abort_for(Stuck)`) is read back with its reason, which a
/// runner's later replace of the run (from a copy without it) keeps, as does a later plain
/// request; a plain request alone has no reason.
pub async fn case_a_stuck_abort_keeps_its_reason_through_commits(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let started = fixtures::running(&run, now);
    let commit = Commit {
        run: Some(started.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");

    // WHEN the supervisor asks the run to abort because it is stuck
    let asked = store
        .request_abort_for(&run.tenant, &run.run_id, AbortReason::Stuck)
        .await
        .expect("request_abort_for")
        .expect("the run exists");
    assert!(asked.abort_requested);
    assert_eq!(asked.abort_reason, Some(AbortReason::Stuck));
    assert!(
        store
            .abort_requested(&run.tenant, &run.run_id)
            .await
            .expect("abort_requested")
    );

    // AND the runner then writes its stale copy, and a client asks again
    let commit = Commit {
        run: Some(started.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");
    store
        .request_abort(&run.tenant, &run.run_id)
        .await
        .expect("request_abort");

    // THEN the stored run still says why it was first asked to abort
    let stored = stored_run(&store, &run).await;
    assert!(stored.abort_requested);
    assert_eq!(stored.abort_reason, Some(AbortReason::Stuck));

    // AND a plain request on another run has no reason
    let (other, _) = locked_run(&store, now).await;
    let plain = store
        .request_abort(&other.tenant, &other.run_id)
        .await
        .expect("request_abort")
        .expect("the run exists");
    assert!(plain.abort_requested);
    assert_eq!(plain.abort_reason, None);
}

/// A run record of ~300 KB (a maximum-size turn) can be replaced again and again, and an abort
/// requested in between survives the replaces.
pub async fn case_a_large_run_record_is_replaced_and_keeps_the_abort_flag(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let mut big = fixtures::running(&run, now);
    big.request.message = "m".repeat(300_000);
    for round in 0..2u64 {
        big.usage.output_tokens = round;
        let commit = Commit {
            run: Some(big.clone()),
            ..Commit::default()
        };
        store
            .commit(&fence, commit)
            .await
            .expect("a large run commit");
        if round == 0 {
            store
                .request_abort_for(&run.tenant, &run.run_id, AbortReason::Stuck)
                .await
                .expect("request_abort_for");
        }
    }
    let stored = stored_run(&store, &run).await;
    assert_eq!(stored.request.message.len(), 300_000);
    assert_eq!(stored.usage.output_tokens, 1);
    assert!(stored.abort_requested, "the abort survives a whole replace");
    assert_eq!(stored.abort_reason, Some(AbortReason::Stuck));
}

/// A commit's session update sets status, active run and progress time and adds to
/// `runs_finished`.
pub async fn case_commit_applies_session_update(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let started = fixtures::running(&run, now);
    let begin = Commit {
        run: Some(started.clone()),
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: Some(run.run_id.clone()),
            last_progress_at: now + 5,
            finished_delta: 0,
        }),
        ..Commit::default()
    };
    store.commit(&fence, begin).await.expect("commit");
    let session = store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session")
        .expect("session");
    assert_eq!(session.status, SessionStatus::Processing);
    assert_eq!(session.active_run_id.as_ref(), Some(&run.run_id));
    assert_eq!(session.last_progress_at, Some(now + 5));
    assert_eq!(session.runs_finished, 0);
    assert_eq!(session.lock_owner.as_deref(), Some("runner-a"));

    let end = Commit {
        run: Some(finished(&started, now + 9)),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: now + 9,
            finished_delta: 1,
        }),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, end).await.expect("commit");
    let session = store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session")
        .expect("session");
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.active_run_id, None);
    assert_eq!(session.last_progress_at, Some(now + 9));
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.runs_accepted, 1);
    assert_eq!(session.session_id, run.session_id);
    assert_eq!(session.lock_owner, None);
}

/// A holder that took its run from the accepted record ([`FencedWriter::expect_accepted`])
/// starts it only while the stored record is still that one: an abort request or another
/// commit since the accept makes the first commit a `Conflict` that writes nothing, and a
/// second try (after the runner reads the run) is not checked again.
///
/// [`FencedWriter::expect_accepted`]: agentlane_core::FencedWriter::expect_accepted
pub async fn case_a_run_taken_from_its_accepted_record_starts_only_while_the_record_holds(
    store: Arc<dyn Store>,
) {
    // GIVEN three accepted runs, each taken by a lock holder from its accepted record
    let now = fixtures::wall_ms();
    let start = |run: &Run| Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        run: Some(fixtures::running(run, now)),
        ..Commit::default()
    };
    let take = |store: &Arc<dyn Store>, fence: &Fence, run: &Run| {
        let record = AcceptedRecord::of(run).expect("a small run");
        assert!(
            store.expect_accepted(fence, &run.run_id, &record),
            "the store checks accepted records"
        );
    };
    let accept = || async {
        let (tenant, key) = (fixtures::tenant(), fixtures::session_key());
        let run = fixtures::accept(&store, &tenant, &key, now).await;
        (run, tenant, key)
    };
    let (unchanged, tenant_a, key_a) = accept().await;
    let (aborted, tenant_b, key_b) = accept().await;
    let (changed, tenant_c, key_c) = accept().await;

    // WHEN nothing happened to the first since its accept, the second was aborted, and the
    // third's record changed (a commit under an earlier lock), and each holder starts its run
    let fence_a = fixtures::lock(&store, &tenant_a, &key_a, "runner", LEASE_MS, now).await;
    take(&store, &fence_a, &unchanged);
    let started = store.commit(&fence_a, start(&unchanged)).await;

    store
        .request_abort(&tenant_b, &aborted.run_id)
        .await
        .expect("request_abort");
    let fence_b = fixtures::lock(&store, &tenant_b, &key_b, "runner", LEASE_MS, now).await;
    take(&store, &fence_b, &aborted);
    let refused_abort = store.commit(&fence_b, start(&aborted)).await;

    let earlier = fixtures::lock(&store, &tenant_c, &key_c, "runner-a", LEASE_MS, now).await;
    let handed_back = Commit {
        run: Some(Run {
            pickups: 1,
            ..changed.clone()
        }),
        release_lock: true,
        ..Commit::default()
    };
    store
        .commit(&earlier, handed_back)
        .await
        .expect("hand back");
    let fence_c = fixtures::lock(&store, &tenant_c, &key_c, "runner-b", LEASE_MS, now).await;
    take(&store, &fence_c, &changed);
    let refused_change = store.commit(&fence_c, start(&changed)).await;

    // THEN the first starts; the others are refused as changed, with nothing written and the
    // lock still theirs, and a second try (after a read) is not checked again
    assert_eq!(started, Ok(()));
    assert_eq!(
        stored_run(&store, &unchanged).await.status,
        RunStatus::Running
    );
    for (run, fence, refused) in [
        (&aborted, &fence_b, refused_abort),
        (&changed, &fence_c, refused_change),
    ] {
        match refused {
            Err(StoreError::Conflict(what)) => assert!(what.contains("changed"), "{what}"),
            other => panic!("expected a conflict, got {other:?}"),
        }
        let transcript = store
            .read_transcript(&run.tenant, &run.session_id, None, 100)
            .await
            .expect("read_transcript");
        assert!(transcript.is_empty(), "nothing written: {transcript:?}");
        assert_eq!(stored_run(&store, run).await.status, RunStatus::Queued);
        store.commit(fence, start(run)).await.expect("unchecked");
    }
}
