//! Erasing a tenant (issue 24): every record the store keeps for it, its API keys included,
//! for an operator who must forget a customer (`agentlane tenants erase T`).

use super::StoreResult;
use crate::ids::TenantId;
use async_trait::async_trait;
use std::collections::BTreeMap;

/// What erasing a tenant removed: stored records by kind (`sessions`, `runs`, `events`,
/// `transcriptEntries`, `apiKeys`, ...; the kinds are the adapter's, named in camelCase).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantErasure {
    /// Records removed, by kind. Kinds with nothing removed are left out.
    pub removed: BTreeMap<String, u64>,
}

impl TenantErasure {
    /// Counts `n` more records of `kind` (nothing when `n` is 0).
    pub fn add(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.removed.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// All records removed.
    pub fn total(&self) -> u64 {
        self.removed.values().sum()
    }
}

/// Deletes everything of a tenant.
#[async_trait]
pub trait TenantEraser: Send + Sync {
    /// Deletes every record of `tenant`: sessions, runs, events, transcripts, idempotency
    /// records, queued turns, cron jobs, agents, spend, rate and slot counters, and its API
    /// keys (lookup items included), whatever their state (a running turn loses its lock and
    /// writes nothing more). Not atomic, but idempotent: run it again after a failure. Other
    /// tenants' records are never touched.
    async fn erase_tenant(&self, tenant: &TenantId) -> StoreResult<TenantErasure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erasure_counts_by_kind_and_leaves_out_empty_kinds() {
        let mut erasure = TenantErasure::default();
        erasure.add("runs", 2);
        erasure.add("events", 0);
        erasure.add("runs", 3);
        erasure.add("apiKeys", 1);
        assert_eq!(
            erasure.removed,
            BTreeMap::from([("apiKeys".to_owned(), 1), ("runs".to_owned(), 5)])
        );
        assert_eq!(erasure.total(), 6);
    }
}
