//! The session catalog cases (issue 24): a tenant's sessions listed newest activity first in
//! pages bounded by count and bytes, filtered by agent and status; a session's runs newest
//! first, filtered by status; a session deleted with everything of it, refused while its lock
//! is held.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::catalog_conformance!(async { Arc::new(make()) as Arc<dyn CatalogBackend> });
//! ```

use crate::fixtures::{self, session_key, tenant, wall_ms};
use agentlane_core::{
    Commit, PageBudget, Run, RunStatus, SessionCatalog, SessionCursor, SessionFilter, SessionId,
    SessionKey, SessionPage, SessionStatus, SessionUpdate, Store, StoreError, TenantId,
};
use std::sync::Arc;

/// A store that is also a session catalog (every adapter is both).
pub trait CatalogBackend: Store + SessionCatalog {}

impl<T: Store + SessionCatalog + ?Sized> CatalogBackend for T {}

/// Generates `mod catalog_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn CatalogBackend>`, evaluated per
/// case.
#[macro_export]
macro_rules! catalog_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests catalog_conformance sessions ($make);
            case_sessions_list_newest_activity_first_in_pages,
            case_sessions_list_filters_by_agent_and_status,
            case_a_sessions_page_stops_at_its_byte_budget,
            case_session_runs_list_newest_first_by_status,
            case_deleting_a_session_leaves_nothing_of_it,
            case_deleting_a_locked_session_is_refused,
        }
    };
}

const LEASE_MS: u64 = 30_000;

fn store_of(backend: &Arc<dyn CatalogBackend>) -> Arc<dyn Store> {
    backend.clone()
}

/// Every page of the tenant's sessions under `filter`, `count` at a time.
async fn all_pages(
    backend: &Arc<dyn CatalogBackend>,
    tenant: &TenantId,
    filter: &SessionFilter,
    budget: PageBudget,
) -> Vec<SessionPage> {
    let mut pages = Vec::new();
    let mut after: Option<SessionCursor> = None;
    loop {
        let page = backend
            .list_sessions(tenant, filter, after.as_ref(), budget)
            .await
            .expect("list_sessions");
        after = page.next.clone();
        let done = after.is_none();
        pages.push(page);
        assert!(pages.len() < 100, "the list never ends");
        if done {
            return pages;
        }
    }
}

fn keys_of(pages: &[SessionPage]) -> Vec<SessionKey> {
    pages
        .iter()
        .flat_map(|p| p.sessions.iter().map(|s| s.session_key.clone()))
        .collect()
}

/// Accepts a turn on each of `n` fresh keys of `tenant`, one ms apart from `start`: returns
/// the keys, oldest first.
async fn sessions(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    n: u64,
    start: u64,
) -> Vec<SessionKey> {
    let mut keys = Vec::new();
    for i in 0..n {
        let key = session_key();
        fixtures::accept(store, tenant, &key, start + i).await;
        keys.push(key);
    }
    keys
}

/// `list_sessions` pages through a tenant's sessions newest activity first, each once, no page
/// over its limit; another tenant's sessions never show, and a tenant without any lists none.
pub async fn case_sessions_list_newest_activity_first_in_pages(backend: Arc<dyn CatalogBackend>) {
    // GIVEN five sessions of a tenant, and a session of another tenant
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let mut keys = sessions(&store, &t, 5, now).await;
    sessions(&store, &tenant(), 1, now + 10).await;
    // AND the oldest one sees activity last
    fixtures::accept(&store, &t, &keys[0], now + 20).await;
    let first = keys.remove(0);
    keys.push(first);
    keys.reverse();

    // WHEN the tenant lists them two at a time
    let pages = all_pages(
        &backend,
        &t,
        &SessionFilter::default(),
        PageBudget::new(2, usize::MAX),
    )
    .await;

    // THEN every session comes once, newest activity first, no page over two
    assert_eq!(keys_of(&pages), keys);
    assert!(pages.iter().all(|p| p.sessions.len() <= 2), "{pages:?}");
    assert!(pages.len() >= 3);
    assert!(
        pages
            .iter()
            .flat_map(|p| &p.sessions)
            .all(|s| s.tenant == t)
    );
    // AND a tenant without sessions lists none
    let empty = backend
        .list_sessions(
            &tenant(),
            &SessionFilter::default(),
            None,
            PageBudget::new(10, 1 << 20),
        )
        .await
        .expect("list_sessions");
    assert_eq!(empty, SessionPage::default());
}

