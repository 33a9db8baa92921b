//! Limits of the HTTP edge (issue 12 §3), as one serde struct: the TOML section `[limits]`
//! of the config file maps onto [`Limits`] field by field, every key optional.
//!
//! ```toml
//! [limits]
//! header_read_timeout_ms = 10000
//! max_connections = 1024
//! allowed_models = ["openai/gpt-4o-mini"]
//!
//! [limits.tenant]            # every tenant
//! requests_per_second = 50
//! max_event_streams = 64
//! retention_days = 90        # sessions idle longer are deleted by the sweep
//!
//! [limits.tenants.acme]      # one tenant: only the keys given replace `[limits.tenant]`
//! requests_per_second = 500
//! allowed_models = ["openai/gpt-4o", "openai/gpt-4o-mini"]
//! ```

use agentlane_core::TenantId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// 4 MiB: no JSON page is larger (Lambda answers at most 6 MB).
pub const DEFAULT_MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// Limits of the HTTP edge: the server (timeouts, connections, shutdown), request shapes
/// (URI length, page bytes, run timeouts, models) and per-tenant admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// A connection whose request head (line and headers) has not fully arrived this long
    /// after the server started reading it is closed; idle keep-alive connections included.
    /// Default 10 s.
    pub header_read_timeout_ms: u64,
    /// A request body must have fully arrived this long after the handler started reading it,
    /// else `408 timeout`. Default 30 s.
    pub request_body_timeout_ms: u64,
    /// A request must be answered within this time, else `408 timeout`. `agent.wait` gets its
    /// own wait on top; an SSE stream only its first response. Default 30 s.
    pub request_timeout_ms: u64,
    /// Open connections at most; further clients wait in the listen backlog until one closes.
    /// Default 1024.
    pub max_connections: usize,
    /// The share (percent) of `max_connections` one client address may hold at once, so that
    /// one client's sockets (slow or reconnecting) cannot take every slot. A connection beyond
    /// it is answered `429 rate_limited` and closed at once. At least one; `0` or `100`: no
    /// share. Default 25.
    pub max_connections_per_client_percent: u32,
    /// On shutdown, requests in flight get this long to finish before their connections are
    /// dropped; SSE streams end at once. Default 10 s.
    pub shutdown_grace_ms: u64,
    /// Longest path plus query string, in bytes; longer answers `414 uri_too_long`. Default
    /// 8 KiB.
    pub max_uri_bytes: usize,
    /// Largest transcript or events page, in bytes; a page stops before the entry that would
    /// cross it and `next` continues. Default 4 MiB.
    pub max_page_bytes: usize,
    /// Largest `timeoutSeconds` a turn may ask for. Default 7 days.
    pub max_run_timeout_seconds: u64,
    /// Whether `timeoutSeconds: 0` (no limit) is accepted. Default true.
    pub allow_unlimited_runs: bool,
    /// The models (`provider/model`) every tenant may ask for. Empty: the configured default
    /// model and its fallbacks ([`crate::ApiConfig::configured_models`]).
    pub allowed_models: Vec<String>,
    /// The share of the lane workers (percent) one tenant's runs may hold at once on the
    /// embedded queue, so that a tenant flooding many sessions leaves workers for the others
    /// (whatever the share, the queue serves tenants with ready turns round robin). At least
    /// one worker; `0` or `100`: no cap. Default 75.
    pub tenant_worker_share_percent: u32,
    /// Store key lookups (of `al_…` keys not cached) that found no key, per source address and
    /// minute; beyond it the address's lookups answer `429 rate_limited` before reading the
    /// store, until the minute ends. Counted across processes where the limits are shared.
    /// `0`: no limit. Default 30.
    pub key_probes_per_minute: u32,
    /// What every tenant gets.
    pub tenant: TenantLimits,
    /// Per-tenant replacements of `tenant`'s keys, by tenant name.
    pub tenants: BTreeMap<String, TenantOverride>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: 10_000,
            request_body_timeout_ms: 30_000,
            request_timeout_ms: 30_000,
            max_connections: 1024,
            max_connections_per_client_percent: 25,
            shutdown_grace_ms: 10_000,
            max_uri_bytes: 8 * 1024,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            max_run_timeout_seconds: 7 * 24 * 3600,
            allow_unlimited_runs: true,
            allowed_models: Vec::new(),
            tenant_worker_share_percent: 75,
            key_probes_per_minute: 30,
            tenant: TenantLimits::default(),
            tenants: BTreeMap::new(),
        }
    }
}

