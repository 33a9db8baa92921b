//! [`ProcessingIndex`] on the embedded store: the processing sessions, read from the session
//! bodies through an expression index on their status (idle sessions are not visited), and the
//! pending sessions through a partial index on `pendingAt`.

use crate::backend::SqliteBackend;
use crate::error::int;
use crate::records::{load_session, save_session};
use agentlane_core::{PendingSettle, ProcessingIndex, Session, StoreError, StoreResult};
use async_trait::async_trait;
use rusqlite::params;

#[async_trait]
impl ProcessingIndex for SqliteBackend {
    async fn processing_sessions(
        &self,
        progress_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_reader::<_, StoreError>(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT body FROM sessions
                 WHERE json_extract(body, '$.status') = 'processing'
                   AND COALESCE(json_extract(body, '$.lastProgressAt'),
                                json_extract(body, '$.updatedAt')) <= ?1
                 ORDER BY COALESCE(json_extract(body, '$.lastProgressAt'),
                                   json_extract(body, '$.updatedAt'))
                 LIMIT ?2",
            )?;
            sessions_of(&mut stmt, int(progress_before), limit)
        })
        .await
    }

    async fn pending_sessions(
        &self,
        pending_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_reader::<_, StoreError>(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT body FROM sessions
                 WHERE json_extract(body, '$.pendingAt') IS NOT NULL
                   AND json_extract(body, '$.pendingAt') <= ?1
                 ORDER BY json_extract(body, '$.pendingAt')
                 LIMIT ?2",
            )?;
            sessions_of(&mut stmt, int(pending_before), limit)
        })
        .await
    }

    async fn settle_pending(&self, seen: &Session, settle: PendingSettle) -> StoreResult<bool> {
        let seen = seen.clone();
        self.with_conn::<_, StoreError>(move |conn| {
            let tx = conn.savepoint()?;
            let Some(mut session) = load_session(&tx, &seen.tenant, &seen.session_key)? else {
                return Ok(false);
            };
            let unchanged = session.session_id == seen.session_id
                && session.runs_accepted == seen.runs_accepted
                && session.runs_finished == seen.runs_finished
                && session.pending_at == seen.pending_at;
            if !unchanged {
                return Ok(false);
            }
            session.settle_pending(settle);
            save_session(&tx, &session)?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }
}

/// The sessions whose bodies `stmt` selects, given its two parameters (a time bound and a
/// limit).
fn sessions_of(
    stmt: &mut rusqlite::Statement<'_>,
    before: i64,
    limit: i64,
) -> crate::error::Result<Vec<Session>> {
    let bodies = stmt
        .query_map(params![before, limit], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    bodies
        .iter()
        .map(|body| Ok(serde_json::from_str(body)?))
        .collect()
}
