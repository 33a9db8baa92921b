//! Where the secret references of agents' tools are resolved: environment variables always;
//! Secrets Manager secrets in the deployed functions (read once per process and kept), limited
//! to the names under `AGENTLANE_AGENT_SECRETS_PREFIX` (the template grants the runner exactly
//! that prefix).

use agentlane_agent::agents::SecretSource;
use agentlane_core::SecretRef;
use async_trait::async_trait;

/// The prefix variable: a `{"secret": …}` reference must name a secret under it.
pub const AGENT_SECRETS_PREFIX_ENV: &str = "AGENTLANE_AGENT_SECRETS_PREFIX";

/// Environment variables, and (with the `aws` feature) Secrets Manager.
pub struct HostSecrets {
    /// `None`: `{"secret": …}` references are refused (serve without the AWS backend).
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    secrets_manager: bool,
    prefix: Option<String>,
    #[cfg(feature = "aws")]
    cache: tokio::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl HostSecrets {
    /// Reads Secrets Manager when `secrets_manager` (the AWS backend), else only the
    /// environment.
    pub fn new(secrets_manager: bool) -> Self {
        Self {
            secrets_manager,
            prefix: crate::env(AGENT_SECRETS_PREFIX_ENV),
            #[cfg(feature = "aws")]
            cache: tokio::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn check_prefix(&self, name: &str) -> Result<(), String> {
        match &self.prefix {
            Some(prefix) if !secret_name(name).starts_with(prefix.as_str()) => Err(format!(
                "secret {name:?} is not under {prefix:?}, the prefix this deployment may read"
            )),
            _ => Ok(()),
        }
    }
}

/// The name part of a secret id: an ARN's `secret:` part (without the random suffix AWS adds
/// it keeps, which prefixes still match), or the name itself.
fn secret_name(id: &str) -> &str {
    id.split_once(":secret:").map_or(id, |(_, name)| name)
}

#[async_trait]
impl SecretSource for HostSecrets {
    async fn value(&self, reference: &SecretRef) -> Result<String, String> {
        match reference {
            SecretRef::Env(name) => {
                std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))
            }
            SecretRef::Secret(name) => {
                self.check_prefix(name)?;
                self.secret(name).await
            }
        }
    }
}

impl HostSecrets {
    #[cfg(feature = "aws")]
    async fn secret(&self, name: &str) -> Result<String, String> {
        if !self.secrets_manager {
            return Err(format!(
                "secret {name:?}: this process reads no Secrets Manager secrets (use {{\"env\": …}} with the embedded backend)"
            ));
        }
        let mut cache = self.cache.lock().await;
        if let Some(value) = cache.get(name) {
            return Ok(value.clone());
        }
        let sdk = agentlane_aws::sdk_config().await;
        let value = agentlane_aws::secrets::secret_string(&sdk, name)
            .await
            .map_err(|e| e.to_string())?;
        cache.insert(name.to_owned(), value.clone());
        Ok(value)
    }

    #[cfg(not(feature = "aws"))]
    async fn secret(&self, name: &str) -> Result<String, String> {
        Err(format!(
            "secret {name:?}: this build reads no Secrets Manager secrets (use {{\"env\": …}})"
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn prefixes_match_names_and_arns() {
        let s = HostSecrets {
            secrets_manager: true,
            prefix: Some("agentlane/agents/".into()),
            #[cfg(feature = "aws")]
            cache: Default::default(),
        };
        assert!(s.check_prefix("agentlane/agents/orders").is_ok());
        assert!(
            s.check_prefix("arn:aws:secretsmanager:us-east-1:1:secret:agentlane/agents/x-AbCd")
                .is_ok()
        );
        assert!(s.check_prefix("prod/db").is_err());
        assert!(
            s.check_prefix("arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbCd")
                .is_err()
        );
    }

    #[tokio::test]
    async fn env_references_read_the_environment_and_say_which_is_missing() {
        let s = HostSecrets::new(false);
        let missing = s
            .value(&SecretRef::Env("AGENTLANE_TEST_SURELY_UNSET_VAR".into()))
            .await;
        assert_eq!(
            missing,
            Err("environment variable AGENTLANE_TEST_SURELY_UNSET_VAR is not set".into())
        );
        let path = s.value(&SecretRef::Env("PATH".into())).await;
        assert!(path.is_ok());
    }
}
