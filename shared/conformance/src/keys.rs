//! The [`KeyStore`] cases: a created key is found by its id and verifies, a tenant lists only
//! its own keys (never a secret), revocation is per tenant and keeps its first time. Every case
//! uses fresh random tenants and fresh key ids, so cases may share one backend.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::keys_conformance!(async { Arc::new(make()) as Arc<dyn KeyStore> });
//! ```

use crate::fixtures::{tenant, wall_ms};
use agentlane_core::api_key::{KeyStore, NewApiKey, key_id_of};
use agentlane_core::{StoreError, TenantId};
use std::sync::Arc;

/// Generates `mod keys_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn KeyStore>`, evaluated per case.
#[macro_export]
macro_rules! keys_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests keys_conformance keys ($make);
            case_a_created_key_is_found_by_its_id_and_verifies,
            case_keys_are_listed_per_tenant_in_creation_order,
            case_revocation_is_per_tenant_and_keeps_its_first_time,
            case_a_taken_key_id_conflicts,
        }
    };
}

fn mint(tenant: &TenantId, label: Option<&str>) -> NewApiKey {
    NewApiKey::generate(tenant.clone(), label.map(str::to_owned), wall_ms())
}

/// A created key is found by its id and verifies; the store keeps a digest, never the key
/// itself; an id never stored is not found.
pub async fn case_a_created_key_is_found_by_its_id_and_verifies(store: Arc<dyn KeyStore>) {
    let acme = tenant();
    let new = mint(&acme, Some("ci runner"));
    store.create_key(&new.record).await.unwrap();

    let id = key_id_of(&new.key).unwrap();
    let found = store
        .find_key(id)
        .await
        .unwrap()
        .expect("the key is stored");
    assert_eq!(found, new.record);
    assert!(found.accepts(&new.key));
    assert_ne!(found.hash, new.key, "the store keeps a digest, not the key");
    assert!(!found.hash.contains(&new.key[new.key.len() - 20..]));

    let other = mint(&acme, None);
    assert_eq!(
        store.find_key(&other.record.key_id).await.unwrap(),
        None,
        "an id never stored is not found"
    );
}

/// `list_keys` shows a tenant's keys in creation order with their labels, and only that
/// tenant's.
pub async fn case_keys_are_listed_per_tenant_in_creation_order(store: Arc<dyn KeyStore>) {
    let (acme, beta) = (tenant(), tenant());
    let first = mint(&acme, Some("one"));
    let second = mint(&acme, None);
    let betas = mint(&beta, None);
    for new in [&first, &second, &betas] {
        store.create_key(&new.record).await.unwrap();
    }

    let listed = store.list_keys(&acme).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|k| k.key_id.as_str()).collect();
    assert_eq!(ids, [&first.record.key_id, &second.record.key_id]);
    assert_eq!(listed[0].label.as_deref(), Some("one"));
    assert!(listed.iter().all(|k| k.tenant == acme));
    assert_eq!(store.list_keys(&beta).await.unwrap().len(), 1);
    assert!(store.list_keys(&tenant()).await.unwrap().is_empty());
}

/// Only the owning tenant revokes a key; a revoked key verifies nothing yet is still listed, and
/// a second revocation keeps the first revocation time.
pub async fn case_revocation_is_per_tenant_and_keeps_its_first_time(store: Arc<dyn KeyStore>) {
    let (acme, beta) = (tenant(), tenant());
    let new = mint(&acme, None);
    store.create_key(&new.record).await.unwrap();
    let id = new.record.key_id.as_str();

    assert!(
        !store.revoke_key(&beta, id, 10).await.unwrap(),
        "another tenant cannot revoke the key"
    );
    assert!(store.find_key(id).await.unwrap().unwrap().accepts(&new.key));

    let at = wall_ms();
    assert!(store.revoke_key(&acme, id, at).await.unwrap());
    let revoked = store.find_key(id).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_at, Some(at));
    assert!(!revoked.accepts(&new.key), "a revoked key verifies nothing");

    assert!(store.revoke_key(&acme, id, at + 5_000).await.unwrap());
    let listed = store.list_keys(&acme).await.unwrap();
    assert_eq!(listed.len(), 1, "revoked keys are still listed");
    assert_eq!(
        listed[0].revoked_at,
        Some(at),
        "the first revocation time stays"
    );

    assert!(
        !store
            .revoke_key(&acme, &mint(&acme, None).record.key_id, at)
            .await
            .unwrap()
    );
}

/// Creating a key whose id is taken is a `Conflict` and leaves the first key untouched.
pub async fn case_a_taken_key_id_conflicts(store: Arc<dyn KeyStore>) {
    let acme = tenant();
    let new = mint(&acme, None);
    store.create_key(&new.record).await.unwrap();
    let mut again = new.record.clone();
    again.tenant = tenant();
    again.hash = "0".repeat(64);
    let err = store.create_key(&again).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    let kept = store.find_key(&new.record.key_id).await.unwrap().unwrap();
    assert_eq!(kept, new.record, "the first key is untouched");
}
