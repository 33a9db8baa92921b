//! [`SlotStore`] for `SqliteBackend`: one row per held slot. Every take runs on the writer
//! thread in one savepoint (drop the tenant's ended leases, count, insert), so takes are
//! serialized and the cap is exact.
//!
//! Rate windows: one row per scope and window, counted up on the writer thread; a scope's first
//! add in a new window drops every window that started over an hour before it.

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::{RateScope, SlotKind, SlotStore, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::OptionalExtension;
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

/// Migration 13: rate windows.
pub(crate) const RATE_SCHEMA: &str = "
CREATE TABLE rate_windows (
    scope  TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (scope, window_start)
) WITHOUT ROWID;
CREATE INDEX rate_windows_by_window ON rate_windows (window_start);
";

/// How long a window's count is kept after the window starts (ms).
const RATE_WINDOW_KEPT_MS: u64 = 3_600_000;

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

    async fn add_to_window(&self, scope: &RateScope, window: u64, n: u32) -> StoreResult<u64> {
        let scope = scope.key();
        self.with_conn(move |c| -> Result<u64> {
            let tx = c.savepoint()?;
            let count: Option<i64> = tx
                .query_row(
                    "UPDATE rate_windows SET count = count + ?3 WHERE scope = ?1 AND window_start = ?2
                     RETURNING count",
                    params![scope, ms(window), i64::from(n)],
                    |row| row.get(0),
                )
                .optional()?;
            let count = match count {
                Some(count) => count,
                None => {
                    tx.execute(
                        "DELETE FROM rate_windows WHERE window_start < ?1",
                        params![ms(window.saturating_sub(RATE_WINDOW_KEPT_MS))],
                    )?;
                    tx.execute(
                        "INSERT INTO rate_windows (scope, window_start, count) VALUES (?1, ?2, ?3)",
                        params![scope, ms(window), i64::from(n)],
                    )?;
                    i64::from(n)
                }
            };
            tx.commit()?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
        .await
    }
}
