//! The per-tenant fire budget (`[limits.tenant] cron_fires_per_minute`): scheduled fires a
//! tenant may start per minute, as a token bucket that holds one minute's worth and refills
//! evenly. A slot that comes due with the bucket empty is recorded `skipped` (the schedule goes
//! on); a one-shot waits for room instead. Pure: the ticker keeps the buckets and the clock.
//!
//! The bucket counts in "fire-milliseconds": a fire costs 60,000 units and `n` fires per minute
//! refill `n` units per millisecond, so the arithmetic is exact in integers.

use agentlane_core::TenantId;
use std::collections::{BTreeMap, HashMap};

/// Default fires per minute per tenant.
pub const DEFAULT_FIRES_PER_MINUTE: u32 = 60;
/// Units one fire costs (one minute in milliseconds).
const FIRE_COST: u64 = 60_000;

/// The configured budgets: every tenant's, and per-tenant replacements. `0` = no limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireBudget {
    /// Fires per minute of every tenant.
    pub per_minute: u32,
    /// Replacements by tenant name.
    pub tenants: BTreeMap<String, u32>,
}

impl Default for FireBudget {
    fn default() -> Self {
        Self {
            per_minute: DEFAULT_FIRES_PER_MINUTE,
            tenants: BTreeMap::new(),
        }
    }
}

impl FireBudget {
    /// Fires per minute `tenant` may start (`0` = no limit).
    pub fn for_tenant(&self, tenant: &TenantId) -> u32 {
        self.tenants
            .get(tenant.as_str())
            .copied()
            .unwrap_or(self.per_minute)
    }
}

/// One tenant's bucket: its units at `at` (ms since epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    units: u64,
    at: u64,
}

impl Bucket {
    /// A full bucket (a minute's worth of fires) at `now`.
    pub fn full(per_minute: u32, now: u64) -> Self {
        Self {
            units: capacity(per_minute),
            at: now,
        }
    }

    /// The bucket refilled up to `now` (time never runs backwards here).
    pub fn at(self, per_minute: u32, now: u64) -> Self {
        let elapsed = now.saturating_sub(self.at);
        Self {
            units: self
                .units
                .saturating_add(elapsed.saturating_mul(u64::from(per_minute)))
                .min(capacity(per_minute)),
            at: now.max(self.at),
        }
    }

    /// Whether a fire fits now.
    pub fn has_room(self, per_minute: u32, now: u64) -> bool {
        per_minute == 0 || self.at(per_minute, now).units >= FIRE_COST
    }

    /// The bucket after one fire at `now` (empty stays empty).
    pub fn spend(self, per_minute: u32, now: u64) -> Self {
        let b = self.at(per_minute, now);
        Self {
            units: b.units.saturating_sub(FIRE_COST),
            ..b
        }
    }
}

fn capacity(per_minute: u32) -> u64 {
    u64::from(per_minute).saturating_mul(FIRE_COST)
}

/// Every tenant's bucket under a [`FireBudget`].
#[derive(Debug, Clone, Default)]
pub struct FireBuckets {
    budget: FireBudget,
    buckets: HashMap<TenantId, Bucket>,
}

impl FireBuckets {
    /// Full buckets under `budget`.
    pub fn new(budget: FireBudget) -> Self {
        Self {
            budget,
            buckets: HashMap::new(),
        }
    }

    /// `None` when `tenant` may fire now, else its budget (fires per minute), which is spent.
    pub fn spent(&self, tenant: &TenantId, now: u64) -> Option<u32> {
        let n = self.budget.for_tenant(tenant);
        let bucket = self
            .buckets
            .get(tenant)
            .copied()
            .unwrap_or_else(|| Bucket::full(n, now));
        (!bucket.has_room(n, now)).then_some(n)
    }

    /// Takes one fire of `tenant` at `now` out of its bucket.
    pub fn spend(&mut self, tenant: &TenantId, now: u64) {
        let n = self.budget.for_tenant(tenant);
        if n == 0 {
            return;
        }
        let bucket = self
            .buckets
            .get(tenant)
            .copied()
            .unwrap_or_else(|| Bucket::full(n, now));
        self.buckets.insert(tenant.clone(), bucket.spend(n, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fires a tenant of budget `n` gets when it asks at each of `asks` (ms), in order.
    fn granted(n: u32, asks: &[u64]) -> usize {
        let mut buckets = FireBuckets::new(FireBudget {
            per_minute: n,
            tenants: BTreeMap::new(),
        });
        let t = TenantId::new("t");
        let mut fired = 0;
        for &at in asks {
            if buckets.spent(&t, at).is_none() {
                buckets.spend(&t, at);
                fired += 1;
            }
        }
        fired
    }

    #[test]
    fn a_tenant_fires_at_most_its_budget_a_minute_after_a_full_bucket() {
        let burst: Vec<u64> = (0..100).map(|i| 1_000 + i).collect();
        let every_second = |secs: u64, per: u64| -> Vec<u64> {
            (0..secs)
                .flat_map(|s| (0..per).map(move |_| 1_000 + s * 1_000))
                .collect()
        };
        // (budget, asks, fires granted)
        let cases: Vec<(u32, Vec<u64>, usize)> = vec![
            // A burst takes the full bucket, no more.
            (60, burst.clone(), 60),
            (5, burst.clone(), 5),
            // 0 = no limit.
            (0, burst, 100),
            // 20 jobs every second for a minute under 60/min: 60 at once, then one a second.
            (60, every_second(60, 20), 60 + 59),
            // 10/min, 10 jobs every second for 30 s: 10 at once, then 5 more over 30 s.
            (10, every_second(30, 10), 10 + 4),
            // Below the budget nothing is skipped.
            (60, every_second(120, 1), 120),
            // An idle hour refills the bucket only to its capacity.
            (
                3,
                vec![0, 1, 2, 3, 3_600_000, 3_600_001, 3_600_002, 3_600_003],
                6,
            ),
        ];
        for (n, asks, want) in cases {
            assert_eq!(granted(n, &asks), want, "budget {n}, {} asks", asks.len());
        }
    }

    #[test]
    fn a_spent_budget_names_itself_and_a_tenant_override_wins() {
        let mut buckets = FireBuckets::new(FireBudget {
            per_minute: 1,
            tenants: BTreeMap::from([("big".to_owned(), 0), ("small".to_owned(), 2)]),
        });
        let (plain, big, small) = (
            TenantId::new("plain"),
            TenantId::new("big"),
            TenantId::new("small"),
        );
        for t in [&plain, &big, &small, &small] {
            assert_eq!(buckets.spent(t, 0), None);
            buckets.spend(t, 0);
        }
        assert_eq!(buckets.spent(&plain, 0), Some(1));
        assert_eq!(buckets.spent(&small, 0), Some(2));
        assert_eq!(buckets.spent(&big, 0), None);
        // One fire's worth comes back after 60 s / n.
        assert_eq!(buckets.spent(&plain, 59_999), Some(1));
        assert_eq!(buckets.spent(&plain, 60_000), None);
        assert_eq!(buckets.spent(&small, 30_000), None);
    }
}
