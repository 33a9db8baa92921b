//! Retired cron fire sessions are deleted by the prune once their time has come; the run stays.

use agentlane_conformance::cron::finished_fire;
use agentlane_conformance::fixtures::{tenant, wall_ms};
use agentlane_core::Store;
use agentlane_core::cron::CronStore;
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;

#[tokio::test]
async fn a_retired_fire_session_is_pruned_after_its_time() {
    // GIVEN a finished fire, retired until an hour from now, and another session untouched
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let t = tenant();
    let (key, session_id) = finished_fire(&store, &t).await;
    let (other, other_id) = finished_fire(&store, &t).await;
    let keep_until = wall_ms() + 3_600_000;
    backend.retire_fire(&t, &key, keep_until).await.unwrap();

    // WHEN a prune runs before its time THEN nothing goes
    assert_eq!(backend.prune_fires(keep_until - 1).await.unwrap(), 0);
    assert!(store.get_session(&t, &key).await.unwrap().is_some());

    // WHEN a prune runs after it THEN the session and its transcript are gone
    assert_eq!(backend.prune_fires(keep_until).await.unwrap(), 1);
    assert!(store.get_session(&t, &key).await.unwrap().is_none());
    assert!(
        store
            .read_transcript(&t, &session_id, None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    // AND the other session is intact, and a second prune finds nothing
    assert!(store.get_session(&t, &other).await.unwrap().is_some());
    assert_eq!(
        store
            .read_transcript(&t, &other_id, None, 100)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(backend.prune_fires(keep_until + 1).await.unwrap(), 0);
}
