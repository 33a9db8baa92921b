//! Bearer API keys → tenant. Two sources, tried in order:
//!
//! - configured keys (`AGENTLANE_API_KEYS`, the generated local key): only their SHA-256
//!   digests are kept, and a presented key is compared against every digest in constant time;
//! - store-backed keys (`al_<id>_<secret>`, created with `agentlane keys create`), when a
//!   [`KeyStore`] is attached ([`ApiKeys::with_store`]): found by id with one point read and
//!   checked against the stored digest in constant time. Answers — accepted and refused — are
//!   cached for a short TTL ([`StoreKeyCache`]), keyed by the key's digest; a revoked key
//!   therefore stops working within that TTL.

use crate::Shared;
use crate::admission::ClientAddr;
use crate::error::ApiError;
use agentlane_core::TenantId;
use agentlane_core::api_key::{KeyStore, key_id_of};
use agentlane_core::validate::validate_tenant;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Shortest accepted API key.
pub const MIN_KEY_LEN: usize = 16;

type KeyDigest = [u8; 32];

struct KeyEntry {
    digest: KeyDigest,
    tenant: TenantId,
}

/// Default time a store-backed key's answer is cached: 30 s (also how long a revoked key may
/// still work).
pub const DEFAULT_KEY_CACHE_TTL: Duration = Duration::from_secs(30);
/// Default number of cached answers.
pub const DEFAULT_KEY_CACHE_CAPACITY: usize = 10_000;

/// The API keys, each mapping to one tenant: configured ones and, optionally, the store's.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct ApiKeys {
    entries: Arc<[KeyEntry]>,
    store: Option<Arc<StoreKeyCache>>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ApiKeys");
        d.field("keys", &self.entries.len());
        if let Some(store) = &self.store {
            d.field("store_ttl", &store.ttl);
        }
        d.finish()
    }
}

/// Store-backed keys behind a bounded cache of answers with a TTL. Entries are keyed by the
/// SHA-256 of the presented key, so the cache holds no key either.
pub struct StoreKeyCache {
    store: Arc<dyn KeyStore>,
    ttl: Duration,
    capacity: usize,
    answers: Mutex<HashMap<KeyDigest, Cached>>,
}

#[derive(Clone)]
struct Cached {
    tenant: Option<TenantId>,
    until: Instant,
}

