//! Where a commit's events and run go: the events-run rule
//! ([`Commit::events_run_id`](agentlane_core::Commit::events_run_id)), the next event seq, and
//! runs of other tenants.

use super::commit::locked_run;
use crate::fixtures;
use agentlane_core::{Commit, Store, StoreError};
use std::sync::Arc;

/// Events go to `run_id`, else to the run of `run`, else to the run of the first transcript
/// entry; events naming none of them are refused with `NotFound` and nothing of the commit is
/// written.
pub async fn case_events_go_to_the_named_run(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let other = fixtures::accept(&store, &run.tenant, &run.session_key, now).await;
    let events = |run_id| {
        let (store, tenant) = (store.clone(), run.tenant.clone());
        async move {
            store
                .read_events(&tenant, &run_id, None, 10)
                .await
                .expect("read_events")
        }
    };

    let orphan = Commit {
        events: vec![fixtures::event(0, now)],
        release_lock: true,
        ..Commit::default()
    };
    let result = store.commit(&fence, orphan).await;
    assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
    assert!(events(run.run_id.clone()).await.is_empty());

    // the first transcript entry names the run
    let with_entries = Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        events: vec![fixtures::event(0, now)],
        ..Commit::default()
    };
    store.commit(&fence, with_entries).await.expect("commit");
    // the run record wins over the entries
    let with_run = Commit {
        transcript: vec![fixtures::entry(2, &run.run_id, now)],
        events: vec![fixtures::event(0, now)],
        run: Some(fixtures::running(&other, now)),
        ..Commit::default()
    };
    store.commit(&fence, with_run).await.expect("commit");
    // `run_id` wins over both
    let named = Commit {
        run_id: Some(run.run_id.clone()),
        transcript: vec![fixtures::entry(3, &other.run_id, now)],
        events: vec![fixtures::event(1, now)],
        run: Some(fixtures::running(&other, now)),
        ..Commit::default()
    };
    store.commit(&fence, named).await.expect("commit");

    assert_eq!(
        events(run.run_id.clone()).await,
        vec![fixtures::event(0, now), fixtures::event(1, now)]
    );
    assert_eq!(
        events(other.run_id.clone()).await,
        vec![fixtures::event(0, now)]
    );
}

/// `next_event_seq` is 0 for a run without events (and an unknown one), then one more than the
/// newest event's seq, whichever commit wrote it; other runs are not counted.
pub async fn case_next_event_seq_follows_the_newest_event(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let other = fixtures::accept(&store, &run.tenant, &run.session_key, now).await;
    let next = |run_id| {
        let (store, tenant) = (store.clone(), run.tenant.clone());
        async move {
            store
                .next_event_seq(&tenant, &run_id)
                .await
                .expect("next_event_seq")
        }
    };
    assert_eq!(next(run.run_id.clone()).await, 0, "no events yet");
    assert_eq!(
        next(agentlane_core::RunId::generate()).await,
        0,
        "unknown run"
    );

    let first = Commit {
        events: (0..12).map(|seq| fixtures::event(seq, now)).collect(),
        run: Some(fixtures::running(&run, now)),
        ..Commit::default()
    };
    store.commit(&fence, first).await.expect("commit");
    assert_eq!(next(run.run_id.clone()).await, 12);

    let more = Commit {
        run_id: Some(run.run_id.clone()),
        events: (12..15).map(|seq| fixtures::event(seq, now)).collect(),
        ..Commit::default()
    };
    store.commit(&fence, more).await.expect("commit");
    assert_eq!(next(run.run_id.clone()).await, 15);
    assert_eq!(
        next(other.run_id.clone()).await,
        0,
        "another run of the session"
    );
    assert_eq!(
        store
            .next_event_seq(&fixtures::tenant(), &run.run_id)
            .await
            .expect("next_event_seq"),
        0,
        "another tenant sees nothing"
    );
}

/// A commit carrying another tenant's run record is refused (`Conflict`); that run is unchanged
/// and the fence still works.
pub async fn case_commit_cannot_write_another_tenants_run(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let foreign = fixtures::accept(&store, &fixtures::tenant(), &run.session_key, now).await;

    let commit = Commit {
        run: Some(fixtures::running(&foreign, now)),
        ..Commit::default()
    };
    let result = store.commit(&fence, commit).await;

    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
    let stored = store
        .get_run(&foreign.tenant, &foreign.run_id)
        .await
        .expect("get_run");
    assert_eq!(stored, Some(foreign));
    store
        .commit(&fence, Commit::default())
        .await
        .expect("the fence is still current");
}
