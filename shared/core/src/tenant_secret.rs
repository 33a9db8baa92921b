//! A tenant's secrets: values a tenant writes once (`PUT /v1/secrets/{name}`), never shown
//! back, that its agents' tools reference by name (`{"secret": "name"}`).
//!
//! The store keeps a [`SealedValue`] only: the value encrypted with AES-256-GCM under a data
//! key of its own, the data key wrapped by a key the store never holds (KMS on AWS, a key file
//! in the data directory for the embedded backend), the tenant and the name bound in as
//! associated data. Sealing and opening live in `agentlane-secrets`; this module is the seam
//! every backend implements ([`SecretStore`]) and the rules the API applies.

use crate::{StoreResult, TenantId};
use async_trait::async_trait;

/// The longest value a secret may hold, in bytes.
pub const MAX_SECRET_VALUE_BYTES: usize = 16 * 1024;
/// The longest secret name.
pub const MAX_SECRET_NAME_CHARS: usize = 64;
/// How many secrets a tenant may keep when the configuration says nothing.
pub const DEFAULT_MAX_SECRETS: u32 = 100;

/// `Ok` when `name` is a secret name: 1-64 characters of `[A-Za-z0-9_-]`.
pub fn validate_secret_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SECRET_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a secret name is 1-{MAX_SECRET_NAME_CHARS} characters of A-Z, a-z, 0-9, _ and -"
        ))
    }
}

/// `Ok` when `value` may be stored: not empty, at most [`MAX_SECRET_VALUE_BYTES`].
pub fn validate_secret_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("value must not be empty".into());
    }
    if value.len() > MAX_SECRET_VALUE_BYTES {
        return Err(format!(
            "value is {} bytes; at most {MAX_SECRET_VALUE_BYTES} are allowed",
            value.len()
        ));
    }
    Ok(())
}

/// Why the operator can never grant `name` to tenants' agents (`None`: it may be granted): the
/// cloud credentials (`AWS_*`), agentlane's own settings (`AGENTLANE_*`) and the provider keys
/// (`OPENAI_API_KEY(S)`, `ANTHROPIC_API_KEY(S)` and each variable in `provider_vars`, the
/// keys of the providers this deployment is configured with) are the server's, whatever the
/// configuration says.
pub fn never_grantable(name: &str, provider_vars: &[String]) -> Option<String> {
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Some(format!("{name:?} is not an environment variable name"));
    }
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("AWS_") || upper.starts_with("AGENTLANE_") {
        return Some(format!(
            "{name} is the server's own (AWS_* and AGENTLANE_* can never be granted)"
        ));
    }
    let provider = [
        "OPENAI_API_KEY",
        "OPENAI_API_KEYS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_API_KEYS",
    ]
    .iter()
    .any(|p| *p == upper)
        || provider_vars.iter().any(|p| p.eq_ignore_ascii_case(name));
    provider.then(|| format!("{name} holds a model provider's key and can never be granted"))
}

/// The environment variables the operator grants to tenants' agents (`AGENTLANE_AGENT_ENV_ALLOW`,
/// `[agents] env_allow`): an agent's `{"env": "VAR"}` is refused unless `VAR` is here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvGrants(std::collections::BTreeSet<String>);

impl EnvGrants {
    /// The grants `names`, refusing (naming it) any [`never_grantable`] one.
    pub fn new<I, S>(names: I, provider_vars: &[String]) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut set = std::collections::BTreeSet::new();
        for name in names {
            let name = name.into();
            if let Some(why) = never_grantable(&name, provider_vars) {
                return Err(why);
            }
            set.insert(name);
        }
        Ok(Self(set))
    }

    /// Whether an agent may read `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The granted names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// A value as the store keeps it: nothing in it reveals the value without the wrapping key.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedValue {
    /// Which key wrapped `wrapped_key` (`local:1`, `kms:<key id>`): opening picks the unwrapper.
    pub key_ref: String,
    /// The value's own 256-bit data key, wrapped (a KMS ciphertext blob, or AES-256-GCM under
    /// the embedded key file).
    pub wrapped_key: Vec<u8>,
    /// The 96-bit nonce of `ciphertext`.
    pub nonce: Vec<u8>,
    /// The value under the data key (AES-256-GCM, tag appended), the tenant and the name as
    /// associated data.
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for SealedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedValue")
            .field("key_ref", &self.key_ref)
            .field("ciphertext_bytes", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

/// What the API shows of a secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMeta {
    /// Its name, unique in the tenant.
    pub name: String,
    /// When it was first written (ms since the epoch).
    pub created_at: u64,
    /// When its value was last written.
    pub updated_at: u64,
    /// 1 at creation, one more at each replacement.
    pub version: u64,
}

