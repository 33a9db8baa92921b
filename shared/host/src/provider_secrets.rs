//! Provider keys in deployments (SPEC §13: "never plaintext environment variables"): read
//! at start-up, and again once older than the secret cache's TTL ([`crate::provider_refresh`]), from a Secrets Manager secret (`AGENTLANE_PROVIDER_KEYS_SECRET_ARN`, a JSON
//! object) and/or the SecureString parameters under an SSM path
//! (`AGENTLANE_PROVIDER_KEYS_SSM_PATH`), then handed to the settings as the variables they
//! already read (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, a config file's `api_key_env`).
//!
//! Names map to variables this way: a provider name (`openai`, `my-vllm`) becomes
//! `<NAME>_API_KEY` (upper case, `-` → `_`), or `<NAME>_API_KEYS` when the value is a JSON array
//! of keys (several auth profiles); a name already in upper case (`OPENAI_API_KEY`,
//! `LOCAL_LLM_KEY`) is the variable itself. A secret's variable wins over the environment's.

use crate::Secret;
use crate::provider_refresh::{KeyRefresh, ProviderKeySource};
use crate::settings::Settings;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The Secrets Manager secret (ARN or name) holding a JSON object of provider → key.
pub const SECRET_ARN_ENV: &str = "AGENTLANE_PROVIDER_KEYS_SECRET_ARN";
/// The SSM Parameter Store path whose (SecureString) parameters are provider → key.
pub const SSM_PATH_ENV: &str = "AGENTLANE_PROVIDER_KEYS_SSM_PATH";

/// Provider keys by the variable name the settings read. `Debug` shows the names only.
#[derive(Clone, Default)]
pub struct ProviderSecrets {
    vars: BTreeMap<String, Secret>,
    /// Where they were read from, when that was a secret store: the settings re-read it.
    source: Option<Arc<dyn ProviderKeySource>>,
}

impl fmt::Debug for ProviderSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSecrets")
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn is_var_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The variable a secret named `name` stands for; `many`: the value is a list of keys.
fn var_for(name: &str, many: bool) -> Result<String, String> {
    let name = name.trim();
    if is_var_name(name) {
        return Ok(name.to_owned());
    }
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(format!(
            "provider secret name {name:?} is neither a provider name nor a variable name"
        ));
    }
    let base = name.to_ascii_uppercase().replace('-', "_");
    Ok(if many {
        format!("{base}_API_KEYS")
    } else {
        format!("{base}_API_KEY")
    })
}

impl ProviderSecrets {
    /// From `(name, key)` pairs (e.g. SSM parameters). Errors never quote a key.
    pub fn from_pairs<I>(pairs: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut vars = BTreeMap::new();
        for (name, value) in pairs {
            let var = var_for(&name, false)?;
            if value.trim().is_empty() {
                return Err(format!("the provider secret {name:?} is empty"));
            }
            vars.insert(var, Secret::new(value.trim()));
        }
        Ok(Self { vars, source: None })
    }

    /// From a JSON object of name → key (a string) or keys (an array of strings). Errors never
    /// quote a key.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("the provider keys secret is not JSON (line {})", e.line()))?;
        let object = value
            .as_object()
            .ok_or("the provider keys secret must be a JSON object of provider → key")?;
        let mut vars = BTreeMap::new();
        for (name, value) in object {
            let (var, key) = match value {
                serde_json::Value::String(key) => (var_for(name, false)?, key.trim().to_owned()),
                serde_json::Value::Array(keys) => {
                    let keys = keys
                        .iter()
                        .map(|k| k.as_str().map(str::trim))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| format!("the keys of {name:?} must all be strings"))?;
                    (var_for(name, true)?, keys.join(","))
                }
                _ => return Err(format!("the key of {name:?} must be a string or strings")),
            };
            if key.is_empty() {
                return Err(format!("the provider secret {name:?} is empty"));
            }
            vars.insert(var, Secret::new(key));
        }
        Ok(Self { vars, source: None })
    }

    /// Adds `other`'s variables (they win).
    pub fn merge(mut self, other: Self) -> Self {
        self.vars.extend(other.vars);
        self
    }

    /// The value of variable `name`, if a secret provides it.
    pub fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).map(|s| s.expose().to_owned())
    }

    /// The variable names provided (for a start-up log line).
    pub fn names(&self) -> Vec<&str> {
        self.vars.keys().map(String::as_str).collect()
    }

    /// Whether no secret was read.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// These keys, re-read from `source` by the settings they load.
    pub fn with_source(mut self, source: Arc<dyn ProviderKeySource>) -> Self {
        self.source = Some(source);
        self
    }

    /// Settings from these secrets, the environment and the config file (a secret wins over
    /// the environment for the variables it provides). When the keys came from a secret store,
    /// the settings' providers re-read it once the keys are older than
    /// `AGENTLANE_SECRET_CACHE_TTL_MS` (see [`crate::provider_refresh`]).
    pub fn load_settings(&self) -> anyhow::Result<Settings> {
        let mut settings = self.load_settings_once()?;
        if let Some(source) = &self.source {
            let ttl = crate::settings::secret_cache_ttl()?;
            settings.models.key_refresh = Some(KeyRefresh::new(source.clone(), self, ttl)?);
        }
        Ok(settings)
    }

    /// [`Self::load_settings`] without the re-reading.
    pub(crate) fn load_settings_once(&self) -> anyhow::Result<Settings> {
        Ok(Settings::load_with(|name| {
            self.get(name).or_else(|| std::env::var(name).ok())
        })?)
    }
}

