//! [`TenantEraser`] on the embedded store: one transaction deletes the tenant's rows from
//! every table that keeps them (by their `tenant` column, a rate scope, or a lane name).

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::{RateScope, StoreResult, TenantEraser, TenantErasure, TenantId};
use async_trait::async_trait;
use rusqlite::{Connection, params};

/// The tables with a `tenant` column, by the kind their rows count as.
const TENANT_TABLES: &[(&str, &str)] = &[
    ("sessions", "sessions"),
    ("runs", "runs"),
    ("events", "events"),
    ("transcript", "transcriptEntries"),
    ("idempotency", "idempotencyKeys"),
    ("pending_steers", "pendingSteers"),
    ("cron_jobs", "cronJobs"),
    ("cron_retired", "cronRetiredSessions"),
    ("tenant_slots", "slots"),
    ("agents", "agents"),
    ("agent_versions", "agentVersions"),
    ("api_keys", "apiKeys"),
    ("spend_periods", "spendPeriods"),
    ("spend_groups", "spendGroups"),
    ("spend_holds", "spendHolds"),
    ("tenant_secrets", "secrets"),
];

#[async_trait]
impl TenantEraser for SqliteBackend {
    async fn erase_tenant(&self, tenant: &TenantId) -> StoreResult<TenantErasure> {
        let tenant = tenant.clone();
        self.with_conn_changing_queue(move |c| erase(c, &tenant))
            .await
    }
}

fn erase(conn: &mut Connection, tenant: &TenantId) -> Result<TenantErasure> {
    let tx = conn.savepoint()?;
    let mut erasure = TenantErasure::default();
    let t = tenant.as_str();
    let run_ids: Vec<String> = tx
        .prepare("SELECT run_id FROM runs WHERE tenant = ?1")?
        .query_map(params![t], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for run_id in &run_ids {
        erasure.add(
            "ackedTurns",
            crate::catalog::forget_lane_messages(&tx, run_id)?,
        );
    }
    for (table, kind) in TENANT_TABLES {
        let n = tx.execute(
            &format!("DELETE FROM {table} WHERE tenant = ?1"),
            params![t],
        )?;
        erasure.add(kind, count(n));
    }
    let scope = RateScope::Tenant(tenant.clone()).key();
    let n = tx.execute("DELETE FROM rate_windows WHERE scope = ?1", params![scope])?;
    erasure.add("rateWindows", count(n));
    // Lanes are `{tenant}/{sessionKey}` (tenant names hold no `/`).
    let prefix = format!("{t}/");
    for (table, kind) in [
        ("lane_pending", "queuedTurns"),
        ("lane_dead", "deadLetters"),
    ] {
        let n = tx.execute(
            &format!("DELETE FROM {table} WHERE substr(lane, 1, length(?1)) = ?1"),
            params![prefix],
        )?;
        erasure.add(kind, count(n));
    }
    tx.commit()?;
    Ok(erasure)
}

fn count(rows: usize) -> u64 {
    u64::try_from(rows).unwrap_or(u64::MAX)
}