/// A stored secret: what the API shows and the sealed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRecord {
    /// The owner.
    pub tenant: TenantId,
    /// Name, times, version.
    pub meta: SecretMeta,
    /// The value, sealed.
    pub sealed: SealedValue,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSecret {
    /// `true`: the name was new (`201`); `false`: a value was replaced (`200`).
    pub created: bool,
    /// The secret as stored now.
    pub meta: SecretMeta,
}

/// Where a tenant's secrets are kept (the same database or table as everything else). Every
/// call is scoped by the tenant: no call reaches another tenant's secrets.
#[async_trait]
pub trait SecretStore: Send + Sync + 'static {
    /// Writes `sealed` as the value of `name`: a new secret (version 1, `created_at` =
    /// `updated_at` = `now`) unless the tenant already has `max_secrets` secrets (`Conflict`
    /// naming the cap), or a replacement of the existing one (its version + 1, its
    /// `created_at` kept) in one atomic write: a reader sees the old value or the new one,
    /// never a mix.
    async fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
        now: u64,
        max_secrets: u32,
    ) -> StoreResult<PutSecret>;

    /// The secret `name` of `tenant`; `None` when it has none of that name.
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SecretRecord>>;

    /// The tenant's secrets by name, the first after `after`, at most `limit` (never values).
    async fn list_secrets(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<SecretMeta>>;

    /// Deletes the secret; `false` when the tenant had none of that name.
    async fn delete_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<bool>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names_are_short_words_of_letters_digits_dash_and_underscore() {
        for good in ["a", "GITHUB_TOKEN", "orders-api", &"x".repeat(64)] {
            assert!(validate_secret_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            &"x".repeat(65),
            "prod/db",
            "arn:aws:secretsmanager:us-east-1:1:secret:x",
            "a b",
            "é",
            "a.b",
        ] {
            assert!(validate_secret_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_not_empty_and_at_most_16_kib() {
        assert!(validate_secret_value("s").is_ok());
        assert!(validate_secret_value(&"v".repeat(MAX_SECRET_VALUE_BYTES)).is_ok());
        assert!(validate_secret_value("").is_err());
        let err = validate_secret_value(&"v".repeat(MAX_SECRET_VALUE_BYTES + 1)).unwrap_err();
        assert!(err.contains("16384"), "{err}");
    }

    #[test]
    fn the_servers_own_variables_can_never_be_granted() {
        let providers = vec!["MY_VLLM_API_KEY".to_owned(), "LOCAL_LLM_KEY".to_owned()];
        let table: &[(&str, bool)] = &[
            ("WEATHER_TOKEN", true),
            ("GITHUB_TOKEN", true),
            ("AWS_SECRET_ACCESS_KEY", false),
            ("AWS_SESSION_TOKEN", false),
            ("aws_access_key_id", false),
            ("AGENTLANE_API_KEYS", false),
            ("AGENTLANE_METRICS_KEY", false),
            ("OPENAI_API_KEY", false),
            ("ANTHROPIC_API_KEYS", false),
            ("MY_VLLM_API_KEY", false),
            ("local_llm_key", false),
            ("", false),
            ("1ABC", false),
            ("A-B", false),
            ("A=B", false),
        ];
        for (name, grantable) in table {
            assert_eq!(
                never_grantable(name, &providers).is_none(),
                *grantable,
                "{name}"
            );
        }
        let grants = EnvGrants::new(["WEATHER_TOKEN"], &providers).unwrap();
        assert!(grants.allows("WEATHER_TOKEN") && !grants.allows("PATH"));
        let refused = EnvGrants::new(["WEATHER_TOKEN", "AWS_SECRET_ACCESS_KEY"], &providers);
        assert!(refused.unwrap_err().contains("AWS_SECRET_ACCESS_KEY"));
        assert!(!EnvGrants::default().allows("HOME"));
    }

    #[test]
    fn a_sealed_value_debug_shows_no_bytes() {
        let sealed = SealedValue {
            key_ref: "local:1".into(),
            wrapped_key: vec![1, 2, 3],
            nonce: vec![4; 12],
            ciphertext: b"abcdef".to_vec(),
        };
        let shown = format!("{sealed:?}");
        assert!(
            shown.contains("local:1") && !shown.contains("[1, 2, 3]"),
            "{shown}"
        );
    }
}
