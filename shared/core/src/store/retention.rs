//! Per-tenant retention of sessions (issue 24): a session whose last activity (`updatedAt`) is
//! older than its tenant's retention goes, with everything [`delete_session`] removes — never
//! one with a queued or running turn.
//!
//! - [`verdict`]: the rule, pure and table-tested: is this session expired for this retention
//!   at this time?
//! - [`RetentionPolicy`]: each tenant's retention (`[limits.tenant] retention_days`, replaced
//!   per tenant by `[limits.tenants.<id>] retention_days`).
//! - [`SessionRetention`]: what the sweep needs of a store — the tenants that have sessions
//!   (a registry or an index, never a scan), a tenant's stale sessions oldest first (an index),
//!   and a session expired only if the rule still holds under the store's own condition.
//!
//! [`delete_session`]: super::SessionCatalog::delete_session

use super::{SessionRemoval, StoreResult};
use crate::ids::{SessionKey, TenantId};
use crate::session::{Session, SessionStatus};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::time::Duration;

/// A day, the unit of `retention_days`.
pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// What the rule says of one session at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Older than the retention and idle: it goes.
    Expired,
    /// Active within the retention: it stays.
    Fresh,
    /// Older than the retention, but a turn is queued or running, or a writer holds its lock:
    /// it stays (a later sweep looks again).
    Busy,
    /// Its tenant keeps sessions forever (no retention).
    Kept,
}

/// The time before which a session's last activity makes it stale: `now - retention`.
pub fn cutoff(retention: Duration, now: u64) -> u64 {
    let ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    now.saturating_sub(ms)
}

/// Whether `session` is expired under `retention` (`None`: kept forever) at `now`: its
/// `updatedAt` is before [`cutoff`], every turn accepted on it finished (none queued or
/// running), and no writer holds its lock. Every adapter applies this rule inside its own condition.
pub fn verdict(session: &Session, retention: Option<Duration>, now: u64) -> Verdict {
    let Some(retention) = retention else {
        return Verdict::Kept;
    };
    if session.updated_at >= cutoff(retention, now) {
        return Verdict::Fresh;
    }
    let busy = session.status == SessionStatus::Processing
        || session.active_run_id.is_some()
        || session.runs_finished < session.runs_accepted
        || session.lock_is_live(now);
    if busy {
        Verdict::Busy
    } else {
        Verdict::Expired
    }
}

/// Each tenant's retention: a default and per-tenant replacements. Unset: kept forever.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Every tenant's retention (`[limits.tenant] retention_days`).
    pub default: Option<Duration>,
    /// Tenants whose retention replaces the default, by tenant name.
    pub tenants: BTreeMap<String, Duration>,
}

impl RetentionPolicy {
    /// The retention of `tenant`.
    pub fn for_tenant(&self, tenant: &TenantId) -> Option<Duration> {
        self.tenants.get(tenant.as_str()).copied().or(self.default)
    }

    /// Whether no tenant has a retention (the sweep then does nothing).
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.tenants.is_empty()
    }

    /// Whether only the tenants named in [`tenants`](Self::tenants) have a retention: the
    /// sweep then needs no registry of tenants.
    pub fn only_named(&self) -> bool {
        self.default.is_none()
    }

    /// How often a retention pass is worth running: a 24th of the shortest retention, at most
    /// [`MAX_PASS_INTERVAL`] (a session then outlives its retention by at most that, plus the
    /// passes a backlog takes). `None` without any retention.
    pub fn pass_interval(&self) -> Option<Duration> {
        self.default
            .iter()
            .chain(self.tenants.values())
            .min()
            .map(|shortest| (*shortest / 24).min(MAX_PASS_INTERVAL))
    }
}

/// The longest pause between two retention passes.
pub const MAX_PASS_INTERVAL: Duration = Duration::from_secs(60);

/// One page of the tenants that have sessions, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantPage {
    /// The tenants.
    pub tenants: Vec<TenantId>,
    /// The last tenant listed when more may follow; `None` when the list is done.
    pub next: Option<TenantId>,
}

/// What expiring one session did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Deleted, with what it removed.
    Removed(SessionRemoval),
    /// Kept: the rule's verdict when the store checked it (never [`Verdict::Expired`]).
    Kept(Verdict),
    /// No such session (deleted meanwhile).
    Gone,
}

/// What the retention sweep needs of a store.
#[async_trait]
pub trait SessionRetention: Send + Sync {
    /// The tenants that have (or had) sessions, in name order, after `after` (from the first
    /// when `None`), at most `limit`. A tenant stays listed until it is erased.
    async fn list_tenants(&self, after: Option<&TenantId>, limit: usize)
    -> StoreResult<TenantPage>;

