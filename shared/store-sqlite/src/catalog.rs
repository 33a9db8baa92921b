//! [`SessionCatalog`] on the embedded store: a tenant's sessions through an index on their
//! activity time, a session's runs through one on their key and seq (never a scan of the
//! table), and a session's deletion in one transaction.

use crate::backend::SqliteBackend;
use crate::error::{Result, int};
use crate::records::{decode_run, load_session};
use agentlane_core::{
    Lane, PageBudget, Run, RunPage, RunStatus, Session, SessionCatalog, SessionCursor,
    SessionFilter, SessionKey, SessionPage, SessionRemoval, StoreError, StoreResult, TenantId,
};
use async_trait::async_trait;
use rusqlite::{Connection, params};

/// The catalog's indexes (issue 24): sessions by tenant and activity, runs by session key and
/// their place in its order. Rebuilt on columns by [`crate::records::SCHEMA`] (issue 26).
pub(crate) const SCHEMA: &str = "
CREATE INDEX sessions_by_activity
    ON sessions (tenant, json_extract(body, '$.updatedAt') DESC, session_key DESC);
CREATE INDEX runs_by_session
    ON runs (tenant, json_extract(body, '$.sessionKey'), json_extract(body, '$.sessionSeq') DESC);
";

/// A page of a tenant's sessions after a cursor (`?2`, `?3`), filtered by agent (`?4`) and
/// status (`?5`), newest activity first: a walk of `sessions_by_activity`.
const LIST_SESSIONS: &str = "SELECT body FROM sessions
     WHERE tenant = ?1
       AND (updated_at < ?2 OR (updated_at = ?2 AND session_key < ?3))
       AND (?4 IS NULL OR agent_id = ?4)
       AND (?5 IS NULL OR status = ?5)
     ORDER BY updated_at DESC, session_key DESC
     LIMIT ?6";

/// A page of a session key's runs below a seq (`?3`), filtered by status (`?4`), newest first:
/// a walk of `runs_by_session`.
const LIST_RUNS: &str = "SELECT body, abort_requested, action_answer FROM runs
     WHERE tenant = ?1 AND session_key = ?2 AND session_seq < ?3
       AND (?4 IS NULL OR status = ?4)
     ORDER BY session_seq DESC
     LIMIT ?5";

#[async_trait]
impl SessionCatalog for SqliteBackend {
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: &SessionFilter,
        after: Option<&SessionCursor>,
        budget: PageBudget,
    ) -> StoreResult<SessionPage> {
        let (tenant, filter, after) = (tenant.clone(), filter.clone(), after.cloned());
        self.with_reader(move |c| list_sessions(c, &tenant, &filter, after.as_ref(), budget))
            .await
    }

    async fn list_session_runs(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        status: Option<RunStatus>,
        before: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<RunPage> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_reader(move |c| list_runs(c, &tenant, &key, status, before, budget))
            .await
    }

    async fn delete_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        now: u64,
    ) -> StoreResult<Option<SessionRemoval>> {
        let (tenant, key) = (tenant.clone(), key.clone());
        self.with_conn_changing_queue(move |c| delete_session(c, &tenant, &key, now))
            .await
    }
}

/// The text of column 0 of `row`, measured where SQLite holds it.
fn body_of<'r>(row: &'r rusqlite::Row<'_>) -> Result<&'r str> {
    row.get_ref(0)?.as_str().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
            .into()
    })
}

fn list_sessions(
    conn: &Connection,
    tenant: &TenantId,
    filter: &SessionFilter,
    after: Option<&SessionCursor>,
    budget: PageBudget,
) -> Result<SessionPage> {
    let mut stmt = conn.prepare_cached(LIST_SESSIONS)?;
    // Without a cursor: everything sorts before (i64::MAX, any key).
    let (at, key) = match after {
        Some(c) => (int(c.updated_at), c.session_key.as_str().to_owned()),
        None => (i64::MAX, String::new()),
    };
    let mut rows = stmt.query(params![
        tenant.as_str(),
        at,
        key,
        filter.agent_id,
        filter.status.map(|s| s.as_str()),
        i64::try_from(budget.count).unwrap_or(i64::MAX),
    ])?;
    let mut tally = budget.tally();
    let mut page = SessionPage::default();
    while !tally.is_full() {
        let Some(row) = rows.next()? else { break };
        let body = body_of(row)?;
        if !tally.admit(body.len()) {
            break;
        }
        page.sessions.push(serde_json::from_str(body)?);
    }
    if tally.is_full() || rows.next()?.is_some() {
        page.next = page.sessions.last().map(SessionCursor::after);
    }
    Ok(page)
}

fn list_runs(
    conn: &Connection,
    tenant: &TenantId,
    key: &SessionKey,
    status: Option<RunStatus>,
    before: Option<u64>,
    budget: PageBudget,
) -> Result<RunPage> {
    let mut stmt = conn.prepare_cached(LIST_RUNS)?;
    let mut rows = stmt.query(params![
        tenant.as_str(),
        key.as_str(),
        before.map_or(i64::MAX, int),
        status.map(RunStatus::as_str),
        i64::try_from(budget.count).unwrap_or(i64::MAX),
    ])?;
    let mut tally = budget.tally();
    let mut page = RunPage::default();
    while !tally.is_full() {
        let Some(row) = rows.next()? else { break };
        let body = body_of(row)?;
        if !tally.admit(body.len()) {
            break;
        }
        let answer: Option<String> = row.get(2)?;
        page.runs
            .push(decode_run(body, row.get(1)?, answer.as_deref())?);
    }
    if tally.is_full() || rows.next()?.is_some() {
        page.next = page.runs.last().map(|r| r.session_seq);
    }
    Ok(page)
}

