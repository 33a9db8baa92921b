//! Tenant secrets on DynamoDB and KMS (the emulator): the store's rules (create, replace,
//! the cap under concurrent creates, paging, isolation, delete, erasure) and the vault over
//! it with KMS-wrapped data keys (round trip, a moved value does not open, no plaintext in
//! the table, one `Decrypt` per value per process).

use crate::common;
use agentlane_aws::DynamoStore;
use agentlane_aws::aws_config::SdkConfig;
use agentlane_aws::aws_sdk_dynamodb::types::AttributeValue;
use agentlane_aws::aws_sdk_kms;
use agentlane_aws::kms::KmsKeyWrap;
use agentlane_aws::setup::{AwsConfig, ensure_secrets_key};
use agentlane_core::{SealedValue, SecretStore, StoreError, TenantEraser, TenantId};
use agentlane_secrets::{KeyContext, KeyWrap, SealError, Vault};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn sealed(tag: u8) -> SealedValue {
    SealedValue {
        key_ref: "test:1".into(),
        wrapped_key: vec![tag; 40],
        nonce: vec![tag; 12],
        ciphertext: vec![tag; 24],
    }
}

#[tokio::test]
async fn a_put_creates_then_replaces_keeping_created_at() {
    let store = common::store().await;
    let t = TenantId::new("acme");

    let first = store
        .put_secret(&t, "TOKEN", &sealed(1), 1_000, 10)
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(
        (
            first.meta.version,
            first.meta.created_at,
            first.meta.updated_at
        ),
        (1, 1_000, 1_000)
    );

    let second = store
        .put_secret(&t, "TOKEN", &sealed(2), 2_000, 10)
        .await
        .unwrap();
    assert!(!second.created, "the name existed: a replace");
    assert_eq!(
        (
            second.meta.version,
            second.meta.created_at,
            second.meta.updated_at
        ),
        (2, 1_000, 2_000)
    );

    let record = store
        .get_secret(&t, "TOKEN")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(record.sealed, sealed(2), "the new value, whole");
    assert_eq!(record.meta, second.meta);
    assert_eq!(record.tenant, t);
    assert!(store.get_secret(&t, "OTHER").await.unwrap().is_none());
}