    /// The tenant's sessions whose `updatedAt` is before `cutoff`, oldest first, at most
    /// `limit` (from an index; it may lag a moment behind the sessions themselves).
    async fn stale_sessions(
        &self,
        tenant: &TenantId,
        cutoff: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>>;

    /// Deletes the session of `key` and everything of it (as
    /// [`delete_session`](super::SessionCatalog::delete_session)) only if [`verdict`] says
    /// `Expired` for `retention` at `now` under the store's own condition: a turn accepted or a
    /// lock taken after the session was read keeps it.
    async fn expire_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        retention: Duration,
        now: u64,
    ) -> StoreResult<Expiry>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{RunId, SessionId};

    const NOW: u64 = 10 * 86_400_000;

    fn session(updated_at: u64) -> Session {
        Session {
            updated_at,
            ..Session::new(
                TenantId::new("t"),
                SessionKey::new("k"),
                SessionId::new("s"),
                1,
            )
        }
    }

    #[test]
    fn a_session_expires_only_when_stale_and_idle() {
        let day = Some(DAY);
        let stale = NOW - DAY.as_millis() as u64 - 1;
        let edge = NOW - DAY.as_millis() as u64;
        let processing = Session {
            status: SessionStatus::Processing,
            active_run_id: Some(RunId::new("r")),
            ..session(stale)
        };
        let queued = Session {
            runs_accepted: 4,
            runs_finished: 3,
            ..session(stale)
        };
        let all_done = Session {
            runs_accepted: 4,
            runs_finished: 4,
            ..session(stale)
        };
        let locked = Session {
            lock_owner: Some("runner".into()),
            lock_until: NOW + 1,
            ..session(stale)
        };
        let lapsed_lock = Session {
            lock_owner: Some("runner".into()),
            lock_until: NOW - 1,
            ..session(stale)
        };
        let cases = [
            ("stale and idle", session(stale), day, Verdict::Expired),
            ("exactly at the cutoff", session(edge), day, Verdict::Fresh),
            (
                "active an hour ago",
                session(NOW - 3_600_000),
                day,
                Verdict::Fresh,
            ),
            ("no retention", session(0), None, Verdict::Kept),
            ("a running turn", processing, day, Verdict::Busy),
            ("a queued turn", queued, day, Verdict::Busy),
            ("every turn finished", all_done, day, Verdict::Expired),
            ("a live lock", locked, day, Verdict::Busy),
            ("a lapsed lock", lapsed_lock, day, Verdict::Expired),
            (
                "a year ago, a week kept",
                session(0),
                Some(DAY * 7),
                Verdict::Expired,
            ),
        ];
        for (name, s, retention, want) in cases {
            assert_eq!(verdict(&s, retention, NOW), want, "{name}");
        }
    }

    #[test]
    fn the_cutoff_never_goes_below_zero() {
        assert_eq!(cutoff(DAY, 1000), 0);
        assert_eq!(cutoff(Duration::from_secs(2), 5000), 3000);
        assert_eq!(cutoff(Duration::MAX, u64::MAX), 0);
    }

    #[test]
    fn a_tenant_gets_its_own_retention_else_the_default() {
        let policy = RetentionPolicy {
            default: Some(DAY * 30),
            tenants: BTreeMap::from([("acme".to_owned(), DAY)]),
        };
        let only = RetentionPolicy {
            default: None,
            tenants: BTreeMap::from([("acme".to_owned(), DAY)]),
        };
        let cases = [
            (&policy, "acme", Some(DAY)),
            (&policy, "beta", Some(DAY * 30)),
            (&only, "acme", Some(DAY)),
            (&only, "beta", None),
        ];
        for (policy, tenant, want) in cases {
            assert_eq!(policy.for_tenant(&TenantId::new(tenant)), want, "{tenant}");
        }
        assert!(RetentionPolicy::default().is_empty());
        let interval = |default: Option<Duration>, named: &[Duration]| {
            RetentionPolicy {
                default,
                tenants: named
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (format!("t{i}"), *d))
                    .collect(),
            }
            .pass_interval()
        };
        let secs = Duration::from_secs;
        let cases = [
            (None, vec![], None),
            (Some(DAY), vec![], Some(MAX_PASS_INTERVAL)),
            (Some(DAY * 30), vec![DAY], Some(MAX_PASS_INTERVAL)),
            (Some(secs(48)), vec![], Some(secs(2))),
            (None, vec![secs(240), secs(24)], Some(secs(1))),
        ];
        for (default, named, want) in cases {
            assert_eq!(interval(default, &named), want, "{default:?} {named:?}");
        }
        assert!(only.only_named() && !policy.only_named());
    }
}
