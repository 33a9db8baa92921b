//! The [`CronStore`] cases: job CRUD per tenant, the per-tenant cap, version-conditional
//! replacement (the claim of a fire), and the due index. Every case uses fresh random tenants,
//! so cases may share one backend; cases reading the due index keep only their own tenant's
//! jobs.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::cron_conformance!(async { Arc::new(make()) as Arc<dyn CronStore> });
//! ```

use crate::fixtures::{tenant, wall_ms};
use agentlane_core::cron::{CronJob, CronStore, JobId, JobRun, JobRunStatus, Schedule};
use agentlane_core::{RunId, StoreError, TenantId};
use std::sync::Arc;

/// Generates `mod cron_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn CronStore>`, evaluated per case.
#[macro_export]
macro_rules! cron_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests cron_conformance cron ($make);
            case_jobs_are_created_read_listed_and_deleted_per_tenant,
            case_the_per_tenant_job_cap_holds,
            case_replace_is_conditional_on_the_version,
            case_one_of_many_concurrent_claims_wins,
            case_due_jobs_follow_the_due_time,
        }
    };
}

/// An enabled every-minute job of `tenant`, version 1, next fire at `next`.
pub fn job(tenant: &TenantId, name: &str, next: Option<u64>) -> CronJob {
    let now = wall_ms();
    CronJob {
        tenant: tenant.clone(),
        job_id: JobId::generate(),
        name: name.to_owned(),
        schedule: Schedule::Every { every_seconds: 60 },
        message: format!("message of {name}"),
        model: None,
        timeout_seconds: Some(30),
        agent_id: None,
        budget: None,
        enabled: true,
        delete_after_run: false,
        delivery: None,
        next_run_at: next,
        last_runs: Vec::new(),
        consecutive_errors: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
        anchor_at: now,
        version: 1,
    }
}

/// A cap no case reaches unless it means to.
const NO_CAP: u32 = 1_000;

/// Jobs read back whole and list by id per tenant; another tenant can neither read nor delete
/// them; a second create of an id conflicts; a delete answers whether the job existed.
pub async fn case_jobs_are_created_read_listed_and_deleted_per_tenant(store: Arc<dyn CronStore>) {
    // GIVEN two jobs of tenant A and one of tenant B
    let (a, b) = (tenant(), tenant());
    let a1 = job(&a, "a1", Some(wall_ms() + 3_600_000));
    let a2 = job(&a, "a2", None);
    let b1 = job(&b, "b1", Some(wall_ms() + 3_600_000));
    for j in [&a1, &a2, &b1] {
        store.create_job(j, NO_CAP).await.unwrap();
    }

    // THEN each reads back whole, A lists its two by id, and B's job is not A's
    assert_eq!(
        store.get_job(&a, &a1.job_id).await.unwrap(),
        Some(a1.clone())
    );
    let listed = store.list_jobs(&a).await.unwrap();
    let mut expected = vec![a1.clone(), a2.clone()];
    expected.sort_by(|x, y| x.job_id.cmp(&y.job_id));
    assert_eq!(listed, expected);
    assert_eq!(store.get_job(&a, &b1.job_id).await.unwrap(), None);
    assert!(
        !store.delete_job(&a, &b1.job_id).await.unwrap(),
        "not A's to delete"
    );

    // AND a second create with the same id is refused
    assert!(matches!(
        store.create_job(&a1, NO_CAP).await,
        Err(StoreError::Conflict(_))
    ));

    // WHEN A deletes a1 THEN it is gone, and deleting again says so
    assert!(store.delete_job(&a, &a1.job_id).await.unwrap());
    assert_eq!(store.get_job(&a, &a1.job_id).await.unwrap(), None);
    assert!(!store.delete_job(&a, &a1.job_id).await.unwrap());
    assert_eq!(store.list_jobs(&a).await.unwrap(), vec![a2]);
    assert_eq!(store.list_jobs(&b).await.unwrap(), vec![b1]);
}

/// A tenant at its job cap (2 here) is refused with a `Conflict` naming the cap; another tenant
/// is unaffected, and a delete makes room again.
pub async fn case_the_per_tenant_job_cap_holds(store: Arc<dyn CronStore>) {
    // GIVEN a tenant at its cap of 2
    let (t, other) = (tenant(), tenant());
    let first = job(&t, "1", None);
    store.create_job(&first, 2).await.unwrap();
    store.create_job(&job(&t, "2", None), 2).await.unwrap();

    // WHEN it creates a third THEN it is refused, naming the cap; another tenant is unaffected
    match store.create_job(&job(&t, "3", None), 2).await {
        Err(StoreError::Conflict(why)) => assert!(why.contains('2'), "{why}"),
        other => panic!("expected the cap to refuse, got {other:?}"),
    }
    store.create_job(&job(&other, "x", None), 2).await.unwrap();
    assert_eq!(store.list_jobs(&t).await.unwrap().len(), 2);

    // AND after a delete there is room again
    assert!(store.delete_job(&t, &first.job_id).await.unwrap());
    store.create_job(&job(&t, "4", None), 2).await.unwrap();
    assert_eq!(store.list_jobs(&t).await.unwrap().len(), 2);
}