#[tokio::test]
async fn the_cap_holds_under_ten_concurrent_creates() {
    let store = common::store().await;
    let t = TenantId::new("acme");
    let puts = (0..10).map(|i| {
        let store = store.clone();
        let t = t.clone();
        tokio::spawn(async move {
            store
                .put_secret(&t, &format!("S{i}"), &sealed(i), 1_000, 3)
                .await
        })
    });
    let mut created = 0;
    for put in puts {
        match put.await.unwrap() {
            Ok(put) => {
                assert!(put.created);
                created += 1;
            }
            Err(StoreError::Conflict(why)) => assert!(why.contains("cap is 3"), "{why}"),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, 3);
    let listed = store.list_secrets(&t, None, 100).await.unwrap();
    assert_eq!(listed.len(), 3);

    // At the cap a replace still goes through, and a delete frees a place.
    let name = listed[0].name.clone();
    let replaced = store
        .put_secret(&t, &name, &sealed(9), 2_000, 3)
        .await
        .unwrap();
    assert_eq!((replaced.created, replaced.meta.version), (false, 2));
    assert!(matches!(
        store.put_secret(&t, "NEW", &sealed(9), 2_000, 3).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(store.delete_secret(&t, &name).await.unwrap());
    assert!(
        store
            .put_secret(&t, "NEW", &sealed(9), 3_000, 3)
            .await
            .unwrap()
            .created
    );
}

#[tokio::test]
async fn listing_pages_by_name() {
    let store = common::store().await;
    let t = TenantId::new("acme");
    for name in ["delta", "Alpha", "charlie", "bravo", "echo", "_x", "golf"] {
        store
            .put_secret(&t, name, &sealed(1), 1_000, 100)
            .await
            .unwrap();
    }
    let names = |page: Vec<agentlane_core::SecretMeta>| -> Vec<String> {
        page.into_iter().map(|m| m.name).collect()
    };
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = names(store.list_secrets(&t, after.as_deref(), 3).await.unwrap());
        assert!(page.len() <= 3);
        let Some(last) = page.last().cloned() else {
            break;
        };
        seen.extend(page);
        after = Some(last);
    }
    assert_eq!(
        seen,
        ["Alpha", "_x", "bravo", "charlie", "delta", "echo", "golf"],
        "byte order of the names, each once"
    );
    // After a name that is not there: from the next one.
    assert_eq!(
        names(store.list_secrets(&t, Some("c"), 2).await.unwrap()),
        ["charlie", "delta"]
    );
    assert!(
        store
            .list_secrets(&t, Some("golf"), 5)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn tenants_never_reach_each_others_secrets() {
    let store = common::store().await;
    let (a, b) = (TenantId::new("a"), TenantId::new("b"));
    store
        .put_secret(&a, "TOKEN", &sealed(1), 1_000, 1)
        .await
        .unwrap();

    assert!(store.get_secret(&b, "TOKEN").await.unwrap().is_none());
    assert!(store.list_secrets(&b, None, 10).await.unwrap().is_empty());
    assert!(!store.delete_secret(&b, "TOKEN").await.unwrap());
    // b's cap is its own: a's secret does not count.
    let put = store
        .put_secret(&b, "TOKEN", &sealed(2), 1_000, 1)
        .await
        .unwrap();
    assert!(put.created && put.meta.version == 1);
    assert_eq!(
        store.get_secret(&a, "TOKEN").await.unwrap().unwrap().sealed,
        sealed(1)
    );
}

#[tokio::test]
async fn a_delete_removes_the_secret_once() {
    let store = common::store().await;
    let t = TenantId::new("acme");
    store
        .put_secret(&t, "TOKEN", &sealed(1), 1_000, 1)
        .await
        .unwrap();
    assert!(store.delete_secret(&t, "TOKEN").await.unwrap());
    assert!(!store.delete_secret(&t, "TOKEN").await.unwrap());
    assert!(store.get_secret(&t, "TOKEN").await.unwrap().is_none());
    // A new secret of that name starts over at version 1, and the cap counted the delete.
    let again = store
        .put_secret(&t, "TOKEN", &sealed(2), 2_000, 1)
        .await
        .unwrap();
    assert_eq!(
        (again.created, again.meta.version, again.meta.created_at),
        (true, 1, 2_000)
    );
}

#[tokio::test]
async fn erasing_a_tenant_removes_and_counts_its_secrets() {
    let store = common::store().await;
    let (gone, kept) = (TenantId::new("gone"), TenantId::new("kept"));
    for name in ["A", "B"] {
        store
            .put_secret(&gone, name, &sealed(1), 1_000, 10)
            .await
            .unwrap();
    }
    store
        .put_secret(&kept, "A", &sealed(1), 1_000, 10)
        .await
        .unwrap();

    let erased = store.erase_tenant(&gone).await.unwrap();
    assert_eq!(erased.removed.get("secrets"), Some(&2), "{erased:?}");
    assert!(
        store
            .list_secrets(&gone, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.list_secrets(&kept, None, 10).await.unwrap().len(), 1);
    // The count went with it: the cap starts from zero.
    assert!(
        store
            .put_secret(&gone, "C", &sealed(1), 2_000, 1)
            .await
            .unwrap()
            .created
    );
}

// --- the vault over KMS ----------------------------------------------------------------------

/// Counts the KMS requests sent, by operation (`X-Amz-Target: TrentService.Decrypt`).
#[derive(Debug, Default, Clone)]
struct KmsCalls(Arc<std::sync::Mutex<HashMap<String, usize>>>);

impl KmsCalls {
    fn of(&self, operation: &str) -> usize {
        self.0.lock().unwrap().get(operation).copied().unwrap_or(0)
    }
}

impl aws_sdk_kms::config::Intercept for KmsCalls {
    fn name(&self) -> &'static str {
        "KmsCalls"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_kms::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_kms::config::RuntimeComponents,
        _: &mut aws_sdk_kms::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or_default().to_owned();
        *self.0.lock().unwrap().entry(operation).or_default() += 1;
        Ok(())
    }
}

/// Counts the unwraps the vault asks its key wrapper for.
struct CountingUnwraps {
    inner: KmsKeyWrap,
    unwraps: AtomicUsize,
}

#[async_trait::async_trait]
impl KeyWrap for CountingUnwraps {
    fn key_ref(&self) -> String {
        self.inner.key_ref()
    }

    async fn generate(
        &self,
        ctx: &KeyContext<'_>,
    ) -> Result<(agentlane_secrets::DataKey, Vec<u8>), SealError> {
        self.inner.generate(ctx).await
    }

    async fn unwrap(
        &self,
        key_ref: &str,
        wrapped: &[u8],
        ctx: &KeyContext<'_>,
    ) -> Result<agentlane_secrets::DataKey, SealError> {
        self.unwraps.fetch_add(1, Ordering::SeqCst);
        self.inner.unwrap(key_ref, wrapped, ctx).await
    }
}

struct KmsWorld {
    sdk: SdkConfig,
    store: DynamoStore,
    table: String,
    kms: KmsKeyWrap,
    calls: KmsCalls,
}

async fn kms_world() -> KmsWorld {
    let sdk = common::sdk().await;
    let table = common::fresh_table(&sdk).await;
    let config = AwsConfig {
        table: table.clone(),
        ..AwsConfig::default()
    };
    let key = ensure_secrets_key(&sdk, &config).await.expect("a KMS key");
    assert_eq!(key.key, format!("alias/{table}-secrets"));
    let calls = KmsCalls::default();
    let client = aws_sdk_kms::Client::from_conf(
        aws_sdk_kms::config::Builder::from(&sdk)
            .interceptor(calls.clone())
            .build(),
    );
    KmsWorld {
        store: DynamoStore::new(agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk), &table),
        kms: KmsKeyWrap::new(client, key.key),
        sdk,
        table,
        calls,
    }
}

impl KmsWorld {
    fn vault(&self, ttl: Duration) -> (Vault, Arc<CountingUnwraps>) {
        let keys = Arc::new(CountingUnwraps {
            inner: self.kms.clone(),
            unwraps: AtomicUsize::new(0),
        });
        let vault = Vault::new(Arc::new(self.store.clone()), keys.clone()).with_ttl(ttl);
        (vault, keys)
    }

    async fn raw_items(&self) -> Vec<HashMap<String, AttributeValue>> {
        let ddb = agentlane_aws::aws_sdk_dynamodb::Client::new(&self.sdk);
        let out = ddb.scan().table_name(&self.table).send().await.unwrap();
        out.items.unwrap_or_default()
    }

    /// Copies the raw item of `from`'s secret `name` to `to`'s secret `new_name`, byte for byte.
    async fn copy_item(&self, from: &str, name: &str, to: &str, new_name: &str) {
        let ddb = agentlane_aws::aws_sdk_dynamodb::Client::new(&self.sdk);
        let mut item = ddb
            .get_item()
            .table_name(&self.table)
            .key("PK", AttributeValue::S(format!("T#{from}#SECRETS")))
            .key("SK", AttributeValue::S(format!("N#{name}")))
            .send()
            .await
            .unwrap()
            .item
            .expect("the item");
        item.insert("PK".into(), AttributeValue::S(format!("T#{to}#SECRETS")));
        item.insert("SK".into(), AttributeValue::S(format!("N#{new_name}")));
        ddb.put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
}

const VALUE: &str = "ghp_s3cr3t-value-that-must-never-be-stored-in-clear";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn attribute_bytes(value: &AttributeValue) -> Vec<u8> {
    match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.as_bytes().to_vec(),
        AttributeValue::B(b) => b.as_ref().to_vec(),
        other => format!("{other:?}").into_bytes(),
    }
}

#[tokio::test]
async fn a_vault_over_kms_round_trips_and_stores_no_plaintext() {
    let world = kms_world().await;
    let (vault, _) = world.vault(Duration::ZERO);
    let t = TenantId::new("acme");
    let put = vault.put(&t, "TOKEN", VALUE, 1_000, 10).await.unwrap();
    assert!(put.created);
    assert_eq!(world.calls.of("GenerateDataKey"), 1);

    let opened = vault.reveal(&t, "TOKEN").await.unwrap().expect("a value");
    assert_eq!(opened.expose(), VALUE);
    assert!(!format!("{opened:?}").contains(VALUE));

    let record = world.store.get_secret(&t, "TOKEN").await.unwrap().unwrap();
    assert!(
        record.sealed.key_ref.starts_with("kms:alias/"),
        "{:?}",
        record.sealed
    );
    for item in world.raw_items().await {
        for (name, value) in &item {
            let bytes = attribute_bytes(value);
            assert!(
                !contains(&bytes, VALUE.as_bytes()) && !contains(&bytes, &VALUE.as_bytes()[..16]),
                "attribute {name} holds the value"
            );
        }
    }
}

#[tokio::test]
async fn a_value_moved_to_another_tenant_or_name_does_not_open() {
    let world = kms_world().await;
    let (vault, _) = world.vault(Duration::ZERO);
    let t = TenantId::new("acme");
    vault.put(&t, "TOKEN", VALUE, 1_000, 10).await.unwrap();

    world.copy_item("acme", "TOKEN", "mallory", "TOKEN").await;
    world.copy_item("acme", "TOKEN", "acme", "OTHER").await;
    for (tenant, name) in [("mallory", "TOKEN"), ("acme", "OTHER")] {
        let err = vault.reveal(&TenantId::new(tenant), name).await.err();
        assert!(
            matches!(err, Some(StoreError::Corrupt(_))),
            "{tenant}/{name}: {err:?}"
        );
    }

    // KMS itself refuses the wrapped key under another tenant's or name's context.
    let record = world.store.get_secret(&t, "TOKEN").await.unwrap().unwrap();
    let mallory = TenantId::new("mallory");
    for ctx in [
        KeyContext {
            tenant: &mallory,
            name: "TOKEN",
        },
        KeyContext {
            tenant: &t,
            name: "OTHER",
        },
    ] {
        let err = world
            .kms
            .unwrap(&record.sealed.key_ref, &record.sealed.wrapped_key, &ctx)
            .await
            .err();
        assert!(
            matches!(err, Some(SealError::Corrupt(_))),
            "{ctx:?}: {err:?}"
        );
    }
    let ctx = KeyContext {
        tenant: &t,
        name: "TOKEN",
    };
    assert!(
        world
            .kms
            .unwrap(&record.sealed.key_ref, &record.sealed.wrapped_key, &ctx)
            .await
            .is_ok()
    );
    // The original still opens.
    assert_eq!(
        vault.reveal(&t, "TOKEN").await.unwrap().unwrap().expose(),
        VALUE
    );
}

#[tokio::test]
async fn a_process_decrypts_each_value_once() {
    let world = kms_world().await;
    // TTL zero: every reveal reads the store again; the data key is what is kept.
    let (vault, counting) = world.vault(Duration::ZERO);
    let t = TenantId::new("acme");
    vault.put(&t, "TOKEN", VALUE, 1_000, 10).await.unwrap();
    vault
        .put(&t, "OTHER", "other-value", 1_000, 10)
        .await
        .unwrap();

    for _ in 0..2 {
        assert_eq!(
            vault.reveal(&t, "TOKEN").await.unwrap().unwrap().expose(),
            VALUE
        );
        assert_eq!(
            vault.reveal(&t, "OTHER").await.unwrap().unwrap().expose(),
            "other-value"
        );
    }
    assert_eq!(world.calls.of("Decrypt"), 2, "one Decrypt per value");
    assert_eq!(counting.unwraps.load(Ordering::SeqCst), 2);

    // A replaced value has a new data key: one more Decrypt, then none again.
    vault
        .put(&t, "TOKEN", "new-value", 2_000, 10)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            vault.reveal(&t, "TOKEN").await.unwrap().unwrap().expose(),
            "new-value"
        );
    }
    assert_eq!(world.calls.of("Decrypt"), 3);
    assert_eq!(world.calls.of("GenerateDataKey"), 3);
}

#[tokio::test]
async fn without_a_key_the_vault_says_what_to_set() {
    let world = kms_world().await;
    let vault = Vault::new(
        Arc::new(world.store.clone()),
        Arc::new(KmsKeyWrap::unconfigured(aws_sdk_kms::Client::new(
            &world.sdk,
        ))),
    );
    let err = vault
        .put(&TenantId::new("acme"), "TOKEN", VALUE, 1_000, 10)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Unavailable(why) if why.contains("AGENTLANE_SECRETS_KMS_KEY")),
        "{err:?}"
    );
}

#[tokio::test]
async fn setting_up_the_secrets_key_twice_finds_the_same_key_with_rotation() {
    let sdk = common::sdk().await;
    let config = common::fresh_config();
    let first = ensure_secrets_key(&sdk, &config).await.unwrap();
    let second = ensure_secrets_key(&sdk, &config).await.unwrap();
    assert_eq!(first, second);
    assert!(first.arn.starts_with("arn:aws:kms:"), "{first:?}");
    let kms = aws_sdk_kms::Client::new(&sdk);
    let rotation = kms
        .get_key_rotation_status()
        .key_id(&first.arn)
        .send()
        .await
        .unwrap();
    assert!(rotation.key_rotation_enabled);

    // A configured key is checked, not created.
    let configured = AwsConfig {
        secrets_kms_key: Some(first.arn.clone()),
        ..common::fresh_config()
    };
    assert_eq!(
        ensure_secrets_key(&sdk, &configured).await.unwrap().arn,
        first.arn
    );
    let missing = AwsConfig {
        secrets_kms_key: Some("alias/no-such-key".into()),
        ..common::fresh_config()
    };
    assert!(ensure_secrets_key(&sdk, &missing).await.is_err());
}
