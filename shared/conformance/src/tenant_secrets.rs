//! The [`SecretStore`] cases: a put creates then replaces (version, times), every call is scoped
//! by the tenant, the per-tenant cap holds under concurrent creates, listing pages by name and
//! shows no value, a delete removes. The store keeps sealed bytes as given (opening them is the
//! vault's business); the cases check it never mixes two writes.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::secrets_conformance!(async { Arc::new(make()) as Arc<dyn SecretStore> });
//! ```

use crate::fixtures::{tenant, wall_ms};
use agentlane_core::{SealedValue, SecretStore, StoreError};
use std::sync::Arc;

/// Generates `mod secrets_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn SecretStore>`, evaluated per case.
#[macro_export]
macro_rules! secrets_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests secrets_conformance tenant_secrets ($make);
            case_a_put_creates_then_replaces_keeping_its_creation_time,
            case_secrets_are_per_tenant,
            case_the_cap_holds_under_concurrent_creates_and_replacements_pass_it,
            case_listing_pages_by_name,
            case_a_deleted_secret_is_gone_and_its_name_free,
            case_concurrent_replacements_leave_one_whole_value,
        }
    };
}

/// Sealed bytes standing for `tag` (the store never opens them).
fn sealed(tag: &str) -> SealedValue {
    SealedValue {
        key_ref: format!("test:{tag}"),
        wrapped_key: format!("wrapped-{tag}").into_bytes(),
        nonce: vec![7; 12],
        ciphertext: format!("ciphertext-{tag}").into_bytes(),
    }
}

/// A first put creates version 1 (`created`); a second replaces the sealed value whole,
/// version 2, its creation time kept and its update time moved.
pub async fn case_a_put_creates_then_replaces_keeping_its_creation_time(
    store: Arc<dyn SecretStore>,
) {
    let acme = tenant();
    let t0 = wall_ms();
    let first = store
        .put_secret(&acme, "GITHUB_TOKEN", &sealed("one"), t0, 100)
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(first.meta.name, "GITHUB_TOKEN");
    assert_eq!(
        (
            first.meta.version,
            first.meta.created_at,
            first.meta.updated_at
        ),
        (1, t0, t0)
    );

    let second = store
        .put_secret(&acme, "GITHUB_TOKEN", &sealed("two"), t0 + 5_000, 100)
        .await
        .unwrap();
    assert!(!second.created, "the name existed: a replacement");
    assert_eq!(
        (
            second.meta.version,
            second.meta.created_at,
            second.meta.updated_at
        ),
        (2, t0, t0 + 5_000)
    );

    let record = store
        .get_secret(&acme, "GITHUB_TOKEN")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(record.tenant, acme);
    assert_eq!(record.meta, second.meta);
    assert_eq!(record.sealed, sealed("two"), "the new sealed value, whole");
    assert_eq!(store.get_secret(&acme, "OTHER").await.unwrap(), None);
}