/// Admission limits of one tenant. A `0` turns that limit off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantLimits {
    /// Sustained requests per second (every authenticated request counts); beyond it `429
    /// rate_limited` with `Retry-After`. Where the limits are shared (the AWS backend), also
    /// across processes: at most this many per clock second between them. Default 5000 (a
    /// single-tenant benchmark at 2,000 turns/s sends about 4,000).
    pub requests_per_second: u32,
    /// Requests that may arrive at once above the sustained rate. Default 5000.
    pub burst: u32,
    /// Concurrent SSE event streams. Default 64.
    pub max_event_streams: u32,
    /// Concurrent `agent.wait` calls. Default 256.
    pub max_waits: u32,
    /// Runs of one session queued or running at once; a further turn answers `429
    /// rate_limited`. Default 64.
    pub max_queued_runs_per_session: u64,
    /// USD the tenant's model calls may cost per UTC day (every run, retry and fallback
    /// counted; checked before each call against its worst case). Unset: no limit.
    pub daily_usd: Option<f64>,
    /// USD per calendar month (UTC). Unset: no limit.
    pub monthly_usd: Option<f64>,
    /// Tokens (input and output) per UTC day. Unset: no limit.
    pub daily_tokens: Option<u64>,
    /// Tokens per calendar month (UTC). Unset: no limit.
    pub monthly_tokens: Option<u64>,
    /// Scheduled cron fires the tenant may start per minute (a bucket of a minute's worth,
    /// refilled evenly); a slot that comes due beyond it is recorded `skipped`. Counted by
    /// each ticker (one per `serve`, the cron Lambda). Default 60.
    pub cron_fires_per_minute: u32,
    /// Days a session is kept after its last activity; then the sweep deletes it with its
    /// transcript, runs and events (never while a turn is queued or running). At least 1.
    /// Unset: kept forever.
    pub retention_days: Option<u32>,
}

// The USD limits are checked finite at start-up: equality is total here.
impl Eq for TenantLimits {}

impl TenantLimits {
    /// The tenant's spend budget.
    pub fn budget(&self) -> agentlane_core::spend::TenantBudget {
        agentlane_core::spend::TenantBudget {
            daily_usd: self.daily_usd,
            monthly_usd: self.monthly_usd,
            daily_tokens: self.daily_tokens,
            monthly_tokens: self.monthly_tokens,
        }
    }
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            requests_per_second: 5000,
            burst: 5000,
            max_event_streams: 64,
            max_waits: 256,
            max_queued_runs_per_session: 64,
            daily_usd: None,
            monthly_usd: None,
            daily_tokens: None,
            monthly_tokens: None,
            cron_fires_per_minute: agentlane_scheduler::budget::DEFAULT_FIRES_PER_MINUTE,
            retention_days: None,
        }
    }
}

/// One tenant's replacements: the keys given win over `[limits.tenant]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantOverride {
    /// Replaces [`TenantLimits::requests_per_second`].
    pub requests_per_second: Option<u32>,
    /// Replaces [`TenantLimits::burst`].
    pub burst: Option<u32>,
    /// Replaces [`TenantLimits::max_event_streams`].
    pub max_event_streams: Option<u32>,
    /// Replaces [`TenantLimits::max_waits`].
    pub max_waits: Option<u32>,
    /// Replaces [`TenantLimits::max_queued_runs_per_session`].
    pub max_queued_runs_per_session: Option<u64>,
    /// The models this tenant may ask for, instead of the global list.
    pub allowed_models: Option<Vec<String>>,
    /// Replaces [`TenantLimits::daily_usd`].
    pub daily_usd: Option<f64>,
    /// Replaces [`TenantLimits::monthly_usd`].
    pub monthly_usd: Option<f64>,
    /// Replaces [`TenantLimits::daily_tokens`].
    pub daily_tokens: Option<u64>,
    /// Replaces [`TenantLimits::monthly_tokens`].
    pub monthly_tokens: Option<u64>,
    /// Replaces [`TenantLimits::cron_fires_per_minute`].
    pub cron_fires_per_minute: Option<u32>,
    /// Replaces [`TenantLimits::retention_days`].
    pub retention_days: Option<u32>,
}

// The USD limits are checked finite at start-up: equality is total here.
impl Eq for TenantOverride {}

impl Limits {
    /// The admission limits of `tenant`: `[limits.tenant]` with its override applied.
    pub fn for_tenant(&self, tenant: &TenantId) -> TenantLimits {
        let base = self.tenant.clone();
        let Some(o) = self.tenants.get(tenant.as_str()) else {
            return base;
        };
        TenantLimits {
            requests_per_second: o.requests_per_second.unwrap_or(base.requests_per_second),
            burst: o.burst.unwrap_or(base.burst),
            max_event_streams: o.max_event_streams.unwrap_or(base.max_event_streams),
            max_waits: o.max_waits.unwrap_or(base.max_waits),
            max_queued_runs_per_session: o
                .max_queued_runs_per_session
                .unwrap_or(base.max_queued_runs_per_session),
            daily_usd: o.daily_usd.or(base.daily_usd),
            monthly_usd: o.monthly_usd.or(base.monthly_usd),
            daily_tokens: o.daily_tokens.or(base.daily_tokens),
            monthly_tokens: o.monthly_tokens.or(base.monthly_tokens),
            cron_fires_per_minute: o
                .cron_fires_per_minute
                .unwrap_or(base.cron_fires_per_minute),
            retention_days: o.retention_days.or(base.retention_days),
        }
    }

