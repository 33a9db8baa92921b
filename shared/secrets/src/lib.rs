//! Tenant secrets sealed at rest (envelope encryption).
//!
//! Each value gets a data key of its own; the value is sealed under it with AES-256-GCM, the
//! tenant and the name as associated data ([`seal::value_aad`]); the data key is wrapped by a
//! [`KeyWrap`] the store never holds: [`LocalKeyFile`] for the embedded backend, KMS
//! (`GenerateDataKey`/`Decrypt`, in `agentlane-aws`) for the AWS one. The store keeps only the
//! [`SealedValue`](agentlane_core::SealedValue).
//!
//! [`Vault`] is what the API and the runner use: it seals on write, opens on read, and caches
//! what it opened for a bounded time (a replaced value reaches every process within the TTL,
//! 30 s by default, never more than 60 s) and the unwrapped data keys (one KMS `Decrypt` per
//! value per process, while it is unchanged).
#![warn(missing_docs)]

pub mod local;
pub mod seal;
pub mod vault;

pub use local::LocalKeyFile;
pub use seal::{DataKey, SealError};
pub use vault::{SecretValue, Vault};

use agentlane_core::TenantId;
use async_trait::async_trait;

/// What a data key is bound to: the secret's owner and name.
#[derive(Debug, Clone, Copy)]
pub struct KeyContext<'a> {
    /// The owner.
    pub tenant: &'a TenantId,
    /// The secret's name.
    pub name: &'a str,
}

/// Makes and unwraps data keys under a key the store never holds.
#[async_trait]
pub trait KeyWrap: Send + Sync + 'static {
    /// What new seals record as their key (`local:1`, `kms:<key id>`).
    fn key_ref(&self) -> String;

    /// A fresh data key for `ctx` and its wrapped form.
    async fn generate(&self, ctx: &KeyContext<'_>) -> Result<(DataKey, Vec<u8>), SealError>;

    /// The data key `wrapped` holds (recorded with `key_ref`), checked against `ctx`: a key
    /// wrapped for another tenant or name does not unwrap.
    async fn unwrap(
        &self,
        key_ref: &str,
        wrapped: &[u8],
        ctx: &KeyContext<'_>,
    ) -> Result<DataKey, SealError>;
}
