//! [`KeyStore`] for `SqliteBackend`: one `api_keys` table keyed by the key id, with an index on
//! the tenant for listing. Only the SHA-256 of a key is stored, never the key.

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::api_key::{ApiKeyRecord, KeyStore};
use agentlane_core::{StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};

/// Migration 5: the API key table.
pub(crate) const SCHEMA: &str = "
CREATE TABLE api_keys (
    key_id     TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    hash       TEXT NOT NULL,
    label      TEXT,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) WITHOUT ROWID;
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, key_id);
";

const COLUMNS: &str = "key_id, tenant, hash, label, created_at, revoked_at";

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn record(row: &Row<'_>) -> rusqlite::Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        key_id: row.get(0)?,
        tenant: TenantId::new(row.get::<_, String>(1)?),
        hash: row.get(2)?,
        label: row.get(3)?,
        created_at: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
        revoked_at: row
            .get::<_, Option<i64>>(5)?
            .map(|v| u64::try_from(v).unwrap_or(0)),
    })
}

#[async_trait]
impl KeyStore for SqliteBackend {
    async fn create_key(&self, record: &ApiKeyRecord) -> StoreResult<()> {
        let r = record.clone();
        self.with_conn(move |c| -> Result<()> {
            let inserted = c.execute(
                "INSERT INTO api_keys (key_id, tenant, hash, label, created_at, revoked_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                params![
                    r.key_id,
                    r.tenant.as_str(),
                    r.hash,
                    r.label,
                    ms(r.created_at),
                    r.revoked_at.map(ms)
                ],
            )?;
            if inserted == 0 {
                return Err(StoreError::Conflict(format!("API key {} exists", r.key_id)).into());
            }
            Ok(())
        })
        .await
    }

    async fn find_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let key_id = key_id.to_owned();
        self.with_conn(move |c| -> Result<_> {
            Ok(
                c.prepare_cached(&format!("SELECT {COLUMNS} FROM api_keys WHERE key_id = ?1"))?
                    .query_row(params![key_id], record)
                    .optional()?,
            )
        })
        .await
    }

    async fn list_keys(&self, tenant: &TenantId) -> StoreResult<Vec<ApiKeyRecord>> {
        let tenant = tenant.clone();
        self.with_conn(move |c| -> Result<_> {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM api_keys WHERE tenant = ?1 ORDER BY key_id"
            ))?;
            let rows = stmt
                .query_map(params![tenant.as_str()], record)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
    }

    async fn revoke_key(&self, tenant: &TenantId, key_id: &str, at: u64) -> StoreResult<bool> {
        let (tenant, key_id) = (tenant.clone(), key_id.to_owned());
        self.with_conn(move |c| -> Result<_> {
            let changed = c.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?3)
                 WHERE tenant = ?1 AND key_id = ?2",
                params![tenant.as_str(), key_id, ms(at)],
            )?;
            Ok(changed > 0)
        })
        .await
    }
}
