//! `ProcessingIndex` on DynamoDB (the supervisor's read): a query of the sparse `processing`
//! GSI that finds the processing sessions past a progress time and never the idle ones.

use crate::common;

use agentlane_aws::DynamoStore;
use agentlane_aws::aws_sdk_dynamodb::Client;
use agentlane_conformance::fixtures;
use agentlane_core::{
    Clock, Commit, FencedWriter, LockAttempt, ProcessingIndex, RunId, SessionKey, SessionLock,
    SessionStatus, SessionUpdate, SystemClock, TenantId, TurnIntake,
};

async fn accept(store: &DynamoStore, tenant: &TenantId, key: &str, now: u64) -> RunId {
    let turn = fixtures::turn(tenant, &SessionKey::new(key), now);
    store
        .accept_turn(turn)
        .await
        .expect("accept_turn")
        .run
        .run_id
}

#[tokio::test]
async fn the_index_query_finds_processing_sessions_past_a_progress_time_and_no_idle_one() {
    // GIVEN a table with two idle sessions and one processing since `now - 10 s`
    let sdk = common::sdk().await;
    let table = common::fresh_table(&sdk).await;
    let store = DynamoStore::new(Client::new(&sdk), table);
    let tenant = TenantId::new("acme");
    let now = SystemClock.now_ms();
    accept(&store, &tenant, "idle-1", now).await;
    accept(&store, &tenant, "idle-2", now).await;
    let run = accept(&store, &tenant, "busy", now).await;
    let key = SessionKey::new("busy");
    let LockAttempt::Acquired(fence, _) = store
        .acquire_lock(&tenant, &key, "runner", 30_000, now)
        .await
        .expect("lock")
    else {
        panic!("lock held")
    };
    let progress = |status, at, finished| Commit {
        session: Some(SessionUpdate {
            status,
            active_run_id: (status == SessionStatus::Processing).then(|| run.clone()),
            last_progress_at: at,
            finished_delta: finished,
        }),
        release_lock: status == SessionStatus::Idle,
        ..Commit::default()
    };
    store
        .commit(&fence, progress(SessionStatus::Processing, now - 10_000, 0))
        .await
        .expect("commit");

    // WHEN the supervisor asks for sessions without progress since `now - 5 s`, `now - 20 s`
    let stale = store
        .processing_sessions(now - 5_000, 100)
        .await
        .expect("query");
    let older = store
        .processing_sessions(now - 20_000, 100)
        .await
        .expect("query");

    // THEN only the processing session comes back, and only when it is old enough
    let keys: Vec<&str> = stale.iter().map(|s| s.session_key.as_str()).collect();
    assert_eq!(keys, ["busy"]);
    assert_eq!(stale[0].active_run_id.as_ref(), Some(&run));
    assert_eq!(stale[0].last_progress_at, Some(now - 10_000));
    assert!(older.is_empty(), "{older:?}");

    // AND once idle again it is out of the index
    store
        .commit(&fence, progress(SessionStatus::Idle, now, 1))
        .await
        .expect("commit");
    assert!(
        store
            .processing_sessions(now + 1, 100)
            .await
            .expect("query")
            .is_empty()
    );
}
