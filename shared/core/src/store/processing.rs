//! The supervisor's read of the store (SPEC §10): the sessions that are `processing`, found
//! through an index of them (the DynamoDB `processing` GSI; never a scan of all sessions), and
//! the sessions with pending work (the `pending` GSI: accepted runs not known finished).

use super::error::StoreResult;
use crate::session::{PendingSettle, Session};
use async_trait::async_trait;

/// Finds processing and pending sessions cheaply, for the stuck-session sweep.
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

    /// Up to `limit` sessions whose [`pending_at`](Session::pending_at) is at or before
    /// `pending_before`, oldest first (an index query: sessions without pending work are not
    /// in it). The default finds none (an index without pending work).
    async fn pending_sessions(
        &self,
        _pending_before: u64,
        _limit: usize,
    ) -> StoreResult<Vec<Session>> {
        Ok(Vec::new())
    }

    /// Applies `settle` to the session `seen` (see [`Session::settle_pending`]) in one
    /// conditional write: only if its session id, `runsAccepted`, `runsFinished` and
    /// `pendingAt` are still those of `seen`. `false`: the session moved on, nothing changed.
    async fn settle_pending(&self, _seen: &Session, _settle: PendingSettle) -> StoreResult<bool> {
        Ok(false)
    }
}
