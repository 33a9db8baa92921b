//! Per-tenant slots shared by every process of a deployment: the caps on a tenant's concurrent
//! SSE streams and `agent.wait` calls when those are served by many processes at once (on AWS,
//! each ingress Lambda instance serves one request at a time, so a cap kept in memory bounds
//! nothing).
//!
//! A slot is a lease: its holder keeps it by renewing it before it ends, and a holder that dies
//! without releasing it stops counting when its lease ends. So a crash leaks a slot for at most
//! one lease, never for good.

use crate::ids::TenantId;
use crate::store::StoreResult;
use async_trait::async_trait;

/// What a slot is for; each kind has its own cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlotKind {
    /// An open SSE event stream.
    Stream,
    /// A pending `agent.wait`.
    Wait,
}

impl SlotKind {
    /// `stream` or `wait`.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotKind::Stream => "stream",
            SlotKind::Wait => "wait",
        }
    }
}

/// Where shared slots are kept: the same database or table as the sessions.
#[async_trait]
pub trait SlotStore: Send + Sync + 'static {
    /// Takes a slot of `kind` for `holder`, leased until `until` (ms), when the tenant holds
    /// fewer than `cap` live slots of that kind at `now` (leases ended by `now` do not count
    /// and are dropped). `false`: the cap is reached. Taking a slot `holder` already holds only
    /// moves its lease. Concurrent takes never let the tenant exceed `cap`.
    async fn acquire_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        cap: u32,
        now: u64,
        until: u64,
    ) -> StoreResult<bool>;

    /// Moves `holder`'s lease to `until`. `false` when it holds no slot any more (released, or
    /// its lease ended and another take dropped it).
    async fn renew_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        until: u64,
    ) -> StoreResult<bool>;

    /// Frees `holder`'s slot; nothing when it holds none.
    async fn release_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
    ) -> StoreResult<()>;
}
