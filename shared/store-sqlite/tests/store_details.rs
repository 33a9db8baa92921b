//! Store behaviour specific to the SQLite backend: the choices it makes where the `Store` seam
//! leaves room.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_conformance::fixtures;
use agentlane_core::{Commit, Store, StoreError};
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;

fn store() -> Arc<dyn Store> {
    Arc::new(SqliteBackend::open_temporary().unwrap())
}

#[tokio::test]
async fn events_go_to_the_named_run_else_the_entries_run() {
    let store = store();
    let (tenant, key, now) = (
        fixtures::tenant(),
        fixtures::session_key(),
        fixtures::wall_ms(),
    );
    let run = fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 30_000, now).await;
    let events = |after: Option<u64>| {
        let (store, tenant, run_id) = (store.clone(), tenant.clone(), run.run_id.clone());
        async move {
            store
                .read_events(&tenant, &run_id, after, 10)
                .await
                .unwrap()
        }
    };

    // no run id, no run, no entries: refused, nothing written
    let orphan = Commit {
        events: vec![fixtures::event(1, now)],
        release_lock: true,
        ..Commit::default()
    };
    let result = store.commit(&fence, orphan).await;
    assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
    assert!(events(None).await.is_empty());

    // the transcript entries name the run
    let with_entries = Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        events: vec![fixtures::event(1, now)],
        ..Commit::default()
    };
    store.commit(&fence, with_entries).await.unwrap();
    assert_eq!(events(None).await, vec![fixtures::event(1, now)]);

    // the commit names the run
    let events_only = Commit {
        run_id: Some(run.run_id.clone()),
        events: vec![fixtures::event(2, now)],
        ..Commit::default()
    };
    store.commit(&fence, events_only).await.unwrap();
    assert_eq!(events(Some(1)).await, vec![fixtures::event(2, now)]);
}

#[tokio::test]
async fn locking_a_key_without_session_is_not_found() {
    let store = store();
    let result = store
        .acquire_lock(
            &fixtures::tenant(),
            &fixtures::session_key(),
            "runner",
            1_000,
            1,
        )
        .await;
    assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
}

#[tokio::test]
async fn a_commit_cannot_write_another_tenants_run() {
    let store = store();
    let now = fixtures::wall_ms();
    let (tenant, key) = (fixtures::tenant(), fixtures::session_key());
    fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner", 30_000, now).await;
    let foreign = fixtures::accept(&store, &fixtures::tenant(), &key, now).await;

    let commit = Commit {
        run: Some(fixtures::running(&foreign, now)),
        ..Commit::default()
    };
    let result = store.commit(&fence, commit).await;

    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
    let stored = store
        .get_run(&foreign.tenant, &foreign.run_id)
        .await
        .unwrap();
    assert_eq!(stored, Some(foreign));
}
