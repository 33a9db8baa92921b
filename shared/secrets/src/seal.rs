//! AES-256-GCM, as every sealed value and every locally wrapped data key uses it (the
//! RustCrypto `aes-gcm` crate; nothing here is a cipher of its own).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use agentlane_core::TenantId;
use rand::RngCore;
use zeroize::Zeroizing;

/// Bytes of an AES-GCM nonce.
pub const NONCE_BYTES: usize = 12;
/// Bytes of a data key (AES-256).
pub const KEY_BYTES: usize = 32;

/// Why a value could not be sealed or opened. Never carries a value or a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key service did not answer (KMS throttled or unreachable): try again later.
    #[error("the key service is unavailable: {0}")]
    Unavailable(String),
    /// The sealed bytes do not open under this tenant, name and key: moved, altered, or sealed
    /// under a key this process does not have.
    #[error("the sealed value does not open: {0}")]
    Corrupt(String),
}

impl From<SealError> for agentlane_core::StoreError {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Unavailable(why) => Self::Unavailable(why),
            SealError::Corrupt(why) => Self::Corrupt(why),
        }
    }
}

/// A 256-bit key, wiped from memory when dropped.
#[derive(Clone)]
pub struct DataKey(Zeroizing<[u8; KEY_BYTES]>);

impl DataKey {
    /// A fresh random key (the thread's CSPRNG, seeded from the OS).
    pub fn random() -> Self {
        let mut key = Zeroizing::new([0u8; KEY_BYTES]);
        rand::rng().fill_bytes(key.as_mut());
        Self(key)
    }

    /// A key from its bytes (a KMS plaintext, an unwrapped key); exactly [`KEY_BYTES`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SealError> {
        let array: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| {
            SealError::Corrupt(format!(
                "a data key is {KEY_BYTES} bytes, got {}",
                bytes.len()
            ))
        })?;
        Ok(Self(Zeroizing::new(array)))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(self.0.as_ref()))
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(<redacted>)")
    }
}

/// The associated data of a secret's value: the value opens only as this tenant's secret of
/// this name (a ciphertext copied to another tenant or name fails its tag check).
pub fn value_aad(tenant: &TenantId, name: &str) -> Vec<u8> {
    aad(b"agentlane/secret-value/v1", tenant, name)
}

/// The associated data of a locally wrapped data key (the same binding, another purpose).
pub fn key_aad(tenant: &TenantId, name: &str) -> Vec<u8> {
    aad(b"agentlane/secret-key/v1", tenant, name)
}

fn aad(purpose: &[u8], tenant: &TenantId, name: &str) -> Vec<u8> {
    // NUL never appears in a tenant id or a secret name, so the parts cannot run together.
    let mut out = Vec::with_capacity(purpose.len() + tenant.as_str().len() + name.len() + 2);
    out.extend_from_slice(purpose);
    out.push(0);
    out.extend_from_slice(tenant.as_str().as_bytes());
    out.push(0);
    out.extend_from_slice(name.as_bytes());
    out
}

/// Encrypts `plaintext` under `key` with a fresh random nonce: `(nonce, ciphertext + tag)`.
pub fn seal(key: &DataKey, plaintext: &[u8], aad: &[u8]) -> Result<(Vec<u8>, Vec<u8>), SealError> {
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut nonce);
    let ciphertext = key
        .cipher()
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| SealError::Corrupt("AES-GCM refused to encrypt".into()))?;
    Ok((nonce.to_vec(), ciphertext))
}

/// Decrypts what [`seal`] made, checking its tag against `aad`.
pub fn open(
    key: &DataKey,
    nonce: &[u8],
    ciphertext: &[u8],
    aad: &[u8],
) -> Result<Zeroizing<Vec<u8>>, SealError> {
    if nonce.len() != NONCE_BYTES {
        return Err(SealError::Corrupt(format!(
            "a nonce is {NONCE_BYTES} bytes, got {}",
            nonce.len()
        )));
    }
    key.cipher()
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .map(Zeroizing::new)
        .map_err(|_| {
            SealError::Corrupt("the tag does not match (wrong key, tenant or name)".into())
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_tenant_and_name() {
        let key = DataKey::random();
        let acme = TenantId::new("acme");
        let aad = value_aad(&acme, "token");
        let (nonce, ct) = seal(&key, b"hunter2", &aad).unwrap();
        assert!(!ct.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            open(&key, &nonce, &ct, &aad).unwrap().as_slice(),
            b"hunter2"
        );

        let other_tenant = value_aad(&TenantId::new("globex"), "token");
        let other_name = value_aad(&acme, "token2");
        assert!(open(&key, &nonce, &ct, &other_tenant).is_err());
        assert!(open(&key, &nonce, &ct, &other_name).is_err());
        assert!(open(&DataKey::random(), &nonce, &ct, &aad).is_err());
        let mut flipped = ct.clone();
        flipped[0] ^= 1;
        assert!(open(&key, &nonce, &flipped, &aad).is_err());
    }

    #[test]
    fn tenant_and_name_cannot_run_together() {
        // "ab" + "c" and "a" + "bc" are different bindings.
        let a = value_aad(&TenantId::new("ab"), "c");
        let b = value_aad(&TenantId::new("a"), "bc");
        assert_ne!(a, b);
        assert_ne!(
            value_aad(&TenantId::new("a"), "b"),
            key_aad(&TenantId::new("a"), "b")
        );
    }

    #[test]
    fn nonces_are_fresh_and_keys_have_their_length() {
        let key = DataKey::random();
        let (n1, c1) = seal(&key, b"v", b"").unwrap();
        let (n2, c2) = seal(&key, b"v", b"").unwrap();
        assert_ne!(n1, n2);
        assert_ne!(c1, c2);
        assert!(DataKey::from_slice(&[0; 31]).is_err());
        assert!(DataKey::from_slice(&[0; 32]).is_ok());
        assert_eq!(format!("{key:?}"), "DataKey(<redacted>)");
    }
}
