//! [`SessionRetention`] on the embedded store: the tenants are the distinct `tenant`s of the
//! sessions table (a walk of its primary key, no registry needed), a tenant's stale sessions a
//! walk of `sessions_by_activity` from its oldest end, and a session expires in one transaction
//! that reads it, applies the rule and deletes it.

use crate::backend::SqliteBackend;
use crate::catalog::remove_session;
use crate::error::{Result, int};
use crate::records::load_session;
use agentlane_core::store::{Verdict, verdict};
use agentlane_core::{
    Expiry, Session, SessionKey, SessionRetention, StoreResult, TenantId, TenantPage,
};
use async_trait::async_trait;
use rusqlite::{Connection, params};
use std::time::Duration;

/// The next tenants with sessions after `?1`, in name order: one seek of the primary key each.
const LIST_TENANTS: &str = "SELECT DISTINCT tenant FROM sessions WHERE tenant > ?1
     ORDER BY tenant LIMIT ?2";

/// A tenant's sessions last active before `?2`, oldest first: `sessions_by_activity` walked
/// from its oldest end.
const STALE_SESSIONS: &str = "SELECT body FROM sessions
     WHERE tenant = ?1 AND updated_at < ?2
     ORDER BY updated_at ASC, session_key ASC
     LIMIT ?3";

#[async_trait]
impl SessionRetention for SqliteBackend {
    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<TenantPage> {
        let after = after.map(|t| t.as_str().to_owned()).unwrap_or_default();
        self.with_reader(move |c| list_tenants(c, &after, limit))
            .await
    }

    async fn stale_sessions(
        &self,
        tenant: &TenantId,
        cutoff: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        let tenant = tenant.clone();
        self.with_reader(move |c| stale_sessions(c, &tenant, cutoff, limit))
            .await
    }

    async fn expire_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        retention: Duration,
        now: u64,
    ) -> StoreResult<Expiry> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_conn_changing_queue(move |c| expire(c, &tenant, &key, retention, now))
            .await
    }
}

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn list_tenants(conn: &Connection, after: &str, limit: usize) -> Result<TenantPage> {
    let mut stmt = conn.prepare_cached(LIST_TENANTS)?;
    let tenants: Vec<TenantId> = stmt
        .query_map(params![after, limit_of(limit)], |row| {
            row.get::<_, String>(0)
        })?
        .map(|t| t.map(TenantId::new))
        .collect::<rusqlite::Result<_>>()?;
    let next = (tenants.len() >= limit)
        .then(|| tenants.last().cloned())
        .flatten();
    Ok(TenantPage { tenants, next })
}

fn stale_sessions(
    conn: &Connection,
    tenant: &TenantId,
    cutoff: u64,
    limit: usize,
) -> Result<Vec<Session>> {
    let mut stmt = conn.prepare_cached(STALE_SESSIONS)?;
    let mut rows = stmt.query(params![tenant.as_str(), int(cutoff), limit_of(limit)])?;
    let mut sessions = Vec::new();
    while let Some(row) = rows.next()? {
        let body: String = row.get(0)?;
        sessions.push(serde_json::from_str(&body)?);
    }
    Ok(sessions)
}

/// Reads the session, applies the rule and deletes it in one transaction: nothing can be
/// accepted or locked between the verdict and the deletion.
fn expire(
    conn: &mut Connection,
    tenant: &TenantId,
    key: &SessionKey,
    retention: Duration,
    now: u64,
) -> Result<Expiry> {
    let tx = conn.savepoint()?;
    let Some(session) = load_session(&tx, tenant, key)? else {
        return Ok(Expiry::Gone);
    };
    match verdict(&session, Some(retention), now) {
        Verdict::Expired => {}
        kept => return Ok(Expiry::Kept(kept)),
    }
    let removed = remove_session(&tx, &session)?;
    tx.commit()?;
    Ok(Expiry::Removed(removed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_retention_reads_walk_an_index_and_never_scan_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open(&dir.path().join("db.sqlite")).unwrap();
        for sql in [LIST_TENANTS, STALE_SESSIONS] {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
            let plan = stmt
                .query_map(rusqlite::params_from_iter(nulls), |row| {
                    row.get::<_, String>(3)
                })
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap()
                .join("\n");
            assert!(plan.contains("USING"), "{plan}");
            assert!(
                !plan.contains("SCAN sessions\n") && plan != "SCAN sessions",
                "{plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "sorted by the index: {plan}");
        }
    }
}
