//! The session write lock: exclusivity, leases, fencing tokens, renew and release.

use crate::fixtures;
use agentlane_core::{Commit, LockAttempt, Store, StoreError};
use std::sync::Arc;

const LEASE_MS: u64 = 30_000;

/// Eight acquirers racing for one free lock: exactly one wins; the others see it held by the
/// winner until the winner's lease end.
pub async fn case_lock_is_exclusive_under_concurrent_acquirers(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;

    let racers = (0..8).map(|i| {
        let (store, tenant, key) = (store.clone(), tenant.clone(), key.clone());
        tokio::spawn(async move {
            let owner = format!("runner-{i}");
            let attempt = store
                .acquire_lock(&tenant, &key, &owner, LEASE_MS, now)
                .await;
            (owner, attempt)
        })
    });
    let results = futures::future::join_all(racers).await;

    let mut winners = Vec::new();
    let mut held = Vec::new();
    for joined in results {
        let (owner, attempt) = joined.expect("racer task");
        match attempt.expect("acquire_lock") {
            LockAttempt::Acquired(fence, _) => {
                assert_eq!(fence.owner, owner);
                winners.push(fence);
            }
            LockAttempt::Held {
                owner: holder,
                until,
            } => held.push((holder, until)),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one racer gets the lock: {winners:?}"
    );
    let winner = &winners[0];
    assert_eq!(held.len(), 7);
    for (holder, until) in held {
        assert_eq!(holder, winner.owner);
        assert_eq!(until, now + LEASE_MS);
    }
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.lock_owner.as_deref(), Some(winner.owner.as_str()));
    assert_eq!(session.lock_until, now + LEASE_MS);
    assert_eq!(session.fence, winner.token.0);
}

/// While the lease lasts (up to and including its end) every other acquirer, and the holder
/// itself, gets `Held`.
pub async fn case_lock_held_while_lease_valid_and_not_reentrant(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 1_000, now).await;
    assert_eq!(fence.tenant, tenant);
    assert_eq!(fence.session_key, key);
    assert_eq!(fence.owner, "runner-a");

    let held = LockAttempt::Held {
        owner: "runner-a".into(),
        until: now + 1_000,
    };
    for (owner, at) in [
        ("runner-b", now + 1),
        ("runner-b", now + 1_000),
        ("runner-a", now + 500),
    ] {
        let attempt = store
            .acquire_lock(&tenant, &key, owner, 1_000, at)
            .await
            .expect("acquire_lock");
        assert_eq!(attempt, held, "{owner} at +{}", at - now);
    }
    // the failed tries changed nothing: the holder still writes
    store
        .commit(&fence, Commit::default())
        .await
        .expect("the holder's fence is still current");
}

/// After the lease ended, another owner takes the lock with a strictly larger fencing token, and
/// the old fence can neither renew, release nor commit.
pub async fn case_lock_takeover_after_lease_expiry_bumps_fence(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let old = fixtures::lock(&store, &tenant, &key, "runner-a", 1_000, now).await;

    let new = fixtures::lock(&store, &tenant, &key, "runner-b", 1_000, now + 1_001).await;

    assert!(new.token > old.token, "{:?} > {:?}", new.token, old.token);
    assert_eq!(
        store.renew_lock(&old, 1_000, now + 1_002).await,
        Err(StoreError::FenceLost)
    );
    assert_eq!(store.release_lock(&old).await, Err(StoreError::FenceLost));
    assert_eq!(
        store.commit(&old, Commit::default()).await,
        Err(StoreError::FenceLost)
    );
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.lock_owner.as_deref(), Some("runner-b"));
    assert_eq!(session.fence, new.token.0);
    store
        .renew_lock(&new, 1_000, now + 1_500)
        .await
        .expect("renew");
}

/// Renewing moves the lease end to `now + lease`; the lock stays held until then. A renew with a
/// fence that is no longer current is `FenceLost`.
pub async fn case_renew_extends_lease_and_stale_renew_fails(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let fence = fixtures::lock(&store, &tenant, &key, "runner-a", 1_000, now).await;

    store
        .renew_lock(&fence, 1_000, now + 500)
        .await
        .expect("renew");

    // held past the original end (now + 1000) until the renewed end (now + 1500)
    let attempt = store
        .acquire_lock(&tenant, &key, "runner-b", 1_000, now + 1_200)
        .await
        .expect("acquire_lock");
    assert_eq!(
        attempt,
        LockAttempt::Held {
            owner: "runner-a".into(),
            until: now + 1_500
        }
    );
    let taken = fixtures::lock(&store, &tenant, &key, "runner-b", 1_000, now + 1_501).await;
    assert!(taken.token > fence.token);
    assert_eq!(
        store.renew_lock(&fence, 1_000, now + 1_502).await,
        Err(StoreError::FenceLost)
    );
    // the stale renew did not move the new holder's lease
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.lock_owner.as_deref(), Some("runner-b"));
    assert_eq!(session.lock_until, now + 2_501);
}

/// Released, the lock is free at once (same `now`), and the next acquisition gets a larger token;
/// the released fence is dead.
pub async fn case_release_then_reacquire(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    fixtures::accept(&store, &tenant, &key, now).await;
    let first = fixtures::lock(&store, &tenant, &key, "runner-a", LEASE_MS, now).await;

    store.release_lock(&first).await.expect("release");
    let session = fixtures::session(&store, &tenant, &key).await;
    assert_eq!(session.lock_owner, None);

    let second = fixtures::lock(&store, &tenant, &key, "runner-a", LEASE_MS, now).await;
    assert!(second.token > first.token);
    assert_eq!(store.release_lock(&first).await, Err(StoreError::FenceLost));
    assert_eq!(
        store.commit(&first, Commit::default()).await,
        Err(StoreError::FenceLost)
    );
    store.release_lock(&second).await.expect("release");
    assert_eq!(
        store.release_lock(&second).await,
        Err(StoreError::FenceLost)
    );
}

/// Locking a key that has no session is `NotFound` (a runner then drops the message).
pub async fn case_lock_of_a_key_without_session_is_not_found(store: Arc<dyn Store>) {
    let result = store
        .acquire_lock(
            &fixtures::tenant(),
            &fixtures::session_key(),
            "runner",
            LEASE_MS,
            fixtures::wall_ms(),
        )
        .await;
    assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
}
