//! `agent.wait`: poll the run record with a growing backoff until it is terminal or the wait's
//! deadline passes. Waiting never changes the run.

use crate::error::ApiError;
use agentlane_core::{HistoryReader, Run, RunId, StoreError, TenantId};
use std::time::Duration;
use tokio::time::Instant;

/// First pause between two reads of the run.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(25);
/// Longest pause between two reads of the run.
pub const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// The run once terminal, or as last read when `timeout` ends first. `NotFound` when the tenant
/// has no such run.
pub async fn wait_for_run(
    store: &dyn HistoryReader,
    tenant: &TenantId,
    run_id: &RunId,
    timeout: Duration,
) -> Result<Run, ApiError> {
    let deadline = Instant::now() + timeout;
    let mut run = store
        .get_run(tenant, run_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {run_id}")))?;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if run.status.is_terminal() {
            return Ok(run);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(run);
        }
        tokio::time::sleep(backoff.min(deadline - now)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        match store.get_run(tenant, run_id).await {
            Ok(Some(latest)) => run = latest,
            Ok(None) => return Err(ApiError::not_found(format!("run {run_id}"))),
            // A throttled read is retried at the next tick; the deadline still holds.
            Err(StoreError::Throttled(reason)) => {
                tracing::debug!(%reason, "run read throttled while waiting");
            }
            Err(other) => return Err(other.into()),
        }
    }
}
