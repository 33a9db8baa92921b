//! [`ProcessingIndex`] on the embedded store: the processing sessions through a partial index
//! of them by their last progress (idle sessions are not visited), and the pending sessions
//! through a partial index on `pending_at`.

use crate::backend::SqliteBackend;
use crate::error::int;
use crate::records::{load_session, save_session};
use agentlane_core::{PendingSettle, ProcessingIndex, Session, StoreError, StoreResult};
use async_trait::async_trait;
use rusqlite::params;

/// The processing sessions that made no progress after `?1`, the longest silent first (at most
/// `?2`): a walk of `sessions_processing`.
const PROCESSING_SESSIONS: &str = "SELECT body FROM sessions
     WHERE status = 'processing' AND progress_at <= ?1
     ORDER BY progress_at
     LIMIT ?2";

/// The sessions whose pending work began waiting at or before `?1`, the oldest first (at most
/// `?2`): a walk of `sessions_pending`.
const PENDING_SESSIONS: &str = "SELECT body FROM sessions
     WHERE pending_at IS NOT NULL AND pending_at <= ?1
     ORDER BY pending_at
     LIMIT ?2";

#[async_trait]
impl ProcessingIndex for SqliteBackend {
    async fn processing_sessions(
        &self,
        progress_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_reader::<_, StoreError>(move |c| {
            let mut stmt = c.prepare_cached(PROCESSING_SESSIONS)?;
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
            let mut stmt = c.prepare_cached(PENDING_SESSIONS)?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_sweeps_walk_their_partial_index_in_order_and_never_scan_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open(&dir.path().join("db.sqlite")).unwrap();
        for (sql, index) in [
            (PROCESSING_SESSIONS, "sessions_processing"),
            (PENDING_SESSIONS, "sessions_pending"),
        ] {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan = stmt
                .query_map(params![1, 1], |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap()
                .join("\n");
            assert!(plan.contains(&format!("USING INDEX {index}")), "{plan}");
            assert!(
                !plan.contains("SCAN sessions\n") && plan != "SCAN sessions",
                "{plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "sorted by the index: {plan}");
        }
    }
}
