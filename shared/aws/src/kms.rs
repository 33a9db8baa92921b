//! [`KmsKeyWrap`]: tenant secrets' data keys made and unwrapped by AWS KMS.
//!
//! Sealing a value asks KMS for a fresh AES-256 data key (`GenerateDataKey`, `KeySpec`
//! `AES_256`): the plaintext key seals the value in this process and is dropped (wiped), the
//! wrapped key (KMS's ciphertext blob) is stored beside the value. Opening asks KMS to
//! `Decrypt` the wrapped key. Both calls carry an encryption context binding the data key to
//! the secret's tenant and name ([`encryption_context`]): a wrapped key copied to another
//! tenant or name is refused by KMS itself, whatever the table holds.
//!
//! The key is `AGENTLANE_SECRETS_KMS_KEY` (a key id, key ARN or alias; `agentlane setup-aws`
//! creates `alias/<table>-secrets`). Without it a process still starts; only its secret reads
//! and writes fail, saying what to set. Nothing here logs or formats key material.

use agentlane_secrets::{DataKey, KeyContext, KeyWrap, SealError};
use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_kms::Client;
use aws_sdk_kms::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::DataKeySpec;
use zeroize::Zeroizing;

/// The environment variable naming the KMS key (id, ARN or alias).
pub const KMS_KEY_ENV: &str = "AGENTLANE_SECRETS_KMS_KEY";
/// The prefix of the `key_ref` of values sealed under KMS.
pub const KMS_KEY_REF_PREFIX: &str = "kms:";
/// The encryption-context key holding the secret's tenant.
pub const CONTEXT_TENANT: &str = "tenant";
/// The encryption-context key holding the secret's name.
pub const CONTEXT_SECRET: &str = "secret";
/// What a process without a key answers to every seal and open.
pub const NO_KEY_MESSAGE: &str =
    "no KMS key configured: set AGENTLANE_SECRETS_KMS_KEY (setup-aws creates one)";

/// The encryption context of a data key: the tenant and the secret name, under
/// [`CONTEXT_TENANT`] and [`CONTEXT_SECRET`] (the only keys the template's IAM condition allows).
pub fn encryption_context(ctx: &KeyContext<'_>) -> [(&'static str, String); 2] {
    [
        (CONTEXT_TENANT, ctx.tenant.as_str().to_owned()),
        (CONTEXT_SECRET, ctx.name.to_owned()),
    ]
}

/// A [`KeyWrap`] over one KMS key. Cheap to clone; clones share the client.
#[derive(Clone)]
pub struct KmsKeyWrap {
    client: Client,
    /// The key id, ARN or alias; `None`: no key configured.
    key: Option<String>,
}

impl std::fmt::Debug for KmsKeyWrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsKeyWrap")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl KmsKeyWrap {
    /// Data keys under `key` (a key id, ARN or alias).
    pub fn new(client: Client, key: impl Into<String>) -> Self {
        Self {
            client,
            key: Some(key.into()),
        }
    }

    /// A wrapper with no key: every call fails with [`SealError::Unavailable`] saying to set
    /// [`KMS_KEY_ENV`].
    pub fn unconfigured(client: Client) -> Self {
        Self { client, key: None }
    }

    /// The key [`KMS_KEY_ENV`] names (blank: none, see [`KmsKeyWrap::unconfigured`]).
    pub fn from_env(sdk: &SdkConfig) -> anyhow::Result<Self> {
        let key = std::env::var(KMS_KEY_ENV)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        let client = Client::new(sdk);
        match key {
            Some(key) => {
                if key.chars().any(char::is_whitespace) {
                    anyhow::bail!("{KMS_KEY_ENV}={key:?} is not a KMS key id, ARN or alias");
                }
                Ok(Self::new(client, key))
            }
            None => {
                tracing::warn!("{NO_KEY_MESSAGE}; tenant secrets cannot be written or read");
                Ok(Self::unconfigured(client))
            }
        }
    }

    /// The configured key, or the error saying there is none.
    fn key(&self) -> Result<&str, SealError> {
        self.key
            .as_deref()
            .ok_or_else(|| SealError::Unavailable(NO_KEY_MESSAGE.into()))
    }
}

/// A KMS failure in the vault's terms: a wrapped key KMS will not decrypt (altered, moved to
/// another tenant or name, or under another key) is [`SealError::Corrupt`]; the rest
/// (throttling, network, a disabled key, a refused grant) is [`SealError::Unavailable`].
fn seal_error<E, R>(operation: &str, err: &SdkError<E, R>) -> SealError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.as_service_error().and_then(ProvideErrorMetadata::code);
    let why = format!("KMS {operation}: {}", DisplayErrorContext(err));
    match code {
        Some(code) if refuses_ciphertext(code) => SealError::Corrupt(why),
        _ => SealError::Unavailable(why),
    }
}

