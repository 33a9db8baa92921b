//! Bearer API keys → tenant. Only SHA-256 digests of the keys are kept, and a presented key is
//! compared against every digest in constant time.

use crate::Shared;
use crate::error::ApiError;
use agentlane_core::TenantId;
use agentlane_core::validate::validate_tenant;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;

/// Shortest accepted API key.
pub const MIN_KEY_LEN: usize = 16;

type KeyDigest = [u8; 32];

struct KeyEntry {
    digest: KeyDigest,
    tenant: TenantId,
}

/// The table of API keys, each mapping to one tenant. Cheap to clone.
#[derive(Clone, Default)]
pub struct ApiKeys {
    entries: Arc<[KeyEntry]>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.entries.len())
            .finish()
    }
}

impl ApiKeys {
    /// Parses `tenant:key,tenant2:key2` (whitespace around pairs is ignored; a key may itself
    /// contain `:`). At least one pair is required. Errors never quote a key.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (index, item) in spec.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let (tenant, key) = item.split_once(':').ok_or_else(|| {
                format!("API key entry #{} is not of the form tenant:key", index + 1)
            })?;
            pairs.push((tenant.trim().to_owned(), key.trim().to_owned()));
        }
        if pairs.is_empty() {
            return Err("no API keys given (expected tenant:key[,tenant:key...])".into());
        }
        Self::from_pairs(pairs)
    }

    /// Builds the table from `(tenant, key)` pairs. Tenants must pass `validate_tenant`; keys
    /// must be at least [`MIN_KEY_LEN`] visible ASCII characters and distinct.
    pub fn from_pairs<I, T, K>(pairs: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = (T, K)>,
        T: AsRef<str>,
        K: AsRef<str>,
    {
        let mut entries: Vec<KeyEntry> = Vec::new();
        for (tenant, key) in pairs {
            let (tenant, key) = (tenant.as_ref(), key.as_ref());
            validate_tenant(tenant)?;
            if key.len() < MIN_KEY_LEN {
                return Err(format!(
                    "the API key of tenant {tenant:?} is shorter than {MIN_KEY_LEN} characters"
                ));
            }
            if !key.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
                return Err(format!(
                    "the API key of tenant {tenant:?} must be visible ASCII without spaces or commas"
                ));
            }
            let digest = digest(key);
            if entries.iter().any(|e| e.digest == digest) {
                return Err(format!(
                    "an API key of tenant {tenant:?} is listed more than once"
                ));
            }
            entries.push(KeyEntry {
                digest,
                tenant: TenantId::new(tenant),
            });
        }
        Ok(Self {
            entries: entries.into(),
        })
    }

    /// The tenant owning `key`, if any. Every stored digest is compared, in constant time.
    pub fn tenant_for(&self, key: &str) -> Option<TenantId> {
        let presented = digest(key);
        let mut found = None;
        for entry in self.entries.iter() {
            if constant_time_eq(&entry.digest, &presented) {
                found = Some(entry.tenant.clone());
            }
        }
        found
    }

    /// How many keys the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no key (every request is then unauthorized).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn digest(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

fn constant_time_eq(a: &KeyDigest, b: &KeyDigest) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The key from `Authorization: Bearer <key>`, if the header is well formed.
fn bearer_token(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The authenticated tenant of a request, admitted under its request rate (`429
/// rate_limited` with `Retry-After` beyond it). Extract it first in every handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub TenantId);

impl FromRequestParts<Arc<Shared>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Shared>,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer_token(parts).ok_or(ApiError::Unauthorized)?;
        let tenant = state.keys.tenant_for(token).ok_or(ApiError::Unauthorized)?;
        state.admission.admit_request(&tenant)?;
        Ok(Tenant(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_finds_tenants() {
        let keys = ApiKeys::parse(" acme:0123456789abcdef , beta:key:with:colons-long ,").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.tenant_for("0123456789abcdef"),
            Some(TenantId::new("acme"))
        );
        assert_eq!(
            keys.tenant_for("key:with:colons-long"),
            Some(TenantId::new("beta"))
        );
        assert_eq!(keys.tenant_for("0123456789abcdeX"), None);
        assert_eq!(keys.tenant_for(""), None);
    }

    #[test]
    fn rejects_bad_specs_without_quoting_keys() {
        let cases = [
            ("", "no API keys"),
            ("acme", "tenant:key"),
            ("acme:short", "shorter than 16"),
            ("bad tenant:0123456789abcdef", "tenant"),
            ("a:0123456789abcdef,b:0123456789abcdef", "more than once"),
            ("a:0123456789 abcdef", "visible ASCII"),
        ];
        for (spec, expected) in cases {
            let err = ApiKeys::parse(spec).unwrap_err();
            assert!(err.contains(expected), "{spec:?} → {err}");
            assert!(!err.contains("0123456789"), "key leaked in {err}");
        }
    }

    #[test]
    fn debug_shows_no_key_material() {
        let keys = ApiKeys::parse("acme:0123456789abcdef").unwrap();
        assert_eq!(format!("{keys:?}"), "ApiKeys { keys: 1 }");
    }
}
