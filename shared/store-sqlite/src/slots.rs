//! [`SlotStore`] for `SqliteBackend`: one row per held slot. Every take runs on the writer
//! thread in one savepoint (drop the tenant's ended leases, count, insert), so takes are
//! serialized and the cap is exact.

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::{SlotKind, SlotStore, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::params;

/// Migration 9: held slots.
pub(crate) const SCHEMA: &str = "
CREATE TABLE tenant_slots (
    tenant TEXT NOT NULL,
    kind   TEXT NOT NULL,
    holder TEXT NOT NULL,
    until  INTEGER NOT NULL,
    PRIMARY KEY (tenant, kind, holder)
) WITHOUT ROWID;
";

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[async_trait]
impl SlotStore for SqliteBackend {
    async fn acquire_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        cap: u32,
        now: u64,
        until: u64,
    ) -> StoreResult<bool> {
        let (tenant, holder) = (tenant.as_str().to_owned(), holder.to_owned());
        self.with_conn(move |c| -> Result<bool> {
            let tx = c.savepoint()?;
            tx.execute(
                "DELETE FROM tenant_slots WHERE tenant = ?1 AND kind = ?2 AND until <= ?3",
                params![tenant, kind.as_str(), ms(now)],
            )?;
            let others: i64 = tx.query_row(
                "SELECT count(*) FROM tenant_slots WHERE tenant = ?1 AND kind = ?2 AND holder <> ?3",
                params![tenant, kind.as_str(), holder],
                |row| row.get(0),
            )?;
            let granted = others < i64::from(cap);
            if granted {
                tx.execute(
                    "INSERT INTO tenant_slots (tenant, kind, holder, until) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (tenant, kind, holder) DO UPDATE SET until = excluded.until",
                    params![tenant, kind.as_str(), holder, ms(until)],
                )?;
            }
            tx.commit()?;
            Ok(granted)
        })
        .await
    }

    async fn renew_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        until: u64,
    ) -> StoreResult<bool> {
        let (tenant, holder) = (tenant.as_str().to_owned(), holder.to_owned());
        self.with_conn(move |c| -> Result<bool> {
            let changed = c.execute(
                "UPDATE tenant_slots SET until = ?4 WHERE tenant = ?1 AND kind = ?2 AND holder = ?3",
                params![tenant, kind.as_str(), holder, ms(until)],
            )?;
            Ok(changed > 0)
        })
        .await
    }

    async fn release_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
    ) -> StoreResult<()> {
        let (tenant, holder) = (tenant.as_str().to_owned(), holder.to_owned());
        self.with_conn(move |c| -> Result<()> {
            c.execute(
                "DELETE FROM tenant_slots WHERE tenant = ?1 AND kind = ?2 AND holder = ?3",
                params![tenant, kind.as_str(), holder],
            )?;
            Ok(())
        })
        .await
    }
}
