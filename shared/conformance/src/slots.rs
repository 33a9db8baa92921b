//! The [`SlotStore`] cases: a tenant never holds more than its cap of live slots, even when
//! many takes race; kinds and tenants are counted apart; an ended lease stops counting; renew
//! and release act on the holder's own slot only. Rate windows count every add, per scope and
//! window, also when adds race. Every case uses fresh random tenants, so cases may share one
//! backend.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::slots_conformance!(async { Arc::new(make()) as Arc<dyn SlotStore> });
//! ```

use crate::fixtures::{tenant, wall_ms};
use agentlane_core::{RateScope, SlotKind, SlotStore, granted_of};
use std::sync::Arc;

/// Generates `mod slots_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn SlotStore>`, evaluated per case.
#[macro_export]
macro_rules! slots_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests slots_conformance slots ($make);
            case_a_tenant_holds_at_most_its_cap_and_others_are_counted_apart,
            case_a_burst_of_takes_grants_exactly_the_cap,
            case_an_ended_lease_stops_counting_and_cannot_be_renewed_once_dropped,
            case_renew_and_release_act_on_the_holders_own_slot,
            case_a_rate_window_counts_per_scope_and_window,
            case_racing_adds_are_all_counted_and_grant_exactly_the_limit,
        }
    };
}

/// A lease of a minute from `now`.
fn minute(now: u64) -> u64 {
    now + 60_000
}

/// A tenant holds at most its cap of slots of a kind (2 streams here); re-taking a held slot is
/// not a second one; other kinds and tenants count apart; a release frees one place.
pub async fn case_a_tenant_holds_at_most_its_cap_and_others_are_counted_apart(
    store: Arc<dyn SlotStore>,
) {
    let (acme, beta) = (tenant(), tenant());
    let now = wall_ms();
    let take = |tenant, kind, holder: &'static str| {
        let store = store.clone();
        async move {
            store
                .acquire_slot(&tenant, kind, holder, 2, now, minute(now))
                .await
                .unwrap()
        }
    };
    assert!(take(acme.clone(), SlotKind::Stream, "h1").await);
    assert!(take(acme.clone(), SlotKind::Stream, "h2").await);
    assert!(
        !take(acme.clone(), SlotKind::Stream, "h3").await,
        "a third stream is over the cap of 2"
    );
    // Taking again a slot one holds is not a second slot.
    assert!(take(acme.clone(), SlotKind::Stream, "h1").await);
    // Another kind and another tenant have their own counts.
    assert!(take(acme.clone(), SlotKind::Wait, "h3").await);
    assert!(take(beta.clone(), SlotKind::Stream, "h3").await);
    assert!(take(beta.clone(), SlotKind::Stream, "h4").await);
    // A release frees one slot for the next holder.
    store
        .release_slot(&acme, SlotKind::Stream, "h2")
        .await
        .unwrap();
    assert!(take(acme.clone(), SlotKind::Stream, "h3").await);
    assert!(!take(acme.clone(), SlotKind::Stream, "h5").await);
}

/// Twelve takes at once over a cap of 3 grant exactly 3, each answering granted or refused
/// (never busy); after releases (some twice) exactly three fit again.
pub async fn case_a_burst_of_takes_grants_exactly_the_cap(store: Arc<dyn SlotStore>) {
    // A burst: twelve takes at once over a cap of 3 (a client opening many waits together).
    let acme = tenant();
    let now = wall_ms();
    let takes = (0..12).map(|i| {
        let (store, acme) = (store.clone(), acme.clone());
        tokio::spawn(async move {
            let holder = format!("racer-{i}");
            store
                .acquire_slot(&acme, SlotKind::Wait, &holder, 3, now, minute(now))
                .await
        })
    });
    let mut granted = 0;
    for take in futures::future::join_all(takes).await {
        // Every take answers (no "busy, retry" under a burst): granted or refused.
        if take.unwrap().unwrap() {
            granted += 1;
        }
    }
    assert_eq!(
        granted, 3,
        "a burst of 12 over a cap of 3 granted {granted}"
    );
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Wait, "late", 3, now, minute(now))
            .await
            .unwrap()
    );
    // Releases are counted too: all released (twice for most: harmless), three fit again.
    for i in 0..12 {
        store
            .release_slot(&acme, SlotKind::Wait, &format!("racer-{i}"))
            .await
            .unwrap();
    }
    for holder in ["next-1", "next-2", "next-3"] {
        assert!(
            store
                .acquire_slot(&acme, SlotKind::Wait, holder, 3, now, minute(now))
                .await
                .unwrap(),
            "{holder}"
        );
    }
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Wait, "next-4", 3, now, minute(now))
            .await
            .unwrap()
    );
}

/// A slot whose lease ended stops counting at its end (not before), and its dropped holder
/// cannot renew its way back over the cap.
pub async fn case_an_ended_lease_stops_counting_and_cannot_be_renewed_once_dropped(
    store: Arc<dyn SlotStore>,
) {
    let acme = tenant();
    let now = wall_ms();
    assert!(
        store
            .acquire_slot(&acme, SlotKind::Stream, "dies", 1, now, now + 1_000)
            .await
            .unwrap()
    );
    // Before the lease ends the slot counts; after it, another holder takes it.
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Stream, "next", 1, now + 999, minute(now))
            .await
            .unwrap()
    );
    assert!(
        store
            .acquire_slot(&acme, SlotKind::Stream, "next", 1, now + 1_000, minute(now))
            .await
            .unwrap()
    );
    // The dead holder's slot was dropped: it cannot renew its way back over the cap.
    assert!(
        !store
            .renew_slot(&acme, SlotKind::Stream, "dies", minute(now))
            .await
            .unwrap()
    );
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Stream, "dies", 1, now + 1_001, minute(now))
            .await
            .unwrap()
    );
}