    /// Every tenant's session retention, a configured day lasting `day` (a real day but in
    /// tests): `[limits.tenant]` and the per-tenant overrides.
    pub fn retention(&self, day: Duration) -> agentlane_core::RetentionPolicy {
        let days = |n: u32| day.saturating_mul(n);
        agentlane_core::RetentionPolicy {
            default: self.tenant.retention_days.map(days),
            tenants: self
                .tenants
                .iter()
                .filter_map(|(name, o)| o.retention_days.map(|n| (name.clone(), days(n))))
                .collect(),
        }
    }

    /// The problem with the retentions, if any (`retention_days = 0`).
    pub fn retention_problem(&self) -> Option<String> {
        let zero = |days: Option<u32>| days == Some(0);
        if zero(self.tenant.retention_days) {
            return Some(
                "[limits.tenant] retention_days must be at least 1 (unset: keep forever)".into(),
            );
        }
        self.tenants
            .iter()
            .find(|(_, o)| zero(o.retention_days))
            .map(|(name, _)| {
                format!(
                    "[limits.tenants.{name}] retention_days must be at least 1 (unset: the default)"
                )
            })
    }

    /// Every tenant's cron fire budget: `[limits.tenant]` and the per-tenant overrides.
    pub fn fire_budget(&self) -> agentlane_scheduler::FireBudget {
        agentlane_scheduler::FireBudget {
            per_minute: self.tenant.cron_fires_per_minute,
            tenants: self
                .tenants
                .iter()
                .filter_map(|(name, o)| o.cron_fires_per_minute.map(|n| (name.clone(), n)))
                .collect(),
        }
    }

    /// Every tenant's spend budget: `[limits.tenant]` and the per-tenant overrides.
    pub fn budgets(&self) -> agentlane_core::spend::TenantBudgets {
        agentlane_core::spend::TenantBudgets {
            default: self.tenant.budget(),
            tenants: self
                .tenants
                .keys()
                .map(|name| {
                    let tenant = TenantId::new(name.as_str());
                    (name.clone(), self.for_tenant(&tenant).budget())
                })
                .collect(),
        }
    }

    /// The problem with the spend limits, if any (a negative or non-finite USD amount).
    pub fn budget_problem(&self) -> Option<String> {
        let budgets = self.budgets();
        std::iter::once(&budgets.default)
            .chain(budgets.tenants.values())
            .find_map(|b| b.problem())
    }

    /// The models `tenant` may ask for: its own list, else the global one, else `configured`
    /// (the default model and fallbacks). Empty means no restriction.
    pub fn models_for<'a>(&'a self, tenant: &TenantId, configured: &'a [String]) -> &'a [String] {
        if let Some(models) = self
            .tenants
            .get(tenant.as_str())
            .and_then(|o| o.allowed_models.as_deref())
        {
            return models;
        }
        if !self.allowed_models.is_empty() {
            return &self.allowed_models;
        }
        configured
    }

    /// Runs one tenant may have in flight on `workers` lane workers
    /// ([`Limits::tenant_worker_share_percent`] of them, at least one); `0`: no cap.
    pub fn tenant_in_flight_cap(&self, workers: usize) -> u32 {
        let share = u64::from(self.tenant_worker_share_percent);
        if share == 0 || share >= 100 {
            return 0;
        }
        let workers = u64::try_from(workers).unwrap_or(u64::MAX);
        u32::try_from((workers.saturating_mul(share) / 100).max(1)).unwrap_or(u32::MAX)
    }

    /// Connections one client address may hold at once
    /// ([`Limits::max_connections_per_client_percent`] of `max_connections`, at least one);
    /// `None`: no share.
    pub fn connections_per_client(&self) -> Option<usize> {
        let share = self.max_connections_per_client_percent;
        if share == 0 || share >= 100 {
            return None;
        }
        let cap = self.max_connections.max(1);
        Some((cap.saturating_mul(share as usize) / 100).max(1))
    }

    /// [`Limits::header_read_timeout_ms`] as a duration.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    /// [`Limits::request_body_timeout_ms`] as a duration.
    pub fn request_body_timeout(&self) -> Duration {
        Duration::from_millis(self.request_body_timeout_ms)
    }

    /// [`Limits::request_timeout_ms`] as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// [`Limits::shutdown_grace_ms`] as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[derive(Debug, Deserialize)]
    struct File {
        limits: Limits,
    }

