//! `reset_session`: a new transcript identity behind the same key.

use crate::fixtures;
use agentlane_core::{Commit, SessionId, Store, StoreError};
use std::sync::Arc;

/// A reset gives the key a new session id and bumps its generation; new turns use the new id,
/// the old transcript stays readable under the old id.
pub async fn case_reset_session_mints_new_id(store: Arc<dyn Store>) {
    // GIVEN a session with one transcript entry, unlocked
    let (tenant, key, now) = fixtures::fresh();
    let run = fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 30_000, now).await;
    let commit = Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now)],
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");
    let before = fixtures::session(&store, &tenant, &key).await;

    // WHEN it is reset
    let new_id = SessionId::generate();
    let reset = store
        .reset_session(&tenant, &key, new_id.clone(), now + 10)
        .await
        .expect("reset_session");

    // THEN
    assert_eq!(reset.session_id, new_id);
    assert_eq!(reset.generation, before.generation + 1);
    assert_eq!(reset.runs_accepted, before.runs_accepted);
    assert_eq!(reset.session_key, key);
    assert_eq!(reset.lock_owner, None);
    let stored = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(stored, reset);
    let next = fixtures::accept(&store, &tenant, &key, now + 20).await;
    assert_eq!(next.session_id, new_id);
    let old = store
        .read_transcript(&tenant, &run.session_id, None, 100)
        .await
        .expect("read_transcript");
    assert_eq!(old, vec![fixtures::entry(1, &run.run_id, now)]);
    let fresh = store
        .read_transcript(&tenant, &new_id, None, 100)
        .await
        .expect("read_transcript");
    assert!(fresh.is_empty());
}

/// A live lock makes a reset `Busy` (nothing changes); once the lease ended the reset goes
/// through and the expired holder's fence is dead.
pub async fn case_reset_session_busy_while_locked(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let run = fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 10_000, now).await;

    let busy = store
        .reset_session(&tenant, &key, SessionId::generate(), now + 1)
        .await;
    assert_eq!(busy, Err(StoreError::Busy));
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.session_id, run.session_id);
    store
        .commit(&fence, Commit::default())
        .await
        .expect("the holder keeps its lock");

    let new_id = SessionId::generate();
    let reset = store
        .reset_session(&tenant, &key, new_id.clone(), now + 10_001)
        .await
        .expect("reset after the lease ended");
    assert_eq!(reset.session_id, new_id);
    assert_eq!(reset.generation, session.generation + 1);
    let late = Commit {
        transcript: vec![fixtures::entry(1, &run.run_id, now + 10_002)],
        ..Commit::default()
    };
    assert_eq!(store.commit(&fence, late).await, Err(StoreError::FenceLost));
    for session_id in [&run.session_id, &new_id] {
        let transcript = store
            .read_transcript(&tenant, session_id, None, 100)
            .await
            .expect("read_transcript");
        assert!(transcript.is_empty(), "the expired holder wrote nothing");
    }
    let next = fixtures::lock(&store, &tenant, &key, "runner-b", 10_000, now + 10_003).await;
    assert!(next.token > fence.token);
}

/// Resetting a key that has no session is `NotFound`, and creates nothing.
pub async fn case_reset_session_unknown_key_not_found(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let result = store
        .reset_session(&tenant, &key, SessionId::generate(), now)
        .await;
    assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
    assert_eq!(
        store.get_session(&tenant, &key).await.expect("get_session"),
        None
    );
}