impl StoreKeyCache {
    /// A cache over `store` keeping answers for `ttl`, at most `capacity` of them.
    pub fn new(store: Arc<dyn KeyStore>, ttl: Duration, capacity: usize) -> Self {
        Self {
            store,
            ttl,
            capacity: capacity.max(1),
            answers: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, digest: &KeyDigest, now: Instant) -> Option<Option<TenantId>> {
        let answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        answers
            .get(digest)
            .filter(|c| c.until > now)
            .map(|c| c.tenant.clone())
    }

    fn remember(&self, digest: KeyDigest, tenant: Option<TenantId>, now: Instant) {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if answers.len() >= self.capacity && !answers.contains_key(&digest) {
            answers.retain(|_, c| c.until > now);
            if answers.len() >= self.capacity {
                // Flooded with unknown keys: refusals go first, then everything.
                answers.retain(|_, c| c.tenant.is_some());
            }
            if answers.len() >= self.capacity {
                answers.clear();
            }
        }
        let until = now + self.ttl;
        answers.insert(digest, Cached { tenant, until });
    }

    /// How many answers are cached (expired ones included until they are pruned).
    pub fn len(&self) -> usize {
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no answer is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The answer for `key` without reading the store: `Some` when it is not of the store's
    /// shape (`Some(None)`) or its answer is cached; `None` when it takes a store read.
    fn known(&self, key: &str) -> Option<Option<TenantId>> {
        if key_id_of(key).is_none() {
            return Some(None);
        }
        self.cached(&digest(key), Instant::now())
    }

    /// The tenant of a store-backed key, from the cache or one store read. Store failures are
    /// not cached.
    async fn tenant_for(&self, key: &str) -> Result<Option<TenantId>, ApiError> {
        let Some(key_id) = key_id_of(key) else {
            return Ok(None);
        };
        let digest = digest(key);
        let now = Instant::now();
        if let Some(answer) = self.cached(&digest, now) {
            return Ok(answer);
        }
        let record = self.store.find_key(key_id).await.map_err(|e| {
            tracing::warn!(key_id, error = %e, "API key lookup failed");
            ApiError::from(e)
        })?;
        let tenant = record.filter(|r| r.accepts(key)).map(|r| r.tenant);
        if tenant.is_none() {
            tracing::debug!(key_id, "unknown or revoked API key");
        }
        self.remember(digest, tenant.clone(), now);
        Ok(tenant)
    }
}

impl ApiKeys {
    /// Parses `tenant:key,tenant2:key2` (whitespace around pairs is ignored; a key may itself
    /// contain `:`). At least one pair is required. Errors never quote a key.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (index, item) in spec.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let (tenant, key) = item.split_once(':').ok_or_else(|| {
                format!("API key entry #{} is not of the form tenant:key", index + 1)
            })?;
            pairs.push((tenant.trim().to_owned(), key.trim().to_owned()));
        }
        if pairs.is_empty() {
            return Err("no API keys given (expected tenant:key[,tenant:key...])".into());
        }
        Self::from_pairs(pairs)
    }

    /// Builds the table from `(tenant, key)` pairs. Tenants must pass `validate_tenant`; keys
    /// must be at least [`MIN_KEY_LEN`] visible ASCII characters and distinct.
    pub fn from_pairs<I, T, K>(pairs: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = (T, K)>,
        T: AsRef<str>,
        K: AsRef<str>,
    {
        let mut entries: Vec<KeyEntry> = Vec::new();
        for (tenant, key) in pairs {
            let (tenant, key) = (tenant.as_ref(), key.as_ref());
            validate_tenant(tenant)?;
            if key.len() < MIN_KEY_LEN {
                return Err(format!(
                    "the API key of tenant {tenant:?} is shorter than {MIN_KEY_LEN} characters"
                ));
            }
            if !key.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
                return Err(format!(
                    "the API key of tenant {tenant:?} must be visible ASCII without spaces or commas"
                ));
            }
            let digest = digest(key);
            if entries.iter().any(|e| e.digest == digest) {
                return Err(format!(
                    "an API key of tenant {tenant:?} is listed more than once"
                ));
            }
            entries.push(KeyEntry {
                digest,
                tenant: TenantId::new(tenant),
            });
        }
        Ok(Self {
            entries: entries.into(),
            store: None,
        })
    }

    /// The same keys, plus the store-backed keys of `cache`.
    pub fn with_store(mut self, cache: StoreKeyCache) -> Self {
        self.store = Some(Arc::new(cache));
        self
    }

    /// The store-backed keys' cache, when a store is attached.
    pub fn store_cache(&self) -> Option<&StoreKeyCache> {
        self.store.as_deref()
    }

    /// The tenant owning `key`: a configured key, else a store-backed one (cached). `Err` when
    /// the store could not be read.
    pub async fn authenticate(&self, key: &str) -> Result<Option<TenantId>, ApiError> {
        if let Some(tenant) = self.tenant_for(key) {
            return Ok(Some(tenant));
        }
        match &self.store {
            Some(store) => store.tenant_for(key).await,
            None => Ok(None),
        }
    }

    /// The answer for `key` without reading the store: a configured key, a key that cannot be
    /// the store's, or a cached answer. `None`: [`ApiKeys::authenticate`] would read the store.
    pub fn known(&self, key: &str) -> Option<Option<TenantId>> {
        if let Some(tenant) = self.tenant_for(key) {
            return Some(Some(tenant));
        }
        match &self.store {
            Some(store) => store.known(key),
            None => Some(None),
        }
    }

    /// The tenant owning configured key `key`, if any. Every configured digest is compared, in
    /// constant time. Store-backed keys need [`ApiKeys::authenticate`].
    pub fn tenant_for(&self, key: &str) -> Option<TenantId> {
        let presented = digest(key);
        let mut found = None;
        for entry in self.entries.iter() {
            if constant_time_eq(&entry.digest, &presented) {
                found = Some(entry.tenant.clone());
            }
        }
        found
    }

    /// How many configured keys the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key can authenticate: none configured and no store attached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.store.is_none()
    }
}