/// Whether a KMS error code says the ciphertext does not open (rather than "try later").
fn refuses_ciphertext(code: &str) -> bool {
    matches!(code, "InvalidCiphertextException" | "IncorrectKeyException")
}

/// The plaintext data key of a KMS answer, the copy wiped.
fn data_key(plaintext: Option<Blob>, operation: &str) -> Result<DataKey, SealError> {
    let bytes = Zeroizing::new(
        plaintext
            .ok_or_else(|| SealError::Corrupt(format!("KMS {operation} returned no plaintext")))?
            .into_inner(),
    );
    DataKey::from_slice(&bytes)
}

#[async_trait]
impl KeyWrap for KmsKeyWrap {
    fn key_ref(&self) -> String {
        format!(
            "{KMS_KEY_REF_PREFIX}{}",
            self.key.as_deref().unwrap_or_default()
        )
    }

    async fn generate(&self, ctx: &KeyContext<'_>) -> Result<(DataKey, Vec<u8>), SealError> {
        let mut request = self
            .client
            .generate_data_key()
            .key_id(self.key()?)
            .key_spec(DataKeySpec::Aes256);
        for (k, v) in encryption_context(ctx) {
            request = request.encryption_context(k, v);
        }
        let out = request
            .send()
            .await
            .map_err(|e| seal_error("GenerateDataKey", &e))?;
        let wrapped = out
            .ciphertext_blob
            .ok_or_else(|| SealError::Corrupt("KMS GenerateDataKey returned no ciphertext".into()))?
            .into_inner();
        Ok((data_key(out.plaintext, "GenerateDataKey")?, wrapped))
    }

    async fn unwrap(
        &self,
        key_ref: &str,
        wrapped: &[u8],
        ctx: &KeyContext<'_>,
    ) -> Result<DataKey, SealError> {
        if !key_ref.starts_with(KMS_KEY_REF_PREFIX) {
            return Err(SealError::Corrupt(format!(
                "secret {:?} was sealed under {key_ref:?}; this backend opens KMS keys only",
                ctx.name
            )));
        }
        self.key()?;
        // No KeyId: a symmetric ciphertext names its key, so values sealed before the alias
        // moved to another key still open (where the role may use that key).
        let mut request = self.client.decrypt().ciphertext_blob(Blob::new(wrapped));
        for (k, v) in encryption_context(ctx) {
            request = request.encryption_context(k, v);
        }
        let out = request
            .send()
            .await
            .map_err(|e| seal_error("Decrypt", &e))?;
        data_key(out.plaintext, "Decrypt")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::TenantId;

    fn offline() -> Client {
        let config = aws_sdk_kms::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_kms::config::Region::new("us-east-1"))
            .build();
        Client::from_conf(config)
    }

    #[test]
    fn the_context_binds_the_tenant_and_the_name() {
        let tenant = TenantId::new("acme");
        let ctx = KeyContext {
            tenant: &tenant,
            name: "GITHUB_TOKEN",
        };
        assert_eq!(
            encryption_context(&ctx),
            [
                ("tenant", "acme".to_owned()),
                ("secret", "GITHUB_TOKEN".to_owned())
            ]
        );
    }

    #[test]
    fn only_a_refused_ciphertext_is_corrupt() {
        for (code, corrupt) in [
            ("InvalidCiphertextException", true),
            ("IncorrectKeyException", true),
            ("ThrottlingException", false),
            ("KMSInternalException", false),
            ("DisabledException", false),
            ("AccessDeniedException", false),
            ("NotFoundException", false),
        ] {
            assert_eq!(refuses_ciphertext(code), corrupt, "{code}");
        }
    }

    #[tokio::test]
    async fn without_a_key_every_call_says_what_to_set() {
        let keys = KmsKeyWrap::unconfigured(offline());
        let tenant = TenantId::new("acme");
        let ctx = KeyContext {
            tenant: &tenant,
            name: "n",
        };
        let expected = SealError::Unavailable(NO_KEY_MESSAGE.into());
        assert_eq!(keys.generate(&ctx).await.err(), Some(expected.clone()));
        assert_eq!(
            keys.unwrap("kms:alias/x", b"blob", &ctx).await.err(),
            Some(expected)
        );
    }

    #[tokio::test]
    async fn a_value_sealed_under_another_kind_of_key_does_not_open() {
        let keys = KmsKeyWrap::new(offline(), "alias/agentlane-secrets");
        assert_eq!(keys.key_ref(), "kms:alias/agentlane-secrets");
        let tenant = TenantId::new("acme");
        let ctx = KeyContext {
            tenant: &tenant,
            name: "n",
        };
        let err = keys.unwrap("local:1", b"blob", &ctx).await.err();
        assert!(matches!(err, Some(SealError::Corrupt(_))), "{err:?}");
    }
}
