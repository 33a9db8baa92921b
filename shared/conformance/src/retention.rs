//! The retention cases (issue 24): a session past its tenant's retention goes with all its
//! items; a fresh one, another tenant's and a busy one (a queued turn, a held lock) stay; the
//! stale list is oldest first and bounded, so a pass that stops at its budget resumes with the
//! next ones; a tenant with a session is found in the tenant registry, and an erased one no
//! longer is.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::retention_conformance!(async { Arc::new(make()) as Arc<dyn RetentionBackend> });
//! ```

use crate::fixtures::{self, session_key, tenant, wall_ms};
use agentlane_core::store::{DAY, Verdict};
use agentlane_core::{
    Commit, Expiry, Run, RunStatus, SessionKey, SessionRetention, Store, TenantEraser, TenantId,
};
use std::sync::Arc;
use std::time::Duration;

/// A store that is also the retention sweep's store and an eraser (every adapter is all three).
pub trait RetentionBackend: Store + SessionRetention + TenantEraser {}

impl<T: Store + SessionRetention + TenantEraser + ?Sized> RetentionBackend for T {}

/// Generates `mod retention_conformance` with one `#[tokio::test]` per case. The argument is
/// an expression (typically an `async` block) yielding `Arc<dyn RetentionBackend>`, evaluated
/// per case.
#[macro_export]
macro_rules! retention_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests retention_conformance retention ($make);
            case_an_expired_session_goes_with_all_its_items_and_the_rest_stay,
            case_a_busy_session_is_never_expired,
            case_stale_sessions_come_oldest_first_and_a_bounded_pass_resumes,
            case_a_tenant_with_sessions_is_registered_until_erased,
        }
    };
}

/// The retention of the cases: one day.
const RETENTION: Duration = DAY;
const LEASE_MS: u64 = 30_000;

fn store_of(backend: &Arc<dyn RetentionBackend>) -> Arc<dyn Store> {
    backend.clone()
}

/// Ends `run` `ok` with two transcript entries and two events, releasing the lock.
async fn answer(store: &Arc<dyn Store>, run: &Run, now: u64) {
    let fence = fixtures::lock(
        store,
        &run.tenant,
        &run.session_key,
        "runner",
        LEASE_MS,
        now,
    )
    .await;
    let commit = Commit {
        transcript: vec![
            fixtures::entry(1, &run.run_id, now),
            fixtures::entry(2, &run.run_id, now),
        ],
        events: vec![fixtures::event(0, now), fixtures::event(1, now)],
        ..fixtures::finished(run, now)
    };
    store.commit(&fence, commit).await.expect("commit");
}

/// A new session of `tenant` with one turn accepted at `at` and answered `ok` (two transcript
/// entries, two events), its lock released.
pub async fn answered(store: &Arc<dyn Store>, tenant: &TenantId, at: u64) -> Run {
    let run = fixtures::accept(store, tenant, &session_key(), at).await;
    answer(store, &run, at + 1).await;
    run
}

async fn stale_keys(
    backend: &Arc<dyn RetentionBackend>,
    tenant: &TenantId,
    now: u64,
    limit: usize,
) -> Vec<SessionKey> {
    let cutoff = agentlane_core::store::cutoff(RETENTION, now);
    backend
        .stale_sessions(tenant, cutoff, limit)
        .await
        .expect("stale_sessions")
        .into_iter()
        .map(|s| s.session_key)
        .collect()
}

