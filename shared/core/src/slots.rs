//! Per-tenant slots shared by every process of a deployment: the caps on a tenant's concurrent
//! SSE streams and `agent.wait` calls when those are served by many processes at once (on AWS,
//! each ingress Lambda instance serves one request at a time, so a cap kept in memory bounds
//! nothing).
//!
//! A slot is a lease: its holder keeps it by renewing it before it ends, and a holder that dies
//! without releasing it stops counting when its lease ends. So a crash leaks a slot for at most
//! one lease, never for good.
//!
//! The same store keeps fixed-window request counters ([`RateScope`]): a tenant's requests per
//! second, and the store key lookups that found no key per source address. Every process adds
//! what it admits to the window's count, so the limit holds across processes.

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

/// What a rate window counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateScope {
    /// A tenant's authenticated requests.
    Tenant(TenantId),
    /// Store key lookups from one source address (an IP address, as text) that found no key.
    KeyProbes(String),
}

impl RateScope {
    /// `tenant:{name}` or `probes:{address}`: the scope as one key.
    pub fn key(&self) -> String {
        match self {
            RateScope::Tenant(tenant) => format!("tenant:{tenant}"),
            RateScope::KeyProbes(source) => format!("probes:{source}"),
        }
    }
}

/// How much of `asked` fits under `limit` when the window's count, `asked` included, is
/// `count_after`: what was there before plus `asked` may reach `limit`, not pass it. Adds
/// beyond the limit are counted but granted nothing, so the grants of every process together
/// never pass `limit` in a window.
pub fn granted_of(count_after: u64, asked: u32, limit: u32) -> u32 {
    let before = count_after.saturating_sub(u64::from(asked));
    let room = u64::from(limit).saturating_sub(before);
    u32::try_from(room.min(u64::from(asked))).unwrap_or(asked)
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

    /// Adds `n` to the count of `scope` in the fixed window that starts at `window` (ms since
    /// the epoch) and answers the window's count after the add; `n = 0` reads it. Concurrent
    /// adds are all counted (one atomic add each, no lost update). Each window counts apart;
    /// a window's count may be dropped an hour after it starts. With [`granted_of`] the caller
    /// learns how much of `n` fits under its limit.
    async fn add_to_window(&self, scope: &RateScope, window: u64, n: u32) -> StoreResult<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_what_fits_under_the_limit() {
        // (count after the add, asked, limit) → granted
        let cases = [
            (5, 5, 10, 5),  // first claim of a window
            (10, 5, 10, 5), // exactly fills it
            (12, 5, 10, 3), // a concurrent claim took some: the rest fits
            (15, 5, 10, 0), // full before this claim
            (40, 5, 10, 0), // far past it
            (0, 0, 10, 0),  // a read grants nothing
            (1, 1, 0, 0),   // a limit of 0 grants nothing here (off is the caller's call)
            (3, 5, 10, 5),  // a count below asked (a dropped window): all of it
        ];
        for (after, asked, limit, expected) in cases {
            assert_eq!(
                granted_of(after, asked, limit),
                expected,
                "{after} {asked} {limit}"
            );
        }
    }

    #[test]
    fn scopes_are_keyed_apart() {
        let tenant = RateScope::Tenant(TenantId::new("acme"));
        let probes = RateScope::KeyProbes("acme".into());
        assert_eq!(tenant.key(), "tenant:acme");
        assert_eq!(probes.key(), "probes:acme");
    }
}
