//! [`SecretStore`] for `SqliteBackend`: one `tenant_secrets` row per secret, keyed by
//! `(tenant, name)`. A row holds the sealed value only (ciphertext, nonce, wrapped data key):
//! nothing in the database file or its WAL opens without the data directory's key file.

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::{
    PutSecret, SealedValue, SecretMeta, SecretRecord, SecretStore, StoreError, StoreResult,
    TenantId,
};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

/// Migration 16: tenant secrets.
pub(crate) const SCHEMA: &str = "
CREATE TABLE tenant_secrets (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    key_ref     TEXT NOT NULL,
    wrapped_key BLOB NOT NULL,
    nonce       BLOB NOT NULL,
    ciphertext  BLOB NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
";

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn meta(row: &Row<'_>) -> rusqlite::Result<SecretMeta> {
    Ok(SecretMeta {
        name: row.get(0)?,
        version: unsigned(row.get(1)?),
        created_at: unsigned(row.get(2)?),
        updated_at: unsigned(row.get(3)?),
    })
}

fn put(
    conn: &mut Connection,
    tenant: &TenantId,
    name: &str,
    sealed: &SealedValue,
    now: u64,
    max_secrets: u32,
) -> Result<PutSecret> {
    let tx = conn.savepoint()?;
    let t = tenant.as_str();
    let existing = tx
        .prepare_cached(
            "SELECT name, version, created_at, updated_at FROM tenant_secrets
             WHERE tenant = ?1 AND name = ?2",
        )?
        .query_row(params![t, name], meta)
        .optional()?;
    let stored = match existing {
        Some(old) => {
            let new = SecretMeta {
                version: old.version + 1,
                updated_at: now.max(old.created_at),
                ..old
            };
            tx.execute(
                "UPDATE tenant_secrets SET version = ?3, updated_at = ?4, key_ref = ?5,
                     wrapped_key = ?6, nonce = ?7, ciphertext = ?8
                 WHERE tenant = ?1 AND name = ?2",
                params![
                    t,
                    name,
                    ms(new.version),
                    ms(new.updated_at),
                    sealed.key_ref,
                    sealed.wrapped_key,
                    sealed.nonce,
                    sealed.ciphertext
                ],
            )?;
            PutSecret {
                created: false,
                meta: new,
            }
        }
        None => {
            let count: i64 = tx.query_row(
                "SELECT COUNT(*) FROM tenant_secrets WHERE tenant = ?1",
                params![t],
                |row| row.get(0),
            )?;
            if count >= i64::from(max_secrets) {
                return Err(StoreError::Conflict(format!(
                    "the tenant already has the most secrets allowed (the cap is {max_secrets})"
                ))
                .into());
            }
            tx.execute(
                "INSERT INTO tenant_secrets (tenant, name, version, created_at, updated_at,
                     key_ref, wrapped_key, nonce, ciphertext)
                 VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5, ?6, ?7)",
                params![
                    t,
                    name,
                    ms(now),
                    sealed.key_ref,
                    sealed.wrapped_key,
                    sealed.nonce,
                    sealed.ciphertext
                ],
            )?;
            PutSecret {
                created: true,
                meta: SecretMeta {
                    name: name.to_owned(),
                    version: 1,
                    created_at: now,
                    updated_at: now,
                },
            }
        }
    };
    tx.commit()?;
    Ok(stored)
}

#[async_trait]
impl SecretStore for SqliteBackend {
    async fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
        now: u64,
        max_secrets: u32,
    ) -> StoreResult<PutSecret> {
        let (tenant, name, sealed) = (tenant.clone(), name.to_owned(), sealed.clone());
        self.with_conn(move |c| put(c, &tenant, &name, &sealed, now, max_secrets))
            .await
    }

    async fn get_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SecretRecord>> {
        let (tenant, name) = (tenant.clone(), name.to_owned());
        self.with_reader(move |c| -> Result<_> {
            Ok(c.prepare_cached(
                "SELECT name, version, created_at, updated_at, key_ref, wrapped_key, nonce,
                     ciphertext
                 FROM tenant_secrets WHERE tenant = ?1 AND name = ?2",
            )?
            .query_row(params![tenant.as_str(), name], |row| {
                Ok(SecretRecord {
                    tenant: tenant.clone(),
                    meta: meta(row)?,
                    sealed: SealedValue {
                        key_ref: row.get(4)?,
                        wrapped_key: row.get(5)?,
                        nonce: row.get(6)?,
                        ciphertext: row.get(7)?,
                    },
                })
            })
            .optional()?)
        })
        .await
    }

    async fn list_secrets(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<SecretMeta>> {
        let (tenant, after) = (tenant.clone(), after.unwrap_or("").to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_reader(move |c| -> Result<_> {
            let rows = c
                .prepare_cached(
                    "SELECT name, version, created_at, updated_at FROM tenant_secrets
                     WHERE tenant = ?1 AND name > ?2 ORDER BY name LIMIT ?3",
                )?
                .query_map(params![tenant.as_str(), after, limit], meta)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
    }

    async fn delete_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        let (tenant, name) = (tenant.clone(), name.to_owned());
        self.with_conn(move |c| -> Result<_> {
            Ok(c.execute(
                "DELETE FROM tenant_secrets WHERE tenant = ?1 AND name = ?2",
                params![tenant.as_str(), name],
            )? > 0)
        })
        .await
    }
}