/// The deployment's secret store: a Secrets Manager secret and/or an SSM path.
#[cfg(feature = "aws")]
struct AwsProviderKeys {
    sdk: agentlane_aws::aws_config::SdkConfig,
    arn: Option<String>,
    path: Option<String>,
}

#[cfg(feature = "aws")]
#[async_trait::async_trait]
impl ProviderKeySource for AwsProviderKeys {
    async fn read(&self) -> anyhow::Result<ProviderSecrets> {
        use anyhow::Context;
        let mut secrets = ProviderSecrets::default();
        if let Some(path) = &self.path {
            let pairs = agentlane_aws::secrets::parameters_under(&self.sdk, path).await?;
            let found = ProviderSecrets::from_pairs(pairs)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{SSM_PATH_ENV} ({path})"))?;
            secrets = secrets.merge(found);
        }
        if let Some(arn) = &self.arn {
            let text = agentlane_aws::secrets::secret_string(&self.sdk, arn).await?;
            let found = ProviderSecrets::from_json(&text)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{SECRET_ARN_ENV} ({arn})"))?;
            secrets = secrets.merge(found);
        }
        Ok(secrets)
    }
}

/// Reads the provider keys named by [`SECRET_ARN_ENV`] and [`SSM_PATH_ENV`] (either, both, or
/// none: then nothing is read).
#[cfg(feature = "aws")]
pub async fn read_provider_secrets() -> anyhow::Result<ProviderSecrets> {
    let arn = crate::env(SECRET_ARN_ENV);
    let path = crate::env(SSM_PATH_ENV);
    if arn.is_none() && path.is_none() {
        return Ok(ProviderSecrets::default());
    }
    let source = Arc::new(AwsProviderKeys {
        sdk: agentlane_aws::sdk_config().await,
        arn,
        path,
    });
    let secrets = source.read().await?;
    tracing::info!(vars = ?secrets.names(), "provider keys read from the secret store");
    Ok(secrets.with_source(source))
}

/// Settings as a deployed function loads them: provider keys from the secret store
/// ([`read_provider_secrets`]), the rest from the environment and the config file.
#[cfg(feature = "aws")]
pub async fn load_deployed() -> anyhow::Result<Settings> {
    read_provider_secrets().await?.load_settings()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_variables_the_settings_read() {
        let s = ProviderSecrets::from_json(
            r#"{"openai": "sk-one", "anthropic": [" a1 ", "a2"], "LOCAL_LLM_KEY": "l", "my-vllm": "v"}"#,
        )
        .unwrap();
        assert_eq!(s.get("OPENAI_API_KEY").as_deref(), Some("sk-one"));
        assert_eq!(s.get("ANTHROPIC_API_KEYS").as_deref(), Some("a1,a2"));
        assert_eq!(s.get("LOCAL_LLM_KEY").as_deref(), Some("l"));
        assert_eq!(s.get("MY_VLLM_API_KEY").as_deref(), Some("v"));
        assert_eq!(s.get("PATH"), None);
        let pairs = ProviderSecrets::from_pairs([("openai".to_owned(), "sk-p\n".to_owned())]);
        assert_eq!(
            pairs.unwrap().get("OPENAI_API_KEY").as_deref(),
            Some("sk-p")
        );
    }

    #[test]
    fn bad_secrets_are_refused_without_quoting_keys() {
        let cases = [
            ("sk-secret-value", "not JSON"),
            (r#"["sk-secret-value"]"#, "JSON object"),
            (r#"{"openai": 5}"#, "string"),
            (r#"{"openai": ""}"#, "empty"),
            (r#"{"open ai": "sk-secret-value"}"#, "neither"),
            (r#"{"openai": ["sk-secret-value", 1]}"#, "strings"),
        ];
        for (text, expected) in cases {
            let err = ProviderSecrets::from_json(text).unwrap_err();
            assert!(err.contains(expected), "{text} → {err}");
            assert!(!err.contains("sk-secret-value"), "key leaked: {err}");
        }
    }

    #[test]
    fn debug_names_variables_not_keys() {
        let s = ProviderSecrets::from_json(r#"{"openai": "sk-secret-value"}"#).unwrap();
        let shown = format!("{s:?}");
        assert!(shown.contains("OPENAI_API_KEY"), "{shown}");
        assert!(!shown.contains("sk-secret-value"), "{shown}");
    }

    #[test]
    fn a_secret_reaches_the_provider_settings() {
        let s = ProviderSecrets::from_json(r#"{"openai": "sk-from-secret"}"#).unwrap();
        let settings = Settings::from_sources(None, |name| s.get(name)).unwrap();
        let openai = settings
            .models
            .providers
            .iter()
            .find(|p| p.name == "openai")
            .expect("the secret configures the openai provider");
        assert_eq!(openai.profiles[0].api_key.expose(), "sk-from-secret");
    }
}