/// Two tenants with a secret of the same name each read their own; neither lists, replaces or
/// deletes the other's.
pub async fn case_secrets_are_per_tenant(store: Arc<dyn SecretStore>) {
    let (acme, beta) = (tenant(), tenant());
    let now = wall_ms();
    store
        .put_secret(&acme, "token", &sealed("acme"), now, 100)
        .await
        .unwrap();
    let b = store
        .put_secret(&beta, "token", &sealed("beta"), now, 100)
        .await
        .unwrap();
    assert!(b.created, "the other tenant's name is its own");

    let a = store.get_secret(&acme, "token").await.unwrap().unwrap();
    assert_eq!(a.sealed, sealed("acme"));
    let b = store.get_secret(&beta, "token").await.unwrap().unwrap();
    assert_eq!(b.sealed, sealed("beta"));

    assert!(store.delete_secret(&beta, "token").await.unwrap());
    assert!(
        store.get_secret(&acme, "token").await.unwrap().is_some(),
        "another tenant's delete leaves this one's"
    );
    assert_eq!(store.list_secrets(&acme, None, 10).await.unwrap().len(), 1);
    assert!(
        store
            .list_secrets(&beta, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_secrets(&tenant(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// With a cap of 3, ten concurrent creates of distinct names store exactly three (the others
/// `Conflict` naming the cap); replacing one of the three still works at the cap.
pub async fn case_the_cap_holds_under_concurrent_creates_and_replacements_pass_it(
    store: Arc<dyn SecretStore>,
) {
    let acme = tenant();
    let now = wall_ms();
    let puts = (0..10).map(|i| {
        let (store, acme) = (store.clone(), acme.clone());
        async move {
            store
                .put_secret(&acme, &format!("s{i}"), &sealed("x"), now, 3)
                .await
        }
    });
    let results = futures::future::join_all(puts).await;
    let stored = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(stored, 3, "{results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(
            matches!(refused, StoreError::Conflict(why) if why.contains('3')),
            "{refused:?}"
        );
    }
    let listed = store.list_secrets(&acme, None, 100).await.unwrap();
    assert_eq!(listed.len(), 3);
    let replaced = store
        .put_secret(&acme, &listed[0].name, &sealed("y"), now + 1, 3)
        .await
        .unwrap();
    assert!(!replaced.created && replaced.meta.version == 2);
}

/// Names come back in order, `limit` at a time, each page after the last name of the one
/// before; no page carries a value.
pub async fn case_listing_pages_by_name(store: Arc<dyn SecretStore>) {
    let acme = tenant();
    let now = wall_ms();
    for name in ["delta", "alpha", "charlie", "bravo", "echo"] {
        store
            .put_secret(&acme, name, &sealed(name), now, 100)
            .await
            .unwrap();
    }
    let first = store.list_secrets(&acme, None, 2).await.unwrap();
    let names = |page: &[agentlane_core::SecretMeta]| {
        page.iter().map(|m| m.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&first), ["alpha", "bravo"]);
    let second = store.list_secrets(&acme, Some("bravo"), 2).await.unwrap();
    assert_eq!(names(&second), ["charlie", "delta"]);
    let last = store.list_secrets(&acme, Some("delta"), 2).await.unwrap();
    assert_eq!(names(&last), ["echo"]);
    assert!(
        store
            .list_secrets(&acme, Some("echo"), 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(first.iter().all(|m| m.version == 1 && m.created_at == now));
}

/// A delete answers `true` once, then `false`; the name may be created again (version 1).
pub async fn case_a_deleted_secret_is_gone_and_its_name_free(store: Arc<dyn SecretStore>) {
    let acme = tenant();
    let now = wall_ms();
    store
        .put_secret(&acme, "token", &sealed("a"), now, 1)
        .await
        .unwrap();
    assert!(store.delete_secret(&acme, "token").await.unwrap());
    assert!(!store.delete_secret(&acme, "token").await.unwrap());
    assert_eq!(store.get_secret(&acme, "token").await.unwrap(), None);
    let again = store
        .put_secret(&acme, "token", &sealed("b"), now + 1, 1)
        .await
        .unwrap();
    assert!(
        again.created,
        "a deleted secret frees its name and its place under the cap"
    );
    assert_eq!(again.meta.version, 1);
}

/// Eight replacements racing on one name leave one of them whole (never parts of two), and
/// the version counts every write.
pub async fn case_concurrent_replacements_leave_one_whole_value(store: Arc<dyn SecretStore>) {
    let acme = tenant();
    let now = wall_ms();
    store
        .put_secret(&acme, "token", &sealed("start"), now, 100)
        .await
        .unwrap();
    let tags: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let puts = tags.iter().map(|tag| {
        let (store, acme, tag) = (store.clone(), acme.clone(), tag.clone());
        async move {
            store
                .put_secret(&acme, "token", &sealed(&tag), now + 1, 100)
                .await
        }
    });
    let results = futures::future::join_all(puts).await;
    let written = results.iter().filter(|r| r.is_ok()).count();
    assert!(written >= 1, "{results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(refused, StoreError::Conflict(_)), "{refused:?}");
    }
    let record = store.get_secret(&acme, "token").await.unwrap().unwrap();
    assert!(
        tags.iter().any(|t| record.sealed == sealed(t)),
        "one write's sealed value, whole: {:?}",
        record.sealed
    );
    assert_eq!(record.meta.version, 1 + written as u64);
}
