//! The retention pass of the sweep on the real embedded store (issue 24): each tenant loses
//! its sessions idle past its retention, a bounded pass resumes on the next sweep, and a
//! policy naming only some tenants touches no other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_conformance::fixtures;
use agentlane_core::store::DAY;
use agentlane_core::{
    Clock, Commit, RetentionPolicy, Run, RunStatus, SessionKey, SessionStatus, SessionUpdate,
    Store, SystemClock, TenantId,
};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_supervisor::{
    RetentionBudget, RetentionReport, RetentionSweep, Supervisor, Thresholds,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const DAY_MS: u64 = 86_400_000;

/// A session of `tenant` named `key` with one turn answered at `at`.
async fn answered(store: &Arc<dyn Store>, tenant: &str, key: &str, at: u64) -> Run {
    let (tenant, key) = (TenantId::new(tenant), SessionKey::new(key));
    let run = fixtures::accept(store, &tenant, &key, at).await;
    let fence = fixtures::lock(store, &tenant, &key, "runner", 30_000, at + 1).await;
    let commit = Commit {
        run: Some(Run {
            status: RunStatus::Ok,
            ended_at: Some(at + 1),
            ..fixtures::running(&run, at + 1)
        }),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: at + 1,
            finished_delta: 1,
        }),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.unwrap();
    run
}

async fn exists(store: &Arc<dyn Store>, tenant: &str, key: &str) -> bool {
    store
        .get_session(&TenantId::new(tenant), &SessionKey::new(key))
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_bounded_pass_deletes_the_oldest_and_the_next_sweep_resumes() {
    // GIVEN tenant a with three sessions idle for days and one active an hour ago, tenant b
    // with one idle for days, and tenant c, kept 30 days, with one idle for two
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let now = SystemClock.now_ms();
    for (i, key) in ["a1", "a2", "a3"].into_iter().enumerate() {
        answered(&store, "a", key, now - 5 * DAY_MS + i as u64 * 1000).await;
    }
    answered(&store, "a", "a-fresh", now - 3_600_000).await;
    answered(&store, "b", "b1", now - 3 * DAY_MS).await;
    answered(&store, "c", "c1", now - 2 * DAY_MS).await;
    // AND a day's retention for everyone but c, two sessions per pass
    let policy = RetentionPolicy {
        default: Some(DAY),
        tenants: BTreeMap::from([("c".to_owned(), DAY * 30)]),
    };
    let sweep =
        RetentionSweep::new(Arc::new(backend.clone()), policy).with_budget(RetentionBudget {
            tenants: 10,
            sessions: 2,
        });

    // WHEN a pass runs, another a second later, and two more a minute apart
    let mut passes = Vec::new();
    for at in [now, now + 1000, now + 61_000, now + 122_000] {
        passes.push(sweep.sweep(at).await.unwrap());
    }

    // THEN the first pass deletes a's two oldest and stops; the one a second later does
    // nothing (a pass runs at most every minute with day-long retentions); the next deletes
    // the rest (resuming at b, where its budget ended); the last finds nothing (only c has
    // sessions after a)
    let pass = |tenants, expired, records, resumes| RetentionReport {
        tenants,
        expired,
        busy: 0,
        records,
        resumes,
    };
    assert_eq!(
        passes,
        [
            pass(1, 2, 2, true),
            RetentionReport::default(),
            pass(2, 2, 2, true),
            pass(1, 0, 0, false)
        ]
    );
    // AND what is left is the fresh session and c's
    for (tenant, key, kept) in [
        ("a", "a1", false),
        ("a", "a2", false),
        ("a", "a3", false),
        ("a", "a-fresh", true),
        ("b", "b1", false),
        ("c", "c1", true),
    ] {
        assert_eq!(exists(&store, tenant, key).await, kept, "{tenant}/{key}");
    }
}

#[tokio::test]
async fn a_policy_naming_only_some_tenants_touches_no_other() {
    // GIVEN tenants a and b, each with a session idle for three days
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let now = SystemClock.now_ms();
    answered(&store, "a", "a1", now - 3 * DAY_MS).await;
    answered(&store, "b", "b1", now - 3 * DAY_MS).await;
    // AND only b has a retention
    let policy = RetentionPolicy {
        default: None,
        tenants: BTreeMap::from([("b".to_owned(), DAY)]),
    };
    let sweep = RetentionSweep::new(Arc::new(backend.clone()), policy);

    // WHEN a pass runs
    let report = sweep.sweep(now).await.unwrap();

    // THEN only b's session went
    assert_eq!((report.tenants, report.expired), (1, 1));
    assert!(exists(&store, "a", "a1").await);
    assert!(!exists(&store, "b", "b1").await);
}

#[tokio::test]
async fn the_supervisors_sweep_runs_the_retention_pass_and_reports_it() {
    // GIVEN a session idle for two days, kept one day
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    answered(&store, "a", "a1", SystemClock.now_ms() - 2 * DAY_MS).await;
    let policy = RetentionPolicy {
        default: Some(DAY),
        tenants: BTreeMap::new(),
    };
    let supervisor = Supervisor::new(
        store.clone(),
        Arc::new(backend.clone()),
        Arc::new(SystemClock),
        Thresholds::new(Duration::from_secs(120), None),
    )
    .with_retention(RetentionSweep::new(Arc::new(backend.clone()), policy));

    // WHEN the supervisor sweeps
    let report = supervisor.sweep().await.unwrap();

    // THEN its report carries the retention pass, and the session is gone
    assert_eq!((report.retention.tenants, report.retention.expired), (1, 1));
    assert!(!exists(&store, "a", "a1").await);
}