    #[test]
    fn a_toml_section_overrides_only_the_keys_it_names() {
        let file: File = toml::from_str(
            r#"
            [limits]
            header_read_timeout_ms = 2000
            allowed_models = ["openai/gpt-4o-mini"]
            [limits.tenant]
            requests_per_second = 50
            [limits.tenants.acme]
            burst = 7
            allowed_models = ["openai/gpt-4o"]
            cron_fires_per_minute = 5
            "#,
        )
        .unwrap();
        let limits = file.limits;
        assert_eq!(limits.header_read_timeout(), Duration::from_secs(2));
        assert_eq!(limits.max_connections, Limits::default().max_connections);
        let acme = TenantId::new("acme");
        let beta = TenantId::new("beta");
        assert_eq!(
            limits.for_tenant(&acme),
            TenantLimits {
                requests_per_second: 50,
                burst: 7,
                cron_fires_per_minute: 5,
                ..TenantLimits::default()
            }
        );
        let fires = limits.fire_budget();
        assert_eq!((fires.for_tenant(&acme), fires.for_tenant(&beta)), (5, 60));
        assert_eq!(
            limits.for_tenant(&beta),
            TenantLimits {
                requests_per_second: 50,
                ..TenantLimits::default()
            }
        );
        let configured = vec!["openai/default".to_owned()];
        assert_eq!(limits.models_for(&acme, &configured), ["openai/gpt-4o"]);
        assert_eq!(
            limits.models_for(&beta, &configured),
            ["openai/gpt-4o-mini"]
        );
        let plain = Limits::default();
        assert_eq!(plain.models_for(&beta, &configured), ["openai/default"]);
    }

    #[test]
    fn a_retention_is_the_tenants_own_else_the_default_and_never_zero() {
        let day = agentlane_core::store::DAY;
        let limits = |text: &str| toml::from_str::<File>(text).unwrap().limits;
        let cases = [
            ("[limits]\n", None, None, None),
            (
                "[limits.tenant]\nretention_days = 30\n[limits.tenants.acme]\nretention_days = 7\n",
                Some(day * 30),
                Some(day * 7),
                None,
            ),
            (
                "[limits.tenants.acme]\nretention_days = 1\n",
                None,
                Some(day),
                None,
            ),
            (
                "[limits.tenant]\nretention_days = 0\n",
                None,
                None,
                Some("[limits.tenant] retention_days must be at least 1"),
            ),
            (
                "[limits.tenants.acme]\nretention_days = 0\n",
                None,
                None,
                Some("[limits.tenants.acme] retention_days must be at least 1"),
            ),
        ];
        for (text, beta, acme, problem) in cases {
            let limits = limits(text);
            let got = limits.retention_problem();
            assert_eq!(
                got.as_deref()
                    .map(|p| p.split(" (").next().unwrap_or_default()),
                problem,
                "{text}"
            );
            if problem.is_some() {
                continue;
            }
            let policy = limits.retention(day);
            assert_eq!(policy.for_tenant(&TenantId::new("beta")), beta, "{text}");
            assert_eq!(policy.for_tenant(&TenantId::new("acme")), acme, "{text}");
            assert_eq!(
                limits.for_tenant(&TenantId::new("acme")).retention_days,
                acme.map(|d| (d.as_secs() / day.as_secs()) as u32),
                "{text}"
            );
        }
        // A test's day of two seconds
        let short =
            limits("[limits.tenant]\nretention_days = 1\n").retention(Duration::from_secs(2));
        assert_eq!(short.default, Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_tenant_gets_its_share_of_the_workers_and_at_least_one() {
        let limits = Limits::default();
        assert_eq!(limits.tenant_in_flight_cap(4), 3);
        assert_eq!(limits.tenant_in_flight_cap(1), 1);
        assert_eq!(limits.tenant_in_flight_cap(16), 12);
        let all = Limits {
            tenant_worker_share_percent: 100,
            ..Limits::default()
        };
        assert_eq!(all.tenant_in_flight_cap(4), 0);
    }

    #[test]
    fn a_client_gets_its_share_of_the_connections_and_at_least_one() {
        let share = |max_connections, percent| {
            Limits {
                max_connections,
                max_connections_per_client_percent: percent,
                ..Limits::default()
            }
            .connections_per_client()
        };
        assert_eq!(Limits::default().connections_per_client(), Some(256));
        assert_eq!(share(10, 25), Some(2));
        assert_eq!(share(3, 25), Some(1));
        assert_eq!(share(4, 100), None);
        assert_eq!(share(4, 0), None);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = toml::from_str::<File>("[limits]\nmax_conections = 3\n").unwrap_err();
        assert!(error.to_string().contains("max_conections"), "{error}");
    }
}
