//! The pending-work cases (issue 11): an accept marks its session's pending work (since when,
//! and the run by its seq) in the accept's own write, the index finds the session by that
//! time, and the sweep's settle is conditional on the counters it read.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::pending_conformance!(async { Arc::new(make()) as Arc<dyn PendingBackend> });
//! ```
//!
//! Cases share a backend with other cases: they accept with times a day or more in the past
//! (random, so no other case's session sorts at the same time) and look only for their own
//! session in the index's answer.

use crate::fixtures::{self, session_key, tenant, turn, wall_ms};
use agentlane_core::{PendingSettle, ProcessingIndex, Session, SessionKey, Store, TenantId};
use std::sync::Arc;

/// A store that is also the supervisor's index (every adapter is both).
pub trait PendingBackend: Store + ProcessingIndex {}

impl<T: Store + ProcessingIndex + ?Sized> PendingBackend for T {}

/// Generates `mod pending_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn PendingBackend>`, evaluated per
/// case.
#[macro_export]
macro_rules! pending_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests pending_conformance pending ($make);
            case_an_accept_marks_pending_work_the_index_finds,
            case_settling_is_conditional_and_clearing_leaves_the_index,
            case_a_finished_run_leaves_the_open_runs_at_its_commit,
        }
    };
}

/// A time between one and 31 days ago, at random.
fn past() -> u64 {
    let day = 86_400_000;
    let random = u64::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .unwrap_or_default(),
    );
    wall_ms() - day - random % (30 * day)
}

async fn session_of(backend: &Arc<dyn PendingBackend>, t: &TenantId, k: &SessionKey) -> Session {
    backend.get_session(t, k).await.unwrap().unwrap()
}

/// Whether the index answers the session of `t`/`k` for `before`.
async fn indexed(
    backend: &Arc<dyn PendingBackend>,
    t: &TenantId,
    k: &SessionKey,
    before: u64,
) -> bool {
    backend
        .pending_sessions(before, 10_000)
        .await
        .unwrap()
        .iter()
        .any(|s| &s.tenant == t && &s.session_key == k)
}

/// Accepting turns marks the session's pending work: the first accept's time is kept, each run
/// is listed by its seq, redrives start at 0, and the pending index finds the session from that
/// time on (not before); another tenant's session of the same key is counted apart.
pub async fn case_an_accept_marks_pending_work_the_index_finds(backend: Arc<dyn PendingBackend>) {
    let (t, k, at) = (tenant(), session_key(), past());
    let first = backend.accept_turn(turn(&t, &k, at)).await.unwrap().run;
    let second = backend
        .accept_turn(turn(&t, &k, at + 10))
        .await
        .unwrap()
        .run;
    let session = session_of(&backend, &t, &k).await;
    assert_eq!(
        session.pending_at,
        Some(at),
        "the first accept's time is kept"
    );
    assert_eq!(
        session
            .open_runs
            .iter()
            .map(|(s, r)| (*s, r.clone()))
            .collect::<Vec<_>>(),
        vec![(0, first.run_id.clone()), (1, second.run_id.clone())],
        "each accepted run by its seq"
    );
    assert_eq!(
        session.oldest_open_run().map(|(_, r)| r.clone()),
        Some(first.run_id)
    );
    assert_eq!(session.redrives, 0);
    assert!(
        indexed(&backend, &t, &k, at).await,
        "found at its pending time"
    );
    assert!(!indexed(&backend, &t, &k, at - 1).await, "not before it");
    // Another tenant's session of the same key is another session.
    let other = tenant();
    backend
        .accept_turn(turn(&other, &k, at + 20))
        .await
        .unwrap();
    assert_eq!(
        session_of(&backend, &other, &k).await.pending_at,
        Some(at + 20)
    );
    assert_eq!(session_of(&backend, &t, &k).await.pending_at, Some(at));
}