/// A replace from version 1 stores version 2; a second writer from version 1 gets a `Conflict`
/// and writes nothing; replacing an unknown job is `NotFound`.
pub async fn case_replace_is_conditional_on_the_version(store: Arc<dyn CronStore>) {
    let t = tenant();
    let original = job(&t, "j", Some(wall_ms()));
    store.create_job(&original, NO_CAP).await.unwrap();

    // WHEN a writer that read version 1 replaces it THEN version 2 is stored
    let mut v2 = original.clone();
    v2.version = 2;
    v2.name = "renamed".into();
    store.replace_job(&v2, 1).await.unwrap();
    assert_eq!(
        store.get_job(&t, &original.job_id).await.unwrap(),
        Some(v2.clone())
    );

    // AND a second writer that also read version 1 loses, writing nothing
    let mut stale = original.clone();
    stale.version = 2;
    stale.name = "stale".into();
    assert!(matches!(
        store.replace_job(&stale, 1).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.get_job(&t, &original.job_id).await.unwrap(), Some(v2));

    // AND replacing a job that does not exist is NotFound
    let ghost = job(&t, "ghost", None);
    assert!(matches!(
        store.replace_job(&ghost, 0).await,
        Err(StoreError::NotFound(_))
    ));
}

/// Eight tickers claim the same due slot at once: exactly one claim is written (version 2, one
/// run listed); the others get `Conflict`.
pub async fn case_one_of_many_concurrent_claims_wins(store: Arc<dyn CronStore>) {
    // GIVEN a due job read by 8 tickers at once
    let t = tenant();
    let original = job(&t, "contended", Some(wall_ms()));
    store.create_job(&original, NO_CAP).await.unwrap();

    // WHEN each claims the slot with its own run
    let mut claims = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let mut claimed = original.clone();
        claimed.version = 2;
        claimed.next_run_at = Some(wall_ms() + 60_000);
        claimed.push_run(running(&format!("run_{i}")));
        claims.push(tokio::spawn(
            async move { store.replace_job(&claimed, 1).await },
        ));
    }
    let mut won = 0;
    for c in claims {
        match c.await.unwrap() {
            Ok(()) => won += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }

    // THEN exactly one claim was written: one run listed
    assert_eq!(won, 1);
    let stored = store.get_job(&t, &original.job_id).await.unwrap().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.last_runs.len(), 1);
}

fn running(run: &str) -> JobRun {
    JobRun {
        run_id: Some(RunId::new(run)),
        session_key: None,
        status: JobRunStatus::Running,
        fired_at: wall_ms() - 5_000,
        due_at: wall_ms() - 5_000,
        started_at: None,
        ended_at: None,
        error: None,
        manual: false,
        abort_requested_at: None,
    }
}

/// `due_jobs` lists past-due jobs and jobs with a fire in flight, earliest first; a look-ahead
/// adds the soon-due; a disabled job only while a fire is in flight; a claimed slot, an ended fire and a delete drop out.
pub async fn case_due_jobs_follow_the_due_time(store: Arc<dyn CronStore>) {
    // GIVEN jobs due a minute ago, in a minute, never (disabled), and a disabled one with a fire
    // in flight (watched until its end is recorded)
    let t = tenant();
    let now = wall_ms();
    let past = job(&t, "past", Some(now - 60_000));
    let future = job(&t, "future", Some(now + 60_000));
    let mut disabled = job(&t, "disabled", Some(now - 60_000));
    disabled.enabled = false;
    let mut watched = job(&t, "watched", None);
    watched.enabled = false;
    watched.push_run(running("run_w"));
    for j in [&past, &future, &disabled, &watched] {
        store.create_job(j, NO_CAP).await.unwrap();
    }
    let mine = |jobs: Vec<CronJob>| -> Vec<String> {
        jobs.into_iter()
            .filter(|j| j.tenant == t)
            .map(|j| j.name)
            .collect()
    };

    // THEN due now: the past one, then the watched one (fired 5 s ago), earliest first
    assert_eq!(
        mine(store.due_jobs(now, 10_000).await.unwrap()),
        ["past", "watched"]
    );
    // AND looking a minute ahead adds the future one
    assert_eq!(
        mine(store.due_jobs(now + 60_000, 10_000).await.unwrap()),
        ["past", "watched", "future"]
    );

    // WHEN the past job's slot is claimed (next fire in an hour) and the watched run ends
    let mut claimed = past.clone();
    claimed.version = 2;
    claimed.next_run_at = Some(now + 3_600_000);
    store.replace_job(&claimed, 1).await.unwrap();
    let mut ended = watched.clone();
    ended.version = 2;
    ended.last_runs[0].status = JobRunStatus::Ok;
    store.replace_job(&ended, 1).await.unwrap();

    // THEN neither is due any more
    assert!(mine(store.due_jobs(now, 10_000).await.unwrap()).is_empty());
    // AND a deleted job leaves the index
    assert!(store.delete_job(&t, &future.job_id).await.unwrap());
    assert!(mine(store.due_jobs(now + 60_000, 10_000).await.unwrap()).is_empty());
}

/// A finished cron fire: a session with two transcript entries and an ended run, released.
/// Returns the session key and its session id.
pub async fn finished_fire(
    store: &Arc<dyn agentlane_core::Store>,
    tenant: &TenantId,
) -> (agentlane_core::SessionKey, agentlane_core::SessionId) {
    use crate::fixtures::{accept, entry, lock};
    let key =
        agentlane_core::SessionKey::new(format!("cron:job_x:{}", crate::fixtures::unique("run")));
    let now = wall_ms();
    let run = accept(store, tenant, &key, now).await;
    let fence = lock(store, tenant, &key, "runner", 30_000, now).await;
    let mut ended = run.clone();
    ended.status = agentlane_core::RunStatus::Ok;
    ended.ended_at = Some(now);
    store
        .commit(
            &fence,
            agentlane_core::Commit {
                transcript: vec![entry(1, &run.run_id, now), entry(2, &run.run_id, now)],
                run: Some(ended),
                release_lock: true,
                ..agentlane_core::Commit::default()
            },
        )
        .await
        .unwrap();
    (key, run.session_id)
}
