//! The tenant erasure case (issue 24): erasing a tenant leaves nothing of it to read (sessions,
//! runs, transcripts, events, cron jobs, API keys, lists) and no other tenant loses anything.
//! The end-to-end scenarios also scan the whole store; this case holds every adapter to the
//! same answers.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::erase_conformance!(async { Arc::new(make()) as Arc<dyn EraseBackend> });
//! ```

use crate::fixtures::{self, session_key, tenant, wall_ms};
use agentlane_core::api_key::{KeyStore, NewApiKey};
use agentlane_core::cron::CronStore;
use agentlane_core::{
    Commit, PageBudget, SessionCatalog, SessionFilter, Store, TenantEraser, TenantId,
};
use std::sync::Arc;

/// A store that is also a catalog, a key store, a cron store and an eraser (every adapter is).
pub trait EraseBackend: Store + SessionCatalog + KeyStore + CronStore + TenantEraser {}

impl<T: Store + SessionCatalog + KeyStore + CronStore + TenantEraser + ?Sized> EraseBackend for T {}

/// Generates `mod erase_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn EraseBackend>`.
#[macro_export]
macro_rules! erase_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests erase_conformance erase ($make);
            case_erasing_a_tenant_leaves_nothing_of_it_and_no_one_else_loses_anything,
        }
    };
}

/// A tenant with two sessions (one with a finished run, its transcript and events), a stored
/// API key and a cron job: its first run, and its key's id.
async fn populated(
    backend: &Arc<dyn EraseBackend>,
    t: &TenantId,
) -> (Vec<agentlane_core::Run>, String) {
    let store: Arc<dyn Store> = backend.clone();
    let now = wall_ms();
    let (k1, k2) = (session_key(), session_key());
    let first = fixtures::accept(&store, t, &k1, now).await;
    let second = fixtures::accept(&store, t, &k2, now + 1).await;
    let fence = fixtures::lock(&store, t, &k1, "runner-a", 30_000, now + 2).await;
    let commit = Commit {
        transcript: vec![fixtures::entry(1, &first.run_id, now + 3)],
        events: vec![fixtures::event(0, now + 3), fixtures::event(1, now + 3)],
        run: Some(fixtures::running(&first, now + 3)),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");
    let key = NewApiKey::generate(t.clone(), None, now);
    backend.create_key(&key.record).await.expect("create_key");
    let job = crate::cron::job(t, "nightly", Some(now + 86_400_000));
    backend.create_job(&job, 100).await.expect("create_job");
    (vec![first, second], key.record.key_id.clone())
}

/// Erasing one of two populated tenants reports what it removed (sessions, runs, events,
/// entries, keys, cron jobs), leaves nothing of it readable or listed, leaves the other tenant
/// whole, and a second erase removes nothing.
pub async fn case_erasing_a_tenant_leaves_nothing_of_it_and_no_one_else_loses_anything(
    backend: Arc<dyn EraseBackend>,
) {
    // GIVEN two populated tenants
    let (gone, kept) = (tenant(), tenant());
    let (runs, key_id) = populated(&backend, &gone).await;
    let (other_runs, other_key) = populated(&backend, &kept).await;

    // WHEN one is erased
    let erasure = backend.erase_tenant(&gone).await.expect("erase_tenant");

    // THEN it reports what it removed
    let removed = |kind: &str| erasure.removed.get(kind).copied().unwrap_or(0);
    assert_eq!(removed("sessions"), 2, "{erasure:?}");
    assert_eq!(removed("runs"), 2, "{erasure:?}");
    assert_eq!(removed("events"), 2, "{erasure:?}");
    assert_eq!(removed("transcriptEntries"), 1, "{erasure:?}");
    assert_eq!(removed("apiKeys"), 1, "{erasure:?}");
    assert!(removed("cronJobs") >= 1, "{erasure:?}");
    // AND nothing of it is left to read
    for run in &runs {
        assert_eq!(
            backend.get_run(&gone, &run.run_id).await.expect("get"),
            None
        );
        let session = backend.get_session(&gone, &run.session_key).await;
        assert_eq!(session.expect("get"), None);
        let entries = backend
            .read_transcript(&gone, &run.session_id, None, 10)
            .await;
        assert_eq!(entries.expect("transcript"), vec![]);
        let events = backend.read_events(&gone, &run.run_id, None, 10).await;
        assert_eq!(events.expect("events"), vec![]);
    }
    assert_eq!(backend.find_key(&key_id).await.expect("find_key"), None);
    assert!(
        backend
            .list_keys(&gone)
            .await
            .expect("list_keys")
            .is_empty()
    );
    assert!(
        backend
            .list_jobs(&gone)
            .await
            .expect("list_jobs")
            .is_empty()
    );
    let listed = backend
        .list_sessions(
            &gone,
            &SessionFilter::default(),
            None,
            PageBudget::count(10),
        )
        .await
        .expect("list_sessions");
    assert!(listed.sessions.is_empty());
    // AND the other tenant has all it had
    for run in &other_runs {
        let found = backend.get_run(&kept, &run.run_id).await.expect("get");
        assert!(found.is_some());
    }
    assert!(
        backend
            .find_key(&other_key)
            .await
            .expect("find_key")
            .is_some()
    );
    assert_eq!(backend.list_jobs(&kept).await.expect("list_jobs").len(), 1);
    // AND erasing it again removes nothing
    let again = backend.erase_tenant(&gone).await.expect("erase_tenant");
    assert_eq!(again.total(), 0, "{again:?}");
}
