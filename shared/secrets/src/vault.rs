//! [`Vault`]: a [`SecretStore`] behind sealing, with the caches of a process.

use crate::seal::{self, DataKey};
use crate::{KeyContext, KeyWrap};
use agentlane_core::{
    PutSecret, SealedValue, SecretMeta, SecretStore, StoreError, StoreResult, TenantId,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How long an opened value is used before the store is read again, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The longest TTL a vault takes: a new value reaches every process within a minute.
pub const MAX_TTL: Duration = Duration::from_secs(60);
/// Entries each cache keeps before it starts over.
const CACHE_ENTRIES: usize = 4096;

/// A secret's value, as a run uses it. `Debug` shows nothing of it; the memory is wiped when
/// the last copy is dropped.
#[derive(Clone)]
pub struct SecretValue(Arc<Zeroizing<String>>);

impl SecretValue {
    /// The value, for the one place it is sent (a tool's header or signature).
    pub fn expose(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

type ValueKey = (TenantId, String);
type DataKeyKey = (TenantId, String, Vec<u8>);

/// Tenant secrets, sealed on the way in and opened on the way out. Shared by every task of a
/// process.
pub struct Vault {
    store: Arc<dyn SecretStore>,
    keys: Arc<dyn KeyWrap>,
    ttl: Duration,
    values: Mutex<HashMap<ValueKey, (Instant, SecretValue)>>,
    data_keys: Mutex<HashMap<DataKeyKey, DataKey>>,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Vault {
    /// Secrets in `store`, their data keys wrapped by `keys`; values cached for
    /// [`DEFAULT_TTL`].
    pub fn new(store: Arc<dyn SecretStore>, keys: Arc<dyn KeyWrap>) -> Self {
        Self {
            store,
            keys,
            ttl: DEFAULT_TTL,
            values: Mutex::new(HashMap::new()),
            data_keys: Mutex::new(HashMap::new()),
        }
    }

    /// The same vault with opened values kept for `ttl` (at most [`MAX_TTL`]; zero: read the
    /// store at every use).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.min(MAX_TTL);
        self
    }

    /// How long an opened value is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Seals `value` and stores it as `tenant`'s secret `name` (new unless the name exists;
    /// see [`SecretStore::put_secret`]). The caller has checked the name and the value
    /// (`agentlane_core::tenant_secret::validate_secret_*`).
    pub async fn put(
        &self,
        tenant: &TenantId,
        name: &str,
        value: &str,
        now: u64,
        max_secrets: u32,
    ) -> StoreResult<PutSecret> {
        let ctx = KeyContext { tenant, name };
        let (data_key, wrapped_key) = self.keys.generate(&ctx).await?;
        let (nonce, ciphertext) =
            seal::seal(&data_key, value.as_bytes(), &seal::value_aad(tenant, name))?;
        let sealed = SealedValue {
            key_ref: self.keys.key_ref(),
            wrapped_key,
            nonce,
            ciphertext,
        };
        let put = self
            .store
            .put_secret(tenant, name, &sealed, now, max_secrets)
            .await?;
        self.forget(tenant, name);
        Ok(put)
    }

    /// The tenant's secrets by name (never values).
    pub async fn list(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<SecretMeta>> {
        self.store.list_secrets(tenant, after, limit).await
    }

    /// What the API shows of one secret; `None` when the tenant has none of that name.
    pub async fn meta(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SecretMeta>> {
        Ok(self.store.get_secret(tenant, name).await?.map(|r| r.meta))
    }

    /// Deletes the secret; `false` when there was none.
    pub async fn delete(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        let deleted = self.store.delete_secret(tenant, name).await?;
        self.forget(tenant, name);
        Ok(deleted)
    }

    /// `tenant`'s secret `name`, opened; `None` when it has none of that name. A value opened
    /// within the TTL is used again without reading the store.
    pub async fn reveal(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SecretValue>> {
        let key = (tenant.clone(), name.to_owned());
        if let Some((at, value)) = guard(&self.values).get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(Some(value.clone()));
        }
        let Some(record) = self.store.get_secret(tenant, name).await? else {
            self.forget(tenant, name);
            return Ok(None);
        };
        let sealed = &record.sealed;
        let data_key = self.data_key(tenant, name, sealed).await?;
        let bytes = seal::open(
            &data_key,
            &sealed.nonce,
            &sealed.ciphertext,
            &seal::value_aad(tenant, name),
        )?;
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| StoreError::Corrupt(format!("secret {name:?} is not UTF-8")))?;
        let value = SecretValue(Arc::new(Zeroizing::new(text)));
        if !self.ttl.is_zero() {
            let mut values = guard(&self.values);
            if values.len() >= CACHE_ENTRIES {
                values.clear();
            }
            values.insert(key, (Instant::now(), value.clone()));
        }
        Ok(Some(value))
    }

    async fn data_key(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
    ) -> StoreResult<DataKey> {
        let key = (tenant.clone(), name.to_owned(), sealed.wrapped_key.clone());
        if let Some(hit) = guard(&self.data_keys).get(&key) {
            return Ok(hit.clone());
        }
        let ctx = KeyContext { tenant, name };
        let data_key = self
            .keys
            .unwrap(&sealed.key_ref, &sealed.wrapped_key, &ctx)
            .await?;
        let mut cache = guard(&self.data_keys);
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, data_key.clone());
        Ok(data_key)
    }

    fn forget(&self, tenant: &TenantId, name: &str) {
        guard(&self.values).remove(&(tenant.clone(), name.to_owned()));
    }
}
