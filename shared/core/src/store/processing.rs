//! The supervisor's read of the store (SPEC §10): the sessions that are `processing`, found
//! through an index of them (the DynamoDB `processing` GSI; never a scan of all sessions).

use super::error::StoreResult;
use crate::session::Session;
use async_trait::async_trait;

/// Finds processing sessions cheaply, for the stuck-session sweep.
#[async_trait]
pub trait ProcessingIndex: Send + Sync {
    /// Up to `limit` sessions whose status is `processing` and whose last progress (else their
    /// last update) is at or before `progress_before` (ms since the epoch), least recently
    /// progressed first. Idle sessions cost nothing: they are not in the index.
    async fn processing_sessions(
        &self,
        progress_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>>;
}
