//! Resolves `provider/model` names to providers.

use agentlane_providers::ModelProvider;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The configured providers and the default model.
#[derive(Clone)]
pub struct ModelRouter {
    providers: BTreeMap<String, Arc<dyn ModelProvider>>,
    default_model: String,
}

/// A resolved model.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider: Arc<dyn ModelProvider>,
    /// The name the provider knows (after the `/`).
    pub model: String,
    /// `provider/model`, as recorded on runs.
    pub full_name: String,
}

impl ModelRouter {
    /// `default_model` is `provider/model`.
    pub fn new(default_model: impl Into<String>) -> Self {
        Self {
            providers: BTreeMap::new(),
            default_model: default_model.into(),
        }
    }

    pub fn with_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.providers.insert(provider.name().to_owned(), provider);
        self
    }

    pub fn default_model(&self) -> &str {
        &self.default_model
    }

    pub fn provider_names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// The requested model, or the default when `None`. Errors say what is wrong.
    pub fn resolve(&self, requested: Option<&str>) -> Result<ResolvedModel, String> {
        let full = requested.unwrap_or(&self.default_model);
        let (provider, model) = full
            .split_once('/')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
            .ok_or_else(|| format!("model {full:?} is not of the form provider/model"))?;
        let found = self.providers.get(provider).ok_or_else(|| {
            format!(
                "provider {provider:?} is not configured (configured: {})",
                self.provider_names().join(", ")
            )
        })?;
        Ok(ResolvedModel {
            provider: found.clone(),
            model: model.to_owned(),
            full_name: full.to_owned(),
        })
    }
}