/// A session idle for longer than the retention is listed stale and expires with its runs,
/// events and transcript; a session active within the retention and another tenant's stale
/// session are neither listed nor touched.
pub async fn case_an_expired_session_goes_with_all_its_items_and_the_rest_stay(
    backend: Arc<dyn RetentionBackend>,
) {
    // GIVEN a session answered two days ago, one answered an hour ago, and another tenant's
    // session answered two days ago
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let old = answered(&store, &t, now - 2 * DAY.as_millis() as u64).await;
    let fresh = answered(&store, &t, now - 3_600_000).await;
    let other = tenant();
    let elsewhere = answered(&store, &other, now - 2 * DAY.as_millis() as u64).await;

    // WHEN the tenant's stale sessions are listed and expired
    let stale = stale_keys(&backend, &t, now, 10).await;
    assert_eq!(stale, vec![old.session_key.clone()]);
    let expiry = backend
        .expire_session(&t, &old.session_key, RETENTION, now)
        .await
        .expect("expire_session");

    // THEN it went with its run, events and transcript
    let Expiry::Removed(removed) = expiry else {
        panic!("the stale session was kept: {expiry:?}");
    };
    assert_eq!(
        (removed.runs, removed.events, removed.transcript_entries),
        (1, 2, 2)
    );
    assert_eq!(
        store.get_session(&t, &old.session_key).await.expect("get"),
        None
    );
    assert_eq!(store.get_run(&t, &old.run_id).await.expect("get"), None);
    let events = store.read_events(&t, &old.run_id, None, 10).await;
    assert_eq!(events.expect("events"), vec![]);
    let entries = store.read_transcript(&t, &old.session_id, None, 10).await;
    assert_eq!(entries.expect("transcript"), vec![]);
    assert_eq!(stale_keys(&backend, &t, now, 10).await, vec![]);
    // AND expiring it again finds nothing
    let again = backend
        .expire_session(&t, &old.session_key, RETENTION, now)
        .await;
    assert_eq!(again, Ok(Expiry::Gone));
    // AND the fresh session is kept as fresh, whole
    let kept = backend
        .expire_session(&t, &fresh.session_key, RETENTION, now)
        .await;
    assert_eq!(kept, Ok(Expiry::Kept(Verdict::Fresh)));
    let stored = fixtures::session(&store, &t, &fresh.session_key).await;
    assert_eq!(stored.session_id, fresh.session_id);
    let entries = store.read_transcript(&t, &fresh.session_id, None, 10).await;
    assert_eq!(entries.expect("transcript").len(), 2);
    // AND the other tenant's session is untouched
    assert_eq!(
        fixtures::stored_run(&store, &elsewhere).await.status,
        RunStatus::Ok
    );
    assert_eq!(
        stale_keys(&backend, &other, now, 10).await,
        vec![elsewhere.session_key.clone()]
    );
}

/// A stale session with a queued turn, or whose lock a runner holds, is kept `Busy` with all
/// its items; once its turn ended and the lock is free, it expires.
pub async fn case_a_busy_session_is_never_expired(backend: Arc<dyn RetentionBackend>) {
    // GIVEN two sessions idle for two days: one with a turn still queued, one whose lock a
    // runner took just now
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let long_ago = now - 2 * DAY.as_millis() as u64;
    let queued = fixtures::accept(&store, &t, &session_key(), long_ago).await;
    let locked = answered(&store, &t, long_ago).await;
    let fence = fixtures::lock(&store, &t, &locked.session_key, "runner", LEASE_MS, now - 1).await;

    // WHEN both are expired
    for run in [&queued, &locked] {
        let expiry = backend
            .expire_session(&t, &run.session_key, RETENTION, now)
            .await;

        // THEN each is kept busy, with its run
        assert_eq!(
            expiry,
            Ok(Expiry::Kept(Verdict::Busy)),
            "{}",
            run.session_key
        );
        assert!(store.get_run(&t, &run.run_id).await.expect("get").is_some());
        assert!(
            store
                .get_session(&t, &run.session_key)
                .await
                .expect("get")
                .is_some()
        );
    }
    // AND once the lock is released the locked one expires
    store.release_lock(&fence).await.expect("release");
    let expiry = backend
        .expire_session(&t, &locked.session_key, RETENTION, now + 1)
        .await
        .expect("expire");
    assert!(matches!(expiry, Expiry::Removed(_)), "{expiry:?}");
    // AND once its turn ended the queued one too
    answer(&store, &queued, long_ago + 1).await;
    let expiry = backend
        .expire_session(&t, &queued.session_key, RETENTION, now + 2)
        .await
        .expect("expire");
    assert!(matches!(expiry, Expiry::Removed(_)), "{expiry:?}");
}

