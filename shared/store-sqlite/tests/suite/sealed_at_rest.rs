//! Tenant secrets on the embedded backend, through the vault as `serve` builds it (the data
//! directory's key file): values round-trip, never sit in clear in the database file or its
//! WAL, and a row copied to another tenant or name does not open.

use agentlane_core::{SecretStore, TenantId};
use agentlane_secrets::{LocalKeyFile, Vault};
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;
use std::time::Duration;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every file of the data directory but the key file, as bytes.
fn stored_bytes(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "secrets.key"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

#[tokio::test]
async fn a_value_is_never_in_clear_in_the_database_or_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    let vault = Vault::new(
        Arc::new(backend.clone()),
        Arc::new(LocalKeyFile::in_dir(dir.path())),
    )
    .with_ttl(Duration::ZERO);
    let acme = TenantId::new("acme");
    let value = "canary-7f3a9c1e-value-that-must-not-leak";
    let put = vault.put(&acme, "token", value, 1_000, 100).await.unwrap();
    assert!(put.created);
    let replaced = "canary-2b8d44aa-the-replacement";
    vault
        .put(&acme, "token", replaced, 2_000, 100)
        .await
        .unwrap();

    let opened = vault.reveal(&acme, "token").await.unwrap().unwrap();
    assert_eq!(opened.expose(), replaced);
    let files = stored_bytes(dir.path());
    assert!(files.iter().any(|(p, _)| p.ends_with("-wal")), "WAL mode");
    for (path, bytes) in &files {
        assert!(!contains(bytes, value.as_bytes()), "{path} holds the value");
        assert!(
            !contains(bytes, replaced.as_bytes()),
            "{path} holds the value"
        );
    }

    // Another vault on the same directory (a restarted serve) opens it with the key file.
    let again = Vault::new(
        Arc::new(SqliteBackend::open(dir.path()).unwrap()),
        Arc::new(LocalKeyFile::in_dir(dir.path())),
    );
    let opened = again.reveal(&acme, "token").await.unwrap().unwrap();
    assert_eq!(opened.expose(), replaced);
}

#[tokio::test]
async fn a_sealed_row_copied_to_another_tenant_or_name_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    let store: Arc<dyn SecretStore> = Arc::new(backend.clone());
    let vault = Vault::new(store.clone(), Arc::new(LocalKeyFile::in_dir(dir.path())));
    let (acme, globex) = (TenantId::new("acme"), TenantId::new("globex"));
    vault
        .put(&acme, "token", "acme-only", 1, 100)
        .await
        .unwrap();
    let record = store.get_secret(&acme, "token").await.unwrap().unwrap();

    // What a tenant able to write rows (a bug, an operator's mistake) could copy.
    store
        .put_secret(&globex, "token", &record.sealed, 2, 100)
        .await
        .unwrap();
    store
        .put_secret(&acme, "other", &record.sealed, 2, 100)
        .await
        .unwrap();
    assert!(vault.reveal(&globex, "token").await.is_err());
    assert!(vault.reveal(&acme, "other").await.is_err());
    assert_eq!(
        vault
            .reveal(&acme, "token")
            .await
            .unwrap()
            .unwrap()
            .expose(),
        "acme-only"
    );
    assert!(vault.reveal(&globex, "missing").await.unwrap().is_none());
}

#[tokio::test]
async fn a_replaced_or_deleted_value_is_seen_at_once_by_the_vault_that_wrote_it() {
    let backend = SqliteBackend::open_temporary().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let vault = Vault::new(
        Arc::new(backend),
        Arc::new(LocalKeyFile::in_dir(dir.path())),
    );
    let acme = TenantId::new("acme");
    vault.put(&acme, "token", "v1", 1, 100).await.unwrap();
    assert_eq!(
        vault
            .reveal(&acme, "token")
            .await
            .unwrap()
            .unwrap()
            .expose(),
        "v1"
    );
    vault.put(&acme, "token", "v2", 2, 100).await.unwrap();
    assert_eq!(
        vault
            .reveal(&acme, "token")
            .await
            .unwrap()
            .unwrap()
            .expose(),
        "v2"
    );
    assert!(vault.delete(&acme, "token").await.unwrap());
    assert!(vault.reveal(&acme, "token").await.unwrap().is_none());
}
