//! Resolves `provider/model` names to providers, their auth profiles, the fallback chain and
//! context windows; keeps the per-process cooldowns of failed profiles.

use agentlane_providers::ModelProvider;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One credential of a provider: a client configured with that credential.
#[derive(Clone)]
pub struct Profile {
    /// The profile's name from the configuration; names it in logs and cooldowns.
    pub name: String,
    /// The provider client that carries this profile's credential.
    pub provider: Arc<dyn ModelProvider>,
}

/// Context window assumed for models the configuration does not name.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// Cooldown after a profile failed with auth, billing, rate limit or overload: 30 s, 1 min,
/// 5 min for repeated failures.
pub fn cooldown_for(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::from_secs(30),
        2 => Duration::from_secs(60),
        _ => Duration::from_secs(300),
    }
}

#[derive(Default)]
struct Cooldowns {
    until: HashMap<(String, String), (Instant, u32)>,
}

/// The configured providers, the default model and the fallback chain.
#[derive(Clone)]
pub struct ModelRouter {
    providers: BTreeMap<String, Vec<Profile>>,
    default_model: String,
    fallbacks: Vec<String>,
    context_windows: BTreeMap<String, u64>,
    cooldowns: Arc<Mutex<Cooldowns>>,
}

/// A resolved model.
#[derive(Clone)]
pub struct ResolvedModel {
    /// The provider's auth profiles, in configured order (at least one).
    pub profiles: Vec<Profile>,
    /// The name the provider knows (after the `/`).
    pub model: String,
    /// `provider/model`, as recorded on runs.
    pub full_name: String,
    /// The provider's name (before the `/`), e.g. `openai`.
    pub provider_name: String,
    /// The model's context window in tokens ([`DEFAULT_CONTEXT_WINDOW`] when not configured).
    pub context_window: u64,
}

impl ModelRouter {
    /// `default_model` is `provider/model`.
    pub fn new(default_model: impl Into<String>) -> Self {
        Self {
            providers: BTreeMap::new(),
            default_model: default_model.into(),
            fallbacks: Vec::new(),
            context_windows: BTreeMap::new(),
            cooldowns: Arc::new(Mutex::new(Cooldowns::default())),
        }
    }

    /// Adds (or replaces) a provider with one credential, under the provider's own name.
    pub fn with_provider(self, provider: Arc<dyn ModelProvider>) -> Self {
        let name = provider.name().to_owned();
        self.with_profiles(
            name,
            vec![Profile {
                name: "default".into(),
                provider,
            }],
        )
    }

    /// Adds (or replaces) a provider with several credentials, tried in order.
    pub fn with_profiles(mut self, name: impl Into<String>, profiles: Vec<Profile>) -> Self {
        if !profiles.is_empty() {
            self.providers.insert(name.into(), profiles);
        }
        self
    }

    /// Models tried, in order, when the requested one fails for good.
    pub fn with_fallbacks(mut self, fallbacks: Vec<String>) -> Self {
        self.fallbacks = fallbacks;
        self
    }

    /// The context window of `provider/model`.
    pub fn with_context_window(mut self, model: impl Into<String>, tokens: u64) -> Self {
        self.context_windows.insert(model.into(), tokens);
        self
    }

    /// The model (`provider/model`) used when a run names none.
    pub fn default_model(&self) -> &str {
        &self.default_model
    }

    /// The names of the configured providers, sorted.
    pub fn provider_names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// The model chain of a run: the requested (or default) model, then the fallbacks.
    pub fn chain(&self, requested: Option<&str>) -> Vec<String> {
        let mut chain = vec![requested.unwrap_or(&self.default_model).to_owned()];
        for f in &self.fallbacks {
            if !chain.contains(f) {
                chain.push(f.clone());
            }
        }
        chain
    }

    /// Like [`chain`](Self::chain), with `fallbacks` instead of the configured ones when given
    /// (an agent's own).
    pub fn chain_with(&self, requested: Option<&str>, fallbacks: Option<&[String]>) -> Vec<String> {
        let mut chain = vec![requested.unwrap_or(&self.default_model).to_owned()];
        for f in fallbacks.unwrap_or(&self.fallbacks) {
            if !chain.contains(f) {
                chain.push(f.clone());
            }
        }
        chain
    }

    /// The requested model, or the default when `None`. Errors say what is wrong.
    pub fn resolve(&self, requested: Option<&str>) -> Result<ResolvedModel, String> {
        let full = requested.unwrap_or(&self.default_model);
        let (provider, model) = full
            .split_once('/')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
            .ok_or_else(|| format!("model {full:?} is not of the form provider/model"))?;
        let profiles = self.providers.get(provider).ok_or_else(|| {
            format!(
                "provider {provider:?} is not configured (configured: {})",
                self.provider_names().join(", ")
            )
        })?;
        Ok(ResolvedModel {
            profiles: profiles.clone(),
            model: model.to_owned(),
            full_name: full.to_owned(),
            provider_name: provider.to_owned(),
            context_window: self
                .context_windows
                .get(full)
                .copied()
                .unwrap_or(DEFAULT_CONTEXT_WINDOW),
        })
    }

    /// Puts a profile in cooldown after a failure (longer for repeated failures).
    pub fn cool_down(&self, provider: &str, profile: &str) {
        if let Ok(mut c) = self.cooldowns.lock() {
            let key = (provider.to_owned(), profile.to_owned());
            let failures = c.until.get(&key).map_or(0, |(_, n)| *n) + 1;
            c.until
                .insert(key, (Instant::now() + cooldown_for(failures), failures));
        }
    }

    /// Marks a profile good again.
    pub fn mark_good(&self, provider: &str, profile: &str) {
        if let Ok(mut c) = self.cooldowns.lock() {
            c.until.remove(&(provider.to_owned(), profile.to_owned()));
        }
    }

    /// The first profile at or after `from` that is not cooling down; `from` itself when all of
    /// them are.
    pub fn pick_profile(&self, model: &ResolvedModel, from: usize) -> usize {
        let now = Instant::now();
        let Ok(c) = self.cooldowns.lock() else {
            return from;
        };
        (from..model.profiles.len())
            .find(|i| {
                c.until
                    .get(&(model.provider_name.clone(), model.profiles[*i].name.clone()))
                    .is_none_or(|(until, _)| *until <= now)
            })
            .unwrap_or(from)
    }
}