/// `list_sessions` filters by agent and by status (idle, processing), alone or together.
pub async fn case_sessions_list_filters_by_agent_and_status(backend: Arc<dyn CatalogBackend>) {
    // GIVEN three sessions of the main agent, one of them processing
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let keys = sessions(&store, &t, 3, now).await;
    let fence = fixtures::lock(&store, &t, &keys[1], "runner-a", LEASE_MS, now + 5).await;
    let busy = Commit {
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: None,
            last_progress_at: now + 6,
            finished_delta: 0,
        }),
        ..Commit::default()
    };
    store.commit(&fence, busy).await.expect("commit");
    let list = |agent: Option<&str>, status: Option<SessionStatus>| {
        let filter = SessionFilter {
            agent_id: agent.map(str::to_owned),
            status,
        };
        let backend = backend.clone();
        let t = t.clone();
        async move {
            let pages = all_pages(&backend, &t, &filter, PageBudget::new(10, 1 << 20)).await;
            let mut keys = keys_of(&pages);
            keys.sort();
            keys
        }
    };
    let mut all = keys.clone();
    all.sort();
    let mut idle = vec![keys[0].clone(), keys[2].clone()];
    idle.sort();

    // THEN each filter keeps what it names
    assert_eq!(list(None, None).await, all);
    assert_eq!(list(Some("main"), None).await, all);
    assert_eq!(list(Some("helper"), None).await, Vec::<SessionKey>::new());
    assert_eq!(
        list(None, Some(SessionStatus::Processing)).await,
        vec![keys[1].clone()]
    );
    assert_eq!(list(Some("main"), Some(SessionStatus::Idle)).await, idle);
}

/// A page stops at its byte budget even under its count limit, always holding at least one
/// session, and the pages together list all of them in order.
pub async fn case_a_sessions_page_stops_at_its_byte_budget(backend: Arc<dyn CatalogBackend>) {
    // GIVEN three sessions
    let store = store_of(&backend);
    let (t, now) = (tenant(), wall_ms());
    let mut keys = sessions(&store, &t, 3, now).await;
    keys.reverse();

    // WHEN pages may hold 10 sessions but only a few bytes
    let pages = all_pages(
        &backend,
        &t,
        &SessionFilter::default(),
        PageBudget::new(10, 8),
    )
    .await;

    // THEN each page holds one session (the first always fits), and all come in order
    assert!(pages.iter().all(|p| p.sessions.len() <= 1), "{pages:?}");
    assert_eq!(keys_of(&pages), keys);
}

/// `list_session_runs` lists a session's runs newest first, filters by status, pages below the
/// last seq listed, and lists nothing for another tenant or an unknown key.
pub async fn case_session_runs_list_newest_first_by_status(backend: Arc<dyn CatalogBackend>) {
    // GIVEN three runs of a session, the first finished
    let store = store_of(&backend);
    let (t, k, now) = fixtures::fresh();
    let mut runs = Vec::new();
    for i in 0..3 {
        runs.push(fixtures::accept(&store, &t, &k, now + i).await);
    }
    let fence = fixtures::lock(&store, &t, &k, "runner-a", LEASE_MS, now + 5).await;
    store
        .commit(&fence, fixtures::finished(&runs[0], now + 6))
        .await
        .expect("commit");
    let ids = |page: &[Run]| page.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>();
    let list = |status, before, count| {
        let (backend, t, k) = (backend.clone(), t.clone(), k.clone());
        async move {
            backend
                .list_session_runs(&t, &k, status, before, PageBudget::new(count, 1 << 20))
                .await
                .expect("list_session_runs")
        }
    };

    // THEN all runs list newest first
    let all = list(None, None, 10).await;
    assert_eq!(
        ids(&all.runs),
        vec![
            runs[2].run_id.clone(),
            runs[1].run_id.clone(),
            runs[0].run_id.clone()
        ]
    );
    assert_eq!(all.runs[2].status, RunStatus::Ok);
    // AND a status keeps its runs
    let ok = list(Some(RunStatus::Ok), None, 10).await;
    assert_eq!(ids(&ok.runs), vec![runs[0].run_id.clone()]);
    let queued = list(Some(RunStatus::Queued), None, 10).await;
    assert_eq!(
        ids(&queued.runs),
        vec![runs[2].run_id.clone(), runs[1].run_id.clone()]
    );
    // AND pages go on below the last seq listed
    let first = list(None, None, 2).await;
    assert_eq!(
        ids(&first.runs),
        vec![runs[2].run_id.clone(), runs[1].run_id.clone()]
    );
    assert_eq!(first.next, Some(1));
    let second = list(None, first.next, 2).await;
    assert_eq!(ids(&second.runs), vec![runs[0].run_id.clone()]);
    assert_eq!(second.next, None);
    // AND another tenant, or an unknown key, lists nothing
    let other = backend
        .list_session_runs(&tenant(), &k, None, None, PageBudget::new(10, 1 << 20))
        .await
        .expect("list_session_runs");
    assert!(other.runs.is_empty());
    let unknown = backend
        .list_session_runs(&t, &session_key(), None, None, PageBudget::new(10, 1 << 20))
        .await
        .expect("list_session_runs");
    assert!(unknown.runs.is_empty());
}

