//! The retention sweep (issue 24): each tenant with a retention loses the sessions whose last
//! activity is older than it, oldest first, with everything of them — never one with a queued
//! or running turn (the store re-checks the rule under its own condition).
//!
//! A pass runs at most every [`RetentionPolicy::pass_interval`] (a minute with real
//! retentions), however often the supervisor sweeps. It is bounded ([`RetentionBudget`]): at
//! most so many tenants and so many sessions looked at; the next pass resumes where this one stopped (the tenant it was on, if it still
//! deleted something there, else the next one), and after the last tenant starts over.
//! The tenants come from the store's registry ([`SessionRetention::list_tenants`]) when every
//! tenant has a retention, or only from the policy's named tenants when only they have one.

use agentlane_core::store::{Verdict, cutoff};
use agentlane_core::{Expiry, RetentionPolicy, SessionRetention, StoreResult, TenantId, metrics};
use serde::Serialize;
use std::sync::{Arc, Mutex, PoisonError};

/// Counter: sessions the retention sweep deleted, by `tenant`.
pub const SESSIONS_EXPIRED: &str = "sessions_expired";

/// How much one pass may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionBudget {
    /// Tenants looked at (one index query each).
    pub tenants: usize,
    /// Stale sessions looked at (each expired one costs its deletion).
    pub sessions: usize,
}

impl Default for RetentionBudget {
    fn default() -> Self {
        Self {
            tenants: 100,
            sessions: 100,
        }
    }
}

/// What one pass saw and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionReport {
    /// Tenants looked at.
    pub tenants: u32,
    /// Sessions deleted.
    pub expired: u32,
    /// Stale sessions kept because a turn was queued or running or a writer held the lock.
    pub busy: u32,
    /// Runs, events and transcript entries deleted with them.
    pub records: u64,
    /// Whether the budget ended the pass (the next one resumes).
    pub resumes: bool,
}

/// The retention sweep and where its next pass starts.
pub struct RetentionSweep {
    store: Arc<dyn SessionRetention>,
    policy: RetentionPolicy,
    budget: RetentionBudget,
    /// The tenant the next pass starts after (`None`: from the first).
    resume_after: Mutex<Option<TenantId>>,
    /// When the last pass ran (ms): a pass runs at most every
    /// [`RetentionPolicy::pass_interval`], however often the supervisor sweeps.
    last_pass_at: Mutex<Option<u64>>,
}

/// Where a tenant's look ended.
enum TenantEnd {
    /// Every stale session looked at.
    Done,
    /// The session budget ran out; whether anything was deleted.
    Spent { deleted: bool },
}

impl RetentionSweep {
    /// A sweep of `store` under `policy`, with the default budget.
    pub fn new(store: Arc<dyn SessionRetention>, policy: RetentionPolicy) -> Self {
        Self {
            store,
            policy,
            budget: RetentionBudget::default(),
            resume_after: Mutex::new(None),
            last_pass_at: Mutex::new(None),
        }
    }

    /// The same sweep with `budget` per pass.
    pub fn with_budget(mut self, budget: RetentionBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The policy it applies.
    pub fn policy(&self) -> &RetentionPolicy {
        &self.policy
    }

    /// One pass at `now` (ms since the epoch), unless the last one ran less than the policy's
    /// [pass interval](RetentionPolicy::pass_interval) ago (then nothing, an empty report).
    pub async fn sweep(&self, now: u64) -> StoreResult<RetentionReport> {
        let mut report = RetentionReport::default();
        let Some(interval) = self.policy.pass_interval() else {
            return Ok(report);
        };
        {
            let mut last = self
                .last_pass_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
            if last.is_some_and(|at| now < at.saturating_add(interval_ms)) {
                return Ok(report);
            }
            *last = Some(now);
        }
        let start = self
            .resume_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let tenants = self.tenants_after(start.as_ref()).await?;
        let mut sessions_left = self.budget.sessions;
        // Where the next pass starts: after the last tenant finished, else from the first.
        let mut next = None;
        let mut previous = start;
        for tenant in tenants.tenants {
            report.tenants += 1;
            match self
                .sweep_tenant(&tenant, now, &mut sessions_left, &mut report)
                .await?
            {
                TenantEnd::Done => previous = Some(tenant),
                TenantEnd::Spent { deleted } => {
                    // Deleting there: go on with that tenant; only kept ones: past it.
                    next = if deleted { previous } else { Some(tenant) };
                    report.resumes = true;
                    break;
                }
            }
        }
        if !report.resumes && tenants.next.is_some() {
            next = tenants.next;
            report.resumes = true;
        }
        *self
            .resume_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = next;
        if report.expired > 0 || report.busy > 0 {
            tracing::info!(
                tenants = report.tenants,
                expired = report.expired,
                busy = report.busy,
                records = report.records,
                resumes = report.resumes,
                "retention sweep"
            );
        }
        Ok(report)
    }

    /// The tenants of this pass, after `after`: the policy's named ones, or a registry page.
    async fn tenants_after(
        &self,
        after: Option<&TenantId>,
    ) -> StoreResult<agentlane_core::TenantPage> {
        if !self.policy.only_named() {
            return self.store.list_tenants(after, self.budget.tenants).await;
        }
        let mut named = self
            .policy
            .tenants
            .keys()
            .map(|t| TenantId::new(t.as_str()))
            .filter(|t| after.is_none_or(|a| t > a));
        let tenants: Vec<TenantId> = named.by_ref().take(self.budget.tenants).collect();
        let next = named.next().and(tenants.last().cloned());
        Ok(agentlane_core::TenantPage { tenants, next })
    }

    async fn sweep_tenant(
        &self,
        tenant: &TenantId,
        now: u64,
        sessions_left: &mut usize,
        report: &mut RetentionReport,
    ) -> StoreResult<TenantEnd> {
        let Some(retention) = self.policy.for_tenant(tenant) else {
            return Ok(TenantEnd::Done);
        };
        if *sessions_left == 0 {
            return Ok(TenantEnd::Spent { deleted: false });
        }
        let stale = self
            .store
            .stale_sessions(tenant, cutoff(retention, now), *sessions_left)
            .await?;
        let spent = stale.len() >= *sessions_left;
        *sessions_left -= stale.len().min(*sessions_left);
        let mut deleted = false;
        for session in stale {
            match self
                .store
                .expire_session(tenant, &session.session_key, retention, now)
                .await?
            {
                Expiry::Removed(removed) => {
                    deleted = true;
                    report.expired += 1;
                    report.records += removed.runs + removed.events + removed.transcript_entries;
                    metrics::global().add(SESSIONS_EXPIRED, &[("tenant", tenant.as_str())], 1.0);
                }
                Expiry::Kept(Verdict::Busy) => report.busy += 1,
                Expiry::Kept(_) | Expiry::Gone => {}
            }
        }
        Ok(if spent {
            TenantEnd::Spent { deleted }
        } else {
            TenantEnd::Done
        })
    }
}
