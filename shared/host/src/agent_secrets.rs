//! Where the secret references of agents' tools are resolved, for the run's own tenant:
//! `{"secret": "name"}` is that tenant's secret of that name (the vault: sealed in the store,
//! opened here, kept for the vault's TTL); `{"env": "VAR"}` is read from this process's
//! environment only when the operator granted `VAR` (`AGENTLANE_AGENT_ENV_ALLOW`), never the
//! server's own credentials (refused at start-up).

use agentlane_agent::agents::SecretSource;
use agentlane_core::{EnvGrants, SecretRef, TenantId};
use agentlane_secrets::Vault;
use async_trait::async_trait;
use std::sync::Arc;

/// Tenants' secrets and the granted environment variables.
pub struct HostSecrets {
    vault: Arc<Vault>,
    grants: EnvGrants,
}

impl HostSecrets {
    /// Secrets from `vault`; only `grants` of the environment.
    pub fn new(vault: Arc<Vault>, grants: EnvGrants) -> Self {
        Self { vault, grants }
    }
}

#[async_trait]
impl SecretSource for HostSecrets {
    async fn value(&self, tenant: &TenantId, reference: &SecretRef) -> Result<String, String> {
        match reference {
            SecretRef::Env(name) if !self.grants.allows(name) => Err(format!(
                "environment variable {name} is not granted to agents by this deployment"
            )),
            SecretRef::Env(name) => {
                std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))
            }
            SecretRef::Secret(name) => match self.vault.reveal(tenant, name).await {
                Ok(Some(value)) => Ok(value.expose().to_owned()),
                Ok(None) => Err(format!("the tenant has no secret {name:?}")),
                Err(e) => {
                    tracing::warn!(secret = %name, error = %e, "a tenant secret could not be read");
                    Err(format!("secret {name:?} could not be read"))
                }
            },
        }
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_secrets::LocalKeyFile;

    fn source(grants: &[&str]) -> (HostSecrets, Arc<Vault>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = agentlane_store_sqlite::SqliteBackend::open(dir.path()).unwrap();
        let vault = Arc::new(Vault::new(
            Arc::new(store),
            Arc::new(LocalKeyFile::in_dir(dir.path())),
        ));
        let grants = EnvGrants::new(grants.iter().copied(), &[]).unwrap();
        (HostSecrets::new(vault.clone(), grants), vault, dir)
    }

    #[tokio::test]
    async fn only_granted_variables_are_read_and_missing_ones_say_so() {
        let (s, _, _dir) = source(&["PATH", "HOST_TEST_SURELY_UNSET_VAR"]);
        let acme = TenantId::new("acme");
        assert!(s.value(&acme, &SecretRef::Env("PATH".into())).await.is_ok());
        let refused = s.value(&acme, &SecretRef::Env("HOME".into())).await;
        assert_eq!(
            refused,
            Err("environment variable HOME is not granted to agents by this deployment".into())
        );
        let missing = s
            .value(&acme, &SecretRef::Env("HOST_TEST_SURELY_UNSET_VAR".into()))
            .await;
        assert_eq!(
            missing,
            Err("environment variable HOST_TEST_SURELY_UNSET_VAR is not set".into())
        );
    }

    #[tokio::test]
    async fn a_secret_reference_is_the_calling_tenants_own() {
        let (s, vault, _dir) = source(&[]);
        let (acme, globex) = (TenantId::new("acme"), TenantId::new("globex"));
        vault
            .put(&acme, "token", "acme-value", 1, 10)
            .await
            .unwrap();
        vault
            .put(&globex, "token", "globex-value", 1, 10)
            .await
            .unwrap();
        let r = SecretRef::Secret("token".into());
        assert_eq!(s.value(&acme, &r).await.unwrap(), "acme-value");
        assert_eq!(s.value(&globex, &r).await.unwrap(), "globex-value");
        let nobody = s.value(&TenantId::new("initech"), &r).await;
        assert_eq!(nobody, Err("the tenant has no secret \"token\"".into()));
    }
}
