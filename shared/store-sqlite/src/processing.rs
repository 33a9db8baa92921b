//! [`ProcessingIndex`] on the embedded store: the processing sessions, read from the session
//! bodies through an expression index on their status (idle sessions are not visited).

use crate::backend::SqliteBackend;
use crate::error::int;
use agentlane_core::{ProcessingIndex, Session, StoreError, StoreResult};
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
            let bodies = stmt
                .query_map(params![int(progress_before), limit], |row| {
                    row.get::<_, String>(0)
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut sessions = Vec::with_capacity(bodies.len());
            for body in bodies {
                sessions.push(serde_json::from_str(&body)?);
            }
            Ok(sessions)
        })
        .await
    }
}