/// Every run of the key (all its session ids).
fn runs_of(conn: &Connection, tenant: &TenantId, key: &SessionKey) -> Result<Vec<Run>> {
    let mut stmt = conn.prepare_cached(
        "SELECT body, abort_requested, action_answer FROM runs
         WHERE tenant = ?1 AND session_key = ?2 AND session_seq < ?3",
    )?;
    let mut rows = stmt.query(params![tenant.as_str(), key.as_str(), i64::MAX])?;
    let mut runs = Vec::new();
    while let Some(row) = rows.next()? {
        let answer: Option<String> = row.get(2)?;
        runs.push(decode_run(body_of(row)?, row.get(1)?, answer.as_deref())?);
    }
    Ok(runs)
}

fn delete_session(
    conn: &mut Connection,
    tenant: &TenantId,
    key: &SessionKey,
    now: u64,
) -> Result<Option<SessionRemoval>> {
    let tx = conn.savepoint()?;
    let Some(session) = load_session(&tx, tenant, key)? else {
        return Ok(None);
    };
    if session.lock_is_live(now) {
        return Err(StoreError::Busy.into());
    }
    let removed = remove_session(&tx, &session)?;
    tx.commit()?;
    Ok(Some(removed))
}

/// Deletes `session` and everything of it inside the caller's transaction: its runs and their
/// events, acked lane messages and idempotency records, the transcript of every session id,
/// pending steers, queued and dead lane messages, and the session row.
pub(crate) fn remove_session(tx: &Connection, session: &Session) -> Result<SessionRemoval> {
    let (tenant, key) = (&session.tenant, &session.session_key);
    let runs = runs_of(tx, tenant, key)?;
    let mut removed = SessionRemoval::default();
    let mut session_ids = vec![session.session_id.clone()];
    for run in &runs {
        if !session_ids.contains(&run.session_id) {
            session_ids.push(run.session_id.clone());
        }
        let t = tenant.as_str();
        removed.events += count(tx.execute(
            "DELETE FROM events WHERE tenant = ?1 AND run_id = ?2",
            params![t, run.run_id.as_str()],
        )?);
        removed.runs += count(tx.execute(
            "DELETE FROM runs WHERE tenant = ?1 AND run_id = ?2",
            params![t, run.run_id.as_str()],
        )?);
        removed.other += forget_lane_messages(tx, run.run_id.as_str())?;
        if let Some(idem) = &run.idempotency_key {
            removed.other += count(tx.execute(
                "DELETE FROM idempotency WHERE tenant = ?1 AND idem_key = ?2 AND run_id = ?3",
                params![t, idem, run.run_id.as_str()],
            )?);
        }
    }
    for session_id in &session_ids {
        removed.transcript_entries += count(tx.execute(
            "DELETE FROM transcript WHERE tenant = ?1 AND session_id = ?2",
            params![tenant.as_str(), session_id.as_str()],
        )?);
    }
    removed.other += count(tx.execute(
        "DELETE FROM pending_steers WHERE tenant = ?1 AND session_key = ?2",
        params![tenant.as_str(), key.as_str()],
    )?);
    let lane = Lane::for_session(tenant, key);
    for table in ["lane_pending", "lane_dead"] {
        removed.other += count(tx.execute(
            &format!("DELETE FROM {table} WHERE lane = ?1"),
            params![lane.as_str()],
        )?);
    }
    removed.other += count(tx.execute(
        "DELETE FROM sessions WHERE tenant = ?1 AND session_key = ?2",
        params![tenant.as_str(), key.as_str()],
    )?);
    Ok(removed)
}

/// Forgets the acked lane messages of the run: their dedup ids are the run id, or start with
/// it and `:` (a redrive, a resume, ...). A range on the key, so `_` in ids needs no escaping.
pub(crate) fn forget_lane_messages(conn: &Connection, run_id: &str) -> Result<u64> {
    let n = conn.execute(
        "DELETE FROM lane_done
         WHERE dedup_id = ?1 OR (dedup_id >= ?1 || ':' AND dedup_id < ?1 || ';')",
        params![run_id],
    )?;
    Ok(count(n))
}

fn count(rows: usize) -> u64 {
    u64::try_from(rows).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The query plan of `sql` (one line per step).
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let count = stmt.parameter_count();
        let nulls = vec![rusqlite::types::Null; count];
        stmt.query_map(rusqlite::params_from_iter(nulls), |row| {
            row.get::<_, String>(3)
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap()
        .join("\n")
    }

    #[test]
    fn the_lists_walk_their_index_and_never_scan_a_table() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open(&dir.path().join("db.sqlite")).unwrap();
        let cases = [
            (LIST_SESSIONS, "sessions_by_activity", "sessions"),
            (LIST_RUNS, "runs_by_session", "runs"),
        ];
        for (sql, index, table) in cases {
            let plan = plan(&conn, sql);
            assert!(plan.contains(&format!("USING INDEX {index}")), "{plan}");
            assert!(!plan.contains(&format!("SCAN {table}")), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "sorted by the index: {plan}");
        }
    }
}
