//! Provider keys that rotate (issue 42, item 5): when a deployment reads its provider keys from
//! Secrets Manager or SSM, a process re-reads them once they are older than the secret cache's
//! TTL (`AGENTLANE_SECRET_CACHE_TTL_MS`, 30 s by default, at most 60 s), so a rotated key is used
//! by model calls that start after it on every process and Lambda instance within a minute.
//!
//! The re-read happens lazily, on the first model call after the TTL (a frozen Lambda instance
//! runs no timers), once for all concurrent calls. A failed re-read keeps the keys in use and
//! tries again a TTL later. Each auth profile's client is rebuilt only when its key changed.
//! Profiles are matched by provider and profile name: rotating a key keeps its profile; adding
//! or removing profiles takes a new process, as changing the configuration does.

use crate::provider_secrets::ProviderSecrets;
use crate::secret::Secret;
use crate::settings::ProviderSettings;
use agentlane_providers::{ModelProvider, ModelRequest, ModelStream, ProviderError};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Where the deployment's provider keys are read from.
#[async_trait]
pub trait ProviderKeySource: Send + Sync + 'static {
    /// The keys as they are now.
    async fn read(&self) -> anyhow::Result<ProviderSecrets>;
}

/// (provider name, profile name) → key.
type Keys = BTreeMap<(String, String), Secret>;

struct Snapshot {
    read_at: Instant,
    keys: Arc<Keys>,
}

struct Inner {
    source: Arc<dyn ProviderKeySource>,
    ttl: Duration,
    snapshot: RwLock<Snapshot>,
    /// Held while the source is read: one read for all the calls that find the keys stale.
    reading: tokio::sync::Mutex<()>,
}

/// The provider keys of a process, re-read from their source when older than a TTL. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct KeyRefresh(Arc<Inner>);

impl std::fmt::Debug for KeyRefresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRefresh")
            .field("ttl", &self.0.ttl)
            .finish_non_exhaustive()
    }
}

/// The keys the settings resolve from `secrets` (the environment and config file fill the rest).
fn keys_of(secrets: &ProviderSecrets) -> anyhow::Result<Keys> {
    let settings = secrets.load_settings_once()?;
    Ok(settings
        .models
        .providers
        .into_iter()
        .flat_map(|p| {
            let provider = p.name;
            p.profiles
                .into_iter()
                .map(move |profile| ((provider.clone(), profile.name), profile.api_key))
        })
        .collect())
}

impl KeyRefresh {
    /// Keys read from `source`, `first` being what it gave at start-up.
    pub fn new(
        source: Arc<dyn ProviderKeySource>,
        first: &ProviderSecrets,
        ttl: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self(Arc::new(Inner {
            source,
            ttl,
            snapshot: RwLock::new(Snapshot {
                read_at: Instant::now(),
                keys: Arc::new(keys_of(first)?),
            }),
            reading: tokio::sync::Mutex::new(()),
        })))
    }

    fn fresh(&self) -> Option<Arc<Keys>> {
        let snapshot = self.0.snapshot.read().unwrap_or_else(|e| e.into_inner());
        (snapshot.read_at.elapsed() < self.0.ttl).then(|| snapshot.keys.clone())
    }

    fn publish(&self, keys: Arc<Keys>) {
        let mut snapshot = self.0.snapshot.write().unwrap_or_else(|e| e.into_inner());
        *snapshot = Snapshot {
            read_at: Instant::now(),
            keys,
        };
    }

    /// The keys, re-read first when older than the TTL.
    pub async fn keys(&self) -> Arc<Keys> {
        if let Some(keys) = self.fresh() {
            return keys;
        }
        let _reading = self.0.reading.lock().await;
        if let Some(keys) = self.fresh() {
            return keys;
        }
        let read = self.0.source.read().await.and_then(|s| keys_of(&s));
        let keys = match read {
            Ok(keys) => Arc::new(keys),
            Err(e) => {
                // The error names the secret or path, never a key (SecretError, ProviderSecrets).
                tracing::warn!(error = %e, "re-reading the provider keys failed; the keys in use are kept");
                let snapshot = self.0.snapshot.read().unwrap_or_else(|e| e.into_inner());
                snapshot.keys.clone()
            }
        };
        self.publish(keys.clone());
        keys
    }
}

/// How a profile's client is built from its provider and key.
pub(crate) type Build =
    fn(&ProviderSettings, Option<&Secret>) -> anyhow::Result<Arc<dyn ModelProvider>>;

/// One auth profile's client, rebuilt when the key [`KeyRefresh`] reads for it changes.
pub(crate) struct RotatingProvider {
    provider: ProviderSettings,
    profile: String,
    refresh: KeyRefresh,
    current: Mutex<(Secret, Arc<dyn ModelProvider>)>,
    build: Build,
}

impl RotatingProvider {
    pub(crate) fn new(
        provider: &ProviderSettings,
        profile: &crate::settings::AuthProfile,
        refresh: KeyRefresh,
        build: Build,
    ) -> anyhow::Result<Self> {
        let client = build(provider, Some(&profile.api_key))?;
        Ok(Self {
            provider: provider.clone(),
            profile: profile.name.clone(),
            refresh,
            current: Mutex::new((profile.api_key.clone(), client)),
            build,
        })
    }

