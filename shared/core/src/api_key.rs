//! Store-backed API keys (SPEC §13: "deployments keep hashed keys in the store") and the
//! [`KeyStore`] seam that keeps them.
//!
//! A key reads `al_<id>_<secret>`: a recognisable prefix (secret scanners and people can tell
//! an agentlane key at a glance), the key's public id (32 hex digits, time-ordered) and 43
//! random alphanumeric characters (≈ 256 bits). The store keeps the id, the tenant and the
//! SHA-256 of the whole key — never the key. A presented key is found by its id (one point
//! read) and accepted when its digest equals the stored one, compared in constant time.
//!
//! The digest is a plain SHA-256, without a pepper: with 256 bits of entropy in the secret a
//! leaked digest cannot be brute-forced, and a pepper would be one more secret to distribute to
//! every ingress.

use crate::ids::TenantId;
use crate::store::StoreResult;
use async_trait::async_trait;
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// The prefix of every store-backed key.
pub const KEY_PREFIX: &str = "al_";
/// Length of the secret part.
const SECRET_LEN: usize = 43;
/// Length of a key id (a UUIDv7 in simple form).
const ID_LEN: usize = 32;
/// Longest label a key may carry.
pub const MAX_LABEL_LEN: usize = 128;

/// A key as stored: everything but the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// The key's public id (the middle part of the key).
    pub key_id: String,
    /// The tenant the key authenticates as.
    pub tenant: TenantId,
    /// SHA-256 of the whole key, lowercase hex.
    #[serde(skip_serializing, default)]
    pub hash: String,
    /// A free-form note (who or what uses the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When the key was created (ms since the epoch).
    pub created_at: u64,
    /// When the key was revoked (ms since the epoch); a revoked key authenticates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
}

impl ApiKeyRecord {
    /// Whether `presented` (a whole key) is this key and it is not revoked. The digests are
    /// compared in constant time.
    pub fn accepts(&self, presented: &str) -> bool {
        let digest = key_digest(presented);
        self.revoked_at.is_none() && constant_time_eq(digest.as_bytes(), self.hash.as_bytes())
    }
}

/// A freshly minted key: the full key text (shown once) and the record to store.
pub struct NewApiKey {
    /// The whole key (`al_<id>_<secret>`). Give it to the user once; it is not kept.
    pub key: String,
    /// What gets stored.
    pub record: ApiKeyRecord,
}

impl fmt::Debug for NewApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewApiKey")
            .field("key", &"<redacted>")
            .field("record", &self.record)
            .finish()
    }
}

impl NewApiKey {
    /// Mints a key for `tenant` created at `now` (ms).
    pub fn generate(tenant: TenantId, label: Option<String>, now: u64) -> Self {
        let key_id = uuid::Uuid::now_v7().simple().to_string();
        let secret: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(SECRET_LEN)
            .map(char::from)
            .collect();
        let key = format!("{KEY_PREFIX}{key_id}_{secret}");
        let hash = key_digest(&key);
        Self {
            key,
            record: ApiKeyRecord {
                key_id,
                tenant,
                hash,
                label,
                created_at: now,
                revoked_at: None,
            },
        }
    }
}

/// The key id of a presented key when it has the store-backed form (`al_<id>_<secret>`), else
/// `None` (it may still be a configured key).
pub fn key_id_of(presented: &str) -> Option<&str> {
    let rest = presented.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let id_ok = id.len() == ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit());
    let secret_ok = secret.len() == SECRET_LEN && secret.bytes().all(|b| b.is_ascii_alphanumeric());
    (id_ok && secret_ok).then_some(id)
}

/// Whether `key_id` has the form of a key id (for commands naming a key to revoke).
pub fn is_key_id(key_id: &str) -> bool {
    key_id.len() == ID_LEN && key_id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// SHA-256 of a whole key, lowercase hex.
pub fn key_digest(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Equality of two byte strings whose time depends on their length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Where store-backed API keys live: the same database or table as the sessions.
#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Stores a new key (`Conflict` if its id is taken).
    async fn create_key(&self, record: &ApiKeyRecord) -> StoreResult<()>;

    /// The key with this id, revoked or not (one point read: this is on every request whose
    /// key is not cached).
    async fn find_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>>;

    /// Every key of a tenant, revoked ones included, by id (that is, by creation time).
    async fn list_keys(&self, tenant: &TenantId) -> StoreResult<Vec<ApiKeyRecord>>;

    /// Revokes the tenant's key `key_id` at `at` (ms). `false` when the tenant has no such key;
    /// revoking a revoked key keeps its first `revokedAt` and answers `true`.
    async fn revoke_key(&self, tenant: &TenantId, key_id: &str, at: u64) -> StoreResult<bool>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn minted_keys_parse_and_verify() {
        let new = NewApiKey::generate(TenantId::new("acme"), None, 5);
        assert!(new.key.starts_with("al_"));
        assert_eq!(key_id_of(&new.key), Some(new.record.key_id.as_str()));
        assert!(new.record.accepts(&new.key));
        assert!(!new.key.contains(&new.record.hash));
        let mut wrong = new.key.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == 'a' { 'b' } else { 'a' });
        assert_eq!(key_id_of(&wrong), Some(new.record.key_id.as_str()));
        assert!(!new.record.accepts(&wrong));
        let revoked = ApiKeyRecord {
            revoked_at: Some(6),
            ..new.record.clone()
        };
        assert!(!revoked.accepts(&new.key));
        assert!(format!("{new:?}").contains("<redacted>"));
        assert!(!format!("{new:?}").contains(&new.key));
    }

    #[test]
    fn other_keys_are_not_store_keys() {
        for key in ["0123456789abcdef", "al_", "al_xyz_abc", "al__", "sk-al_1_2"] {
            assert_eq!(key_id_of(key), None, "{key}");
        }
    }

    #[test]
    fn the_record_never_serialises_the_hash() {
        let new = NewApiKey::generate(TenantId::new("acme"), Some("ci".into()), 5);
        let json = serde_json::to_string(&new.record).unwrap();
        assert!(!json.contains(&new.record.hash));
        assert!(json.contains("\"keyId\""));
    }
}