/// The stale list is oldest activity first and holds at most its limit: a pass that expires
/// a bounded page, stopped, then resumes finds exactly the rest, and never a session active
/// since.
pub async fn case_stale_sessions_come_oldest_first_and_a_bounded_pass_resumes(
    backend: Arc<dyn RetentionBackend>,
) {
    // GIVEN five sessions idle for between two and three days, oldest first
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let start = now - 3 * DAY.as_millis() as u64;
    let mut keys = Vec::new();
    for i in 0..5 {
        let run = fixtures::accept(&store, &t, &session_key(), start + i * 60_000).await;
        answer(&store, &run, start + i * 60_000 + 1).await;
        keys.push(run.session_key);
    }

    // THEN the cutoff is strict: a session last updated at it is not stale, one just before is
    let oldest = start + 1;
    let stale_at = |cutoff: u64| {
        let backend = backend.clone();
        let t = t.clone();
        async move {
            let sessions = backend.stale_sessions(&t, cutoff, 10).await;
            let sessions = sessions.expect("stale_sessions");
            sessions
                .into_iter()
                .map(|s| s.session_key)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(stale_at(oldest).await, Vec::<SessionKey>::new());
    assert_eq!(stale_at(oldest + 1).await, keys[..1].to_vec());
    assert_eq!(stale_at(0).await, Vec::<SessionKey>::new());

    // WHEN a pass looks at two and expires them
    let first = stale_keys(&backend, &t, now, 2).await;
    assert_eq!(first, keys[..2].to_vec());
    for key in &first {
        let expiry = backend.expire_session(&t, key, RETENTION, now).await;
        assert!(matches!(expiry, Ok(Expiry::Removed(_))), "{expiry:?}");
    }
    // AND the third sees a new turn meanwhile
    fixtures::accept(&store, &t, &keys[2], now).await;

    // THEN the next pass finds the remaining stale ones, oldest first
    assert_eq!(stale_keys(&backend, &t, now, 10).await, keys[3..].to_vec());
    // AND expiring the active one keeps it
    let kept = backend.expire_session(&t, &keys[2], RETENTION, now).await;
    assert_eq!(kept, Ok(Expiry::Kept(Verdict::Fresh)));
}

/// Every page of the tenant list, `limit` at a time; whether `tenant` is in it.
async fn listed(backend: &Arc<dyn RetentionBackend>, tenant: &TenantId, limit: usize) -> bool {
    let mut after: Option<TenantId> = None;
    for _ in 0..10_000 {
        let page = backend
            .list_tenants(after.as_ref(), limit)
            .await
            .expect("list_tenants");
        assert!(page.tenants.len() <= limit, "{page:?}");
        assert!(
            page.tenants.windows(2).all(|w| w[0] < w[1]),
            "in name order: {page:?}"
        );
        if page.tenants.contains(tenant) {
            return true;
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return false,
        }
    }
    panic!("the tenant list never ends");
}

/// A tenant's first session registers it; erasing the tenant takes it out of the list.
pub async fn case_a_tenant_with_sessions_is_registered_until_erased(
    backend: Arc<dyn RetentionBackend>,
) {
    // GIVEN a tenant without sessions
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    assert!(!listed(&backend, &t, 50).await);

    // WHEN a turn creates its first session
    fixtures::accept(&store, &t, &session_key(), now).await;

    // THEN the tenant is listed (through pages of any size)
    assert!(listed(&backend, &t, 50).await);
    assert!(listed(&backend, &t, 1000).await);
    // AND once erased it no longer is
    backend.erase_tenant(&t).await.expect("erase");
    assert!(!listed(&backend, &t, 1000).await);
}