/// Deleting a session removes everything of it (every session id's runs, events, transcript
/// entries and its idempotency records), reports what it removed, frees the idempotency key,
/// leaves the neighbour untouched, and answers `None` for an unknown session.
pub async fn case_deleting_a_session_leaves_nothing_of_it(backend: Arc<dyn CatalogBackend>) {
    // GIVEN a session with a finished run (transcript, events, an idempotency key), reset to
    // a new id with a run and an entry there, and a queued run; and a neighbour session
    let store = store_of(&backend);
    let (t, k, now) = fixtures::fresh();
    let mut keyed = fixtures::turn(&t, &k, now);
    keyed.idempotency_key = Some(fixtures::unique("idem"));
    let first = store.accept_turn(keyed.clone()).await.expect("accept").run;
    let fence = fixtures::lock(&store, &t, &k, "runner-a", LEASE_MS, now + 1).await;
    let mut done = fixtures::finished(&first, now + 2);
    done.transcript = vec![
        fixtures::entry(1, &first.run_id, now + 2),
        fixtures::entry(2, &first.run_id, now + 2),
    ];
    done.events = vec![fixtures::event(0, now + 2), fixtures::event(1, now + 2)];
    store.commit(&fence, done).await.expect("commit");
    let new_id = SessionId::generate();
    store
        .reset_session(&t, &k, new_id.clone(), now + 3)
        .await
        .expect("reset");
    let second = fixtures::accept(&store, &t, &k, now + 4).await;
    let fence = fixtures::lock(&store, &t, &k, "runner-a", LEASE_MS, now + 5).await;
    let mut done = fixtures::finished(&second, now + 6);
    done.transcript = vec![fixtures::entry(1, &second.run_id, now + 6)];
    done.events = vec![fixtures::event(0, now + 6)];
    store.commit(&fence, done).await.expect("commit");
    let queued = fixtures::accept(&store, &t, &k, now + 7).await;
    let neighbour = session_key();
    let kept = fixtures::accept(&store, &t, &neighbour, now + 8).await;

    // WHEN the session is deleted
    let removed = backend
        .delete_session(&t, &k, now + 9)
        .await
        .expect("delete_session")
        .expect("the session existed");

    // THEN it reports what it removed
    assert_eq!(removed.runs, 3, "{removed:?}");
    assert_eq!(removed.events, 3, "{removed:?}");
    assert_eq!(removed.transcript_entries, 3, "{removed:?}");
    assert!(
        removed.other >= 2,
        "session and idempotency record: {removed:?}"
    );
    // AND nothing of it is left to read
    assert_eq!(store.get_session(&t, &k).await.expect("get"), None);
    for run in [&first, &second, &queued] {
        assert_eq!(store.get_run(&t, &run.run_id).await.expect("get"), None);
        let events = store.read_events(&t, &run.run_id, None, 100).await;
        assert_eq!(events.expect("events"), vec![]);
    }
    for id in [&first.session_id, &new_id] {
        let entries = store.read_transcript(&t, id, None, 100).await;
        assert_eq!(entries.expect("transcript"), vec![]);
    }
    let runs = backend
        .list_session_runs(&t, &k, None, None, PageBudget::new(10, 1 << 20))
        .await
        .expect("list_session_runs");
    assert!(runs.runs.is_empty());
    let listed = all_pages(
        &backend,
        &t,
        &SessionFilter::default(),
        PageBudget::new(10, 1 << 20),
    )
    .await;
    assert_eq!(keys_of(&listed), vec![neighbour.clone()]);
    // AND the idempotency key is free again: the same turn is a new run
    keyed.run_id = agentlane_core::RunId::generate();
    keyed.now = now + 10;
    let again = store.accept_turn(keyed).await.expect("accept");
    assert!(again.created, "the deleted run's idempotency key was kept");
    // AND the neighbour is untouched
    assert_eq!(fixtures::stored_run(&store, &kept).await, kept);
    // AND deleting an unknown session answers None
    let unknown = backend.delete_session(&t, &session_key(), now + 11).await;
    assert_eq!(unknown, Ok(None));
}

/// Deleting a session whose lock a runner holds is `Busy` and removes nothing; once the lock is
/// released the delete goes through.
pub async fn case_deleting_a_locked_session_is_refused(backend: Arc<dyn CatalogBackend>) {
    // GIVEN a session whose lock a runner holds
    let store = store_of(&backend);
    let (t, k, now) = fixtures::fresh();
    let run = fixtures::accept(&store, &t, &k, now).await;
    let fence = fixtures::lock(&store, &t, &k, "runner-a", LEASE_MS, now + 1).await;

    // WHEN it is deleted, THEN it is busy and nothing is gone
    let refused = backend.delete_session(&t, &k, now + 2).await;
    assert_eq!(refused, Err(StoreError::Busy));
    assert!(store.get_session(&t, &k).await.expect("get").is_some());
    assert_eq!(fixtures::stored_run(&store, &run).await, run);

    // AND once the runner released it, the delete goes through
    store.release_lock(&fence).await.expect("release");
    let removed = backend
        .delete_session(&t, &k, now + 3)
        .await
        .expect("delete");
    assert_eq!(removed.map(|r| r.runs), Some(1));
    assert_eq!(store.get_session(&t, &k).await.expect("get"), None);
}
