//! The embedded backend's wrapping key: 32 random bytes in a file of the data directory
//! (`secrets.key`, mode 0600), made at first use. Each secret's data key is wrapped under it
//! with AES-256-GCM, the tenant and the name as associated data.
//!
//! The file is published atomically (written to a temporary name, then hard-linked into
//! place), so two processes starting together agree on one key. Whoever can read the file can
//! open every secret of the database: back it up apart from `agentlane.db`, never beside it.

use crate::seal::{self, DataKey, KEY_BYTES, NONCE_BYTES, SealError};
use crate::{KeyContext, KeyWrap};
use async_trait::async_trait;
use rand::RngCore;
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio::sync::OnceCell;

/// The name of the key file in the data directory.
pub const KEY_FILE: &str = "secrets.key";
/// What seals made under a local key file record as their key.
pub const LOCAL_KEY_REF: &str = "local:1";

/// A [`KeyWrap`] over a key file.
pub struct LocalKeyFile {
    path: PathBuf,
    key: OnceCell<DataKey>,
}

impl LocalKeyFile {
    /// The key file at `path` (read, or made, at first use).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            key: OnceCell::new(),
        }
    }

    /// The key file of a data directory (`<dir>/secrets.key`).
    pub fn in_dir(dir: &Path) -> Self {
        Self::new(dir.join(KEY_FILE))
    }

    async fn key(&self) -> Result<&DataKey, SealError> {
        self.key
            .get_or_try_init(|| async {
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || load_or_create(&path))
                    .await
                    .map_err(|e| SealError::Unavailable(format!("key file task: {e}")))?
            })
            .await
    }
}

fn io_error(path: &Path, what: &str, e: &std::io::Error) -> SealError {
    SealError::Unavailable(format!("{what} {}: {e}", path.display()))
}

/// Reads the key at `path`, or makes it there when there is none.
fn load_or_create(path: &Path) -> Result<DataKey, SealError> {
    match std::fs::read(path) {
        Ok(bytes) => return parse(path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path, "cannot read the secrets key file", &e)),
    }
    let key = DataKey::random();
    let mut suffix = [0u8; 8];
    rand::rng().fill_bytes(&mut suffix);
    let tmp = path.with_extension(format!(
        "tmp-{}",
        suffix
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(key.as_bytes())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(path, "cannot write the secrets key file", &e));
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "made the secrets key file");
            Ok(key)
        }
        // Another process published its key first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let bytes = std::fs::read(path)
                .map_err(|e| io_error(path, "cannot read the secrets key file", &e))?;
            parse(path, &bytes)
        }
        Err(e) => Err(io_error(path, "cannot publish the secrets key file", &e)),
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<DataKey, SealError> {
    if bytes.len() != KEY_BYTES {
        return Err(SealError::Corrupt(format!(
            "the secrets key file {} holds {} bytes, not {KEY_BYTES}",
            path.display(),
            bytes.len()
        )));
    }
    DataKey::from_slice(bytes)
}

#[async_trait]
impl KeyWrap for LocalKeyFile {
    fn key_ref(&self) -> String {
        LOCAL_KEY_REF.to_owned()
    }

    async fn generate(&self, ctx: &KeyContext<'_>) -> Result<(DataKey, Vec<u8>), SealError> {
        let master = self.key().await?;
        let data_key = DataKey::random();
        let (nonce, wrapped) = seal::seal(
            master,
            data_key.as_bytes(),
            &seal::key_aad(ctx.tenant, ctx.name),
        )?;
        let mut out = nonce;
        out.extend_from_slice(&wrapped);
        Ok((data_key, out))
    }

    async fn unwrap(
        &self,
        key_ref: &str,
        wrapped: &[u8],
        ctx: &KeyContext<'_>,
    ) -> Result<DataKey, SealError> {
        if key_ref != LOCAL_KEY_REF {
            return Err(SealError::Corrupt(format!(
                "sealed under {key_ref:?}; this process holds {LOCAL_KEY_REF:?}"
            )));
        }
        if wrapped.len() <= NONCE_BYTES {
            return Err(SealError::Corrupt("a wrapped key is too short".into()));
        }
        let master = self.key().await?;
        let (nonce, ciphertext) = wrapped.split_at(NONCE_BYTES);
        let bytes = seal::open(
            master,
            nonce,
            ciphertext,
            &seal::key_aad(ctx.tenant, ctx.name),
        )?;
        DataKey::from_slice(&bytes)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::TenantId;

    #[tokio::test]
    async fn the_key_file_is_made_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let acme = TenantId::new("acme");
        let ctx = KeyContext {
            tenant: &acme,
            name: "token",
        };
        let first = LocalKeyFile::in_dir(dir.path());
        let (key, wrapped) = first.generate(&ctx).await.unwrap();
        let path = dir.path().join(KEY_FILE);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_BYTES);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        // A second process (a new LocalKeyFile) reads the same file and unwraps.
        let second = LocalKeyFile::in_dir(dir.path());
        let again = second.unwrap(LOCAL_KEY_REF, &wrapped, &ctx).await.unwrap();
        assert_eq!(again.as_bytes(), key.as_bytes());
        // Bound to the tenant and the name.
        let globex = TenantId::new("globex");
        let moved = KeyContext {
            tenant: &globex,
            name: "token",
        };
        assert!(
            second
                .unwrap(LOCAL_KEY_REF, &wrapped, &moved)
                .await
                .is_err()
        );
        assert!(second.unwrap("kms:x", &wrapped, &ctx).await.is_err());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(KEY_FILE)]);
    }

    #[tokio::test]
    async fn processes_starting_together_agree_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || load_or_create(&path).unwrap())
            })
            .collect();
        let keys: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(keys.iter().all(|k| k.as_bytes() == keys[0].as_bytes()));
    }

    #[tokio::test]
    async fn a_damaged_key_file_is_an_error_not_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), b"short").unwrap();
        let acme = TenantId::new("acme");
        let ctx = KeyContext {
            tenant: &acme,
            name: "n",
        };
        let err = LocalKeyFile::in_dir(dir.path())
            .generate(&ctx)
            .await
            .unwrap_err();
        assert!(matches!(err, SealError::Corrupt(_)), "{err}");
    }
}