fn digest(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

fn constant_time_eq(a: &KeyDigest, b: &KeyDigest) -> bool {
    agentlane_core::api_key::constant_time_eq(a, b)
}

/// The operator's key for `GET /metrics` (`AGENTLANE_METRICS_KEY` / `[api] metrics_key`): kept
/// as its digest, compared in constant time, never shown (`Debug` prints no key material).
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorKey {
    digest: KeyDigest,
}

impl fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OperatorKey(..)")
    }
}

impl OperatorKey {
    /// Shortest accepted operator key.
    pub const MIN_CHARS: usize = 16;

    /// The key `key`: at least [`OperatorKey::MIN_CHARS`] visible ASCII characters. The error
    /// never quotes the key.
    pub fn new(key: &str) -> Result<Self, String> {
        if key.len() < Self::MIN_CHARS || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the metrics key must be at least {} visible ASCII characters",
                Self::MIN_CHARS
            ));
        }
        Ok(Self {
            digest: digest(key),
        })
    }

    /// Whether `presented` is this key.
    pub fn accepts(&self, presented: &str) -> bool {
        constant_time_eq(&self.digest, &digest(presented))
    }
}

/// The key from `Authorization: Bearer <key>`, if the header is well formed.
fn bearer_token(parts: &Parts) -> Option<&str> {
    bearer_in(&parts.headers)
}