/// A renewal moves the holder's lease end; nobody renews or releases a slot it does not hold,
/// in its tenant or another; a release frees it and releasing twice is harmless.
pub async fn case_renew_and_release_act_on_the_holders_own_slot(store: Arc<dyn SlotStore>) {
    let (acme, beta) = (tenant(), tenant());
    let now = wall_ms();
    assert!(
        store
            .acquire_slot(&acme, SlotKind::Wait, "mine", 1, now, now + 1_000)
            .await
            .unwrap()
    );
    // A renewal moves the lease: past the old end the slot still counts.
    assert!(
        store
            .renew_slot(&acme, SlotKind::Wait, "mine", minute(now))
            .await
            .unwrap()
    );
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Wait, "other", 1, now + 5_000, minute(now))
            .await
            .unwrap()
    );
    // Nobody renews or releases a slot it does not hold, in this tenant or another.
    assert!(
        !store
            .renew_slot(&acme, SlotKind::Wait, "other", minute(now))
            .await
            .unwrap()
    );
    assert!(
        !store
            .renew_slot(&beta, SlotKind::Wait, "mine", minute(now))
            .await
            .unwrap()
    );
    store
        .release_slot(&beta, SlotKind::Wait, "mine")
        .await
        .unwrap();
    store
        .release_slot(&acme, SlotKind::Stream, "mine")
        .await
        .unwrap();
    assert!(
        !store
            .acquire_slot(&acme, SlotKind::Wait, "other", 1, now + 5_000, minute(now))
            .await
            .unwrap(),
        "releases elsewhere freed nothing"
    );
    // Its own release frees it; releasing twice is harmless.
    store
        .release_slot(&acme, SlotKind::Wait, "mine")
        .await
        .unwrap();
    store
        .release_slot(&acme, SlotKind::Wait, "mine")
        .await
        .unwrap();
    assert!(
        !store
            .renew_slot(&acme, SlotKind::Wait, "mine", minute(now))
            .await
            .unwrap()
    );
    assert!(
        store
            .acquire_slot(&acme, SlotKind::Wait, "other", 1, now + 5_000, minute(now))
            .await
            .unwrap()
    );
}

/// A rate window reads 0 untouched and each add answers the running count; windows, tenants and
/// source addresses count apart.
pub async fn case_a_rate_window_counts_per_scope_and_window(store: Arc<dyn SlotStore>) {
    let (acme, beta) = (tenant(), tenant());
    let window = wall_ms() / 1_000 * 1_000;
    let mine = RateScope::Tenant(acme.clone());
    // An untouched window reads 0; adds answer the running count.
    assert_eq!(store.add_to_window(&mine, window, 0).await.unwrap(), 0);
    assert_eq!(store.add_to_window(&mine, window, 3).await.unwrap(), 3);
    assert_eq!(store.add_to_window(&mine, window, 2).await.unwrap(), 5);
    assert_eq!(store.add_to_window(&mine, window, 0).await.unwrap(), 5);
    // The next window, another tenant and the probes of an address named like the tenant
    // count apart.
    assert_eq!(
        store.add_to_window(&mine, window + 1_000, 1).await.unwrap(),
        1
    );
    let theirs = RateScope::Tenant(beta);
    assert_eq!(store.add_to_window(&theirs, window, 4).await.unwrap(), 4);
    let probes = RateScope::KeyProbes(acme.as_str().to_owned());
    assert_eq!(store.add_to_window(&probes, window, 1).await.unwrap(), 1);
    // The first window still holds its own count.
    assert_eq!(store.add_to_window(&mine, window, 1).await.unwrap(), 6);
}

/// Twenty racing adds of 2 against a limit of 25 a window are all counted (none lost), and
/// the requests granted add up to exactly the limit.
pub async fn case_racing_adds_are_all_counted_and_grant_exactly_the_limit(
    store: Arc<dyn SlotStore>,
) {
    // Twenty processes each claiming 2 requests at once against a limit of 25 a window.
    // (A fresh random name stands for the source address.)
    let scope = RateScope::KeyProbes(tenant().as_str().to_owned());
    let window = wall_ms() / 1_000 * 1_000;
    let adds = (0..20).map(|_| {
        let (store, scope) = (store.clone(), scope.clone());
        tokio::spawn(async move { store.add_to_window(&scope, window, 2).await })
    });
    let mut counts = Vec::new();
    for add in futures::future::join_all(adds).await {
        counts.push(add.unwrap().unwrap());
    }
    counts.sort_unstable();
    // No add was lost: each saw its own count, and the last one all of them.
    let expected: Vec<u64> = (1..=20).map(|i| i * 2).collect();
    assert_eq!(counts, expected);
    let granted: u32 = counts.iter().map(|&c| granted_of(c, 2, 25)).sum();
    assert_eq!(
        granted, 25,
        "racing claims of 2 over a limit of 25 granted {granted}"
    );
    assert_eq!(store.add_to_window(&scope, window, 0).await.unwrap(), 40);
}