/// Settling pending work is conditional on the read it came from: a stale read changes nothing;
/// a redrive moves the pending time forward and counts, a defer resets the redrives, and a clear
/// empties it and leaves the index until the next accept marks it again.
pub async fn case_settling_is_conditional_and_clearing_leaves_the_index(
    backend: Arc<dyn PendingBackend>,
) {
    let (t, k, at) = (tenant(), session_key(), past());
    backend.accept_turn(turn(&t, &k, at)).await.unwrap();
    let seen = session_of(&backend, &t, &k).await;
    // A later accept changes the counters: a settle from the earlier read changes nothing.
    backend.accept_turn(turn(&t, &k, at + 5)).await.unwrap();
    assert!(
        !backend
            .settle_pending(&seen, PendingSettle::Clear)
            .await
            .unwrap(),
        "stale read"
    );
    let seen = session_of(&backend, &t, &k).await;
    assert_eq!((seen.pending_at, seen.open_runs.len()), (Some(at), 2));

    assert!(
        backend
            .settle_pending(&seen, PendingSettle::Redrive { since: at + 100 })
            .await
            .unwrap()
    );
    let moved = session_of(&backend, &t, &k).await;
    assert_eq!((moved.pending_at, moved.redrives), (Some(at + 100), 1));
    assert_eq!(moved.open_runs, seen.open_runs, "no run finished: all kept");
    assert!(!indexed(&backend, &t, &k, at + 99).await, "moved forward");
    assert!(indexed(&backend, &t, &k, at + 100).await);
    assert!(
        !backend
            .settle_pending(&seen, PendingSettle::Clear)
            .await
            .unwrap(),
        "the pending time moved since that read"
    );
    assert!(
        backend
            .settle_pending(&moved, PendingSettle::Defer { since: at + 200 })
            .await
            .unwrap()
    );
    let deferred = session_of(&backend, &t, &k).await;
    assert_eq!(
        (deferred.pending_at, deferred.redrives),
        (Some(at + 200), 0),
        "a defer resets the redrives"
    );

    assert!(
        backend
            .settle_pending(&deferred, PendingSettle::Clear)
            .await
            .unwrap()
    );
    let cleared = session_of(&backend, &t, &k).await;
    assert_eq!(cleared.pending_at, None);
    assert!(cleared.open_runs.is_empty());
    assert_eq!(cleared.runs_accepted, 2, "nothing else changed");
    assert!(
        !indexed(&backend, &t, &k, wall_ms()).await,
        "out of the index"
    );
    // The next accept marks pending work again, from its own time and seq.
    let third = backend
        .accept_turn(turn(&t, &k, at + 300))
        .await
        .unwrap()
        .run;
    let again = session_of(&backend, &t, &k).await;
    assert_eq!(again.pending_at, Some(at + 300));
    assert_eq!(
        again
            .open_runs
            .iter()
            .map(|(s, r)| (*s, r.clone()))
            .collect::<Vec<_>>(),
        vec![(2, third.run_id)]
    );
}

/// The commit that finishes a run drops it from the session's open runs (and nothing else):
/// a busy session's record holds its queue, not one run id for every turn it ever took, while
/// its pending mark stays for the sweep to settle.
pub async fn case_a_finished_run_leaves_the_open_runs_at_its_commit(
    backend: Arc<dyn PendingBackend>,
) {
    let store: Arc<dyn Store> = backend.clone();
    let (t, k, at) = (tenant(), session_key(), past());
    let mut runs = Vec::new();
    for i in 0..3 {
        runs.push(backend.accept_turn(turn(&t, &k, at + i)).await.unwrap().run);
    }
    for (i, run) in runs.iter().take(2).enumerate() {
        let now = at + 10 + 10 * i as u64;
        let fence = fixtures::lock(&store, &t, &k, "runner-a", 60_000, now).await;
        store
            .commit(&fence, fixtures::finished(run, now + 1))
            .await
            .unwrap();
    }
    let session = session_of(&backend, &t, &k).await;
    assert_eq!(session.runs_finished, 2);
    assert_eq!(
        session.open_runs.into_iter().collect::<Vec<_>>(),
        vec![(2, runs[2].run_id.clone())],
        "only the run still queued"
    );
    assert_eq!(session.pending_at, Some(at), "the sweep settles the mark");
}