/// The key from `Authorization: Bearer <key>` among `headers`, if the header is well formed.
pub(crate) fn bearer_in(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The authenticated tenant of a request, admitted under its request rate (`429
/// rate_limited` with `Retry-After` beyond it). Extract it first in every handler.
///
/// A request without a well-formed bearer key, or with a key that cannot be a store key,
/// answers `401` without reading the store. A key that takes a store lookup is first held to
/// the source address's `key_probes_per_minute`, and a lookup that finds no key counts
/// against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub TenantId);

impl FromRequestParts<Arc<Shared>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Shared>,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer_token(parts).ok_or(ApiError::Unauthorized)?;
        let tenant = match state.keys.known(token) {
            Some(answer) => answer,
            None => {
                let source = parts.extensions.get::<ClientAddr>().copied();
                state.admission.check_key_probes(source).await?;
                let answer = state.keys.authenticate(token).await?;
                if answer.is_none() {
                    state.admission.count_key_probe(source).await;
                }
                answer
            }
        }
        .ok_or(ApiError::Unauthorized)?;
        state.admission.admit_request(&tenant).await?;
        Ok(Tenant(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_finds_tenants() {
        let keys = ApiKeys::parse(" acme:0123456789abcdef , beta:key:with:colons-long ,").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.tenant_for("0123456789abcdef"),
            Some(TenantId::new("acme"))
        );
        assert_eq!(
            keys.tenant_for("key:with:colons-long"),
            Some(TenantId::new("beta"))
        );
        assert_eq!(keys.tenant_for("0123456789abcdeX"), None);
        assert_eq!(keys.tenant_for(""), None);
    }

    #[test]
    fn rejects_bad_specs_without_quoting_keys() {
        let cases = [
            ("", "no API keys"),
            ("acme", "tenant:key"),
            ("acme:short", "shorter than 16"),
            ("bad tenant:0123456789abcdef", "tenant"),
            ("a:0123456789abcdef,b:0123456789abcdef", "more than once"),
            ("a:0123456789 abcdef", "visible ASCII"),
        ];
        for (spec, expected) in cases {
            let err = ApiKeys::parse(spec).unwrap_err();
            assert!(err.contains(expected), "{spec:?} → {err}");
            assert!(!err.contains("0123456789"), "key leaked in {err}");
        }
    }

    use agentlane_core::api_key::{ApiKeyRecord, NewApiKey};
    use agentlane_core::{StoreError, StoreResult};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An in-memory key store counting its reads; `down` makes every read fail.
    #[derive(Default)]
    struct MemoryKeys {
        keys: Mutex<HashMap<String, ApiKeyRecord>>,
        finds: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl KeyStore for MemoryKeys {
        async fn create_key(&self, record: &ApiKeyRecord) -> StoreResult<()> {
            self.keys
                .lock()
                .unwrap()
                .insert(record.key_id.clone(), record.clone());
            Ok(())
        }
        async fn find_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
            self.finds.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("table gone".into()));
            }
            Ok(self.keys.lock().unwrap().get(key_id).cloned())
        }
        async fn list_keys(&self, _tenant: &TenantId) -> StoreResult<Vec<ApiKeyRecord>> {
            Ok(Vec::new())
        }
        async fn revoke_key(&self, _t: &TenantId, key_id: &str, at: u64) -> StoreResult<bool> {
            let mut keys = self.keys.lock().unwrap();
            Ok(keys
                .get_mut(key_id)
                .map(|r| r.revoked_at = Some(at))
                .is_some())
        }
    }

    const TTL: Duration = Duration::from_secs(30);

    async fn setup(capacity: usize) -> (Arc<MemoryKeys>, ApiKeys, NewApiKey) {
        let store = Arc::new(MemoryKeys::default());
        let new = NewApiKey::generate(TenantId::new("acme"), None, 1);
        store.create_key(&new.record).await.unwrap();
        let keys = ApiKeys::parse("conf:0123456789abcdef")
            .unwrap()
            .with_store(StoreKeyCache::new(store.clone(), TTL, capacity));
        (store, keys, new)
    }

    #[tokio::test(start_paused = true)]
    async fn store_keys_authenticate_and_answers_are_cached() {
        let (store, keys, new) = setup(100).await;
        for _ in 0..3 {
            assert_eq!(
                keys.authenticate(&new.key).await.unwrap(),
                Some(TenantId::new("acme"))
            );
        }
        assert_eq!(
            store.finds.load(Ordering::SeqCst),
            1,
            "one read, then the cache"
        );
        assert_eq!(
            keys.authenticate("0123456789abcdef").await.unwrap(),
            Some(TenantId::new("conf")),
            "configured keys still work"
        );
        assert_eq!(
            store.finds.load(Ordering::SeqCst),
            1,
            "configured keys read no store"
        );
        // A non-`al_` unknown key never reaches the store either.
        assert_eq!(
            keys.authenticate("not-a-store-key-at-all").await.unwrap(),
            None
        );
        assert_eq!(store.finds.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revoked_key_stops_working_within_the_ttl() {
        let (store, keys, new) = setup(100).await;
        assert!(keys.authenticate(&new.key).await.unwrap().is_some());
        store
            .revoke_key(&TenantId::new("acme"), &new.record.key_id, 2)
            .await
            .unwrap();
        tokio::time::advance(TTL + Duration::from_millis(1)).await;
        assert_eq!(keys.authenticate(&new.key).await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_secrets_are_refused_and_refusals_cached() {
        let (store, keys, new) = setup(100).await;
        let mut wrong = new.key.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == 'a' { 'b' } else { 'a' });
        for _ in 0..3 {
            assert_eq!(keys.authenticate(&wrong).await.unwrap(), None);
        }
        assert_eq!(store.finds.load(Ordering::SeqCst), 1);
        tokio::time::advance(TTL + Duration::from_millis(1)).await;
        assert_eq!(keys.authenticate(&wrong).await.unwrap(), None);
        assert_eq!(store.finds.load(Ordering::SeqCst), 2, "refusals expire too");
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_stays_bounded_under_a_flood_of_unknown_keys() {
        let (_store, keys, new) = setup(8).await;
        assert!(keys.authenticate(&new.key).await.unwrap().is_some());
        for _ in 0..100 {
            let stranger = NewApiKey::generate(TenantId::new("x"), None, 1);
            assert_eq!(keys.authenticate(&stranger.key).await.unwrap(), None);
        }
        assert!(keys.store_cache().unwrap().len() <= 8);
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_outage_is_unavailable_and_not_cached() {
        let (store, keys, new) = setup(100).await;
        store.down.store(true, Ordering::SeqCst);
        let err = keys.authenticate(&new.key).await.unwrap_err();
        assert_eq!((err.code(), err.status().as_u16()), ("unavailable", 503));
        store.down.store(false, Ordering::SeqCst);
        assert!(keys.authenticate(&new.key).await.unwrap().is_some());
    }

    #[test]
    fn debug_shows_no_key_material() {
        let keys = ApiKeys::parse("acme:0123456789abcdef").unwrap();
        assert_eq!(format!("{keys:?}"), "ApiKeys { keys: 1 }");
    }
}