    fn client(&self) -> Arc<dyn ModelProvider> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.1.clone()
    }

    /// The client for the key in force now (rebuilt when it changed).
    async fn current_client(&self) -> Arc<dyn ModelProvider> {
        let keys = self.refresh.keys().await;
        let wanted = keys.get(&(self.provider.name.clone(), self.profile.clone()));
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = wanted.filter(|key| **key != current.0) {
            match (self.build)(&self.provider, Some(key)) {
                Ok(client) => {
                    tracing::info!(provider = %self.provider.name, profile = %self.profile, "provider key rotated");
                    *current = (key.clone(), client);
                }
                Err(e) => {
                    tracing::warn!(provider = %self.provider.name, profile = %self.profile, error = %e, "a rotated provider key could not be used; the previous key is kept");
                }
            }
        }
        current.1.clone()
    }
}

#[async_trait]
impl ModelProvider for RotatingProvider {
    fn name(&self) -> &str {
        &self.provider.name
    }

    fn self_hosted(&self) -> bool {
        self.provider.self_hosted
    }

    fn output_cap(&self, request: &ModelRequest) -> Option<u32> {
        self.client().output_cap(request)
    }

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        self.current_client().await.stream(request, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Scripted {
        key: Mutex<Option<String>>,
        reads: AtomicUsize,
    }

    #[async_trait]
    impl ProviderKeySource for Scripted {
        async fn read(&self) -> anyhow::Result<ProviderSecrets> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let key = self.key.lock().unwrap().clone();
            match key {
                Some(key) => {
                    ProviderSecrets::from_json(&format!(r#"{{"OPENAI_API_KEY": "{key}"}}"#))
                        .map_err(anyhow::Error::msg)
                }
                None => anyhow::bail!("reading the secret agentlane/keys: unreachable"),
            }
        }
    }

    fn source(key: &str) -> Arc<Scripted> {
        Arc::new(Scripted {
            key: Mutex::new(Some(key.to_owned())),
            reads: AtomicUsize::new(0),
        })
    }

    fn first(key: &str) -> ProviderSecrets {
        ProviderSecrets::from_json(&format!(r#"{{"OPENAI_API_KEY": "{key}"}}"#)).unwrap()
    }

    fn openai_key(keys: &Arc<Keys>) -> Option<&str> {
        keys.iter()
            .find(|((provider, _), _)| provider == "openai")
            .map(|(_, k)| k.expose())
    }

    #[tokio::test]
    async fn keys_are_read_again_only_after_the_ttl_and_a_failed_read_keeps_them() {
        let src = source("sk-one");
        let refresh =
            KeyRefresh::new(src.clone(), &first("sk-one"), Duration::from_millis(80)).unwrap();

        // Within the TTL: no read, the start-up key.
        *src.key.lock().unwrap() = Some("sk-two".into());
        assert_eq!(openai_key(&refresh.keys().await), Some("sk-one"));
        assert_eq!(src.reads.load(Ordering::SeqCst), 0);

        // After it: one read for many concurrent callers, the rotated key.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let all = futures::future::join_all((0..8).map(|_| refresh.keys())).await;
        assert!(all.iter().all(|k| openai_key(k) == Some("sk-two")));
        assert_eq!(src.reads.load(Ordering::SeqCst), 1);

        // A source that fails keeps the keys in use, and is not read again before the TTL.
        tokio::time::sleep(Duration::from_millis(100)).await;
        *src.key.lock().unwrap() = None;
        assert_eq!(openai_key(&refresh.keys().await), Some("sk-two"));
        assert_eq!(openai_key(&refresh.keys().await), Some("sk-two"));
        assert_eq!(src.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_profile_client_is_rebuilt_only_when_its_key_changes() {
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        fn build(
            p: &ProviderSettings,
            key: Option<&Secret>,
        ) -> anyhow::Result<Arc<dyn ModelProvider>> {
            BUILDS.fetch_add(1, Ordering::SeqCst);
            crate::provider_client(p, key)
        }
        let src = source("sk-one");
        let start = first("sk-one");
        let refresh = KeyRefresh::new(src.clone(), &start, Duration::ZERO).unwrap();
        let settings = start.load_settings_once().unwrap();
        let openai = settings
            .models
            .providers
            .iter()
            .find(|p| p.name == "openai")
            .unwrap();
        let rotating = RotatingProvider::new(openai, &openai.profiles[0], refresh, build).unwrap();
        assert_eq!(BUILDS.load(Ordering::SeqCst), 1);

        rotating.current_client().await;
        assert_eq!(BUILDS.load(Ordering::SeqCst), 1, "same key: no rebuild");
        *src.key.lock().unwrap() = Some("sk-two".into());
        rotating.current_client().await;
        assert_eq!(
            BUILDS.load(Ordering::SeqCst),
            2,
            "a rotated key: one rebuild"
        );
        assert_eq!(rotating.current.lock().unwrap().0.expose(), "sk-two");
        rotating.current_client().await;
        assert_eq!(BUILDS.load(Ordering::SeqCst), 2);
        assert_eq!(rotating.name(), "openai");
    }
}
