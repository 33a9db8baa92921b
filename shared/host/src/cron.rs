//! Cron wiring shared by `serve` and the cron Lambda: its settings from the environment and the
//! ticker over a host's backends.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `AGENTLANE_CRON_TICK_MS` | 1000 | pause between two ticks |
//! | `AGENTLANE_CRON_MAX_JOBS` | 1000 | cron jobs per tenant |
//! | `AGENTLANE_CRON_ENABLED` | `true` | `false`: `serve` runs no ticker (the API still manages jobs) |

use crate::Backends;
use crate::settings::{Settings, env, env_ms};
use agentlane_scheduler::{Ticker, TickerConfig, WebhookSender};
use agentlane_tools::ssrf::SsrfPolicy;
use anyhow::Context;
use std::time::Duration;

/// How cron runs on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSettings {
    /// Pause between ticks.
    pub tick: Duration,
    /// Jobs per tenant.
    pub max_jobs: u32,
    /// Whether `serve` ticks.
    pub enabled: bool,
}

impl CronSettings {
    /// From `AGENTLANE_CRON_*`.
    pub fn from_env() -> anyhow::Result<Self> {
        let tick = env_ms("AGENTLANE_CRON_TICK_MS", Duration::from_millis(1000))?;
        if tick.is_zero() {
            anyhow::bail!("AGENTLANE_CRON_TICK_MS must be at least 1");
        }
        let max_jobs = match env("AGENTLANE_CRON_MAX_JOBS") {
            None => agentlane_core::cron::DEFAULT_MAX_JOBS_PER_TENANT,
            Some(v) => v.trim().parse().with_context(|| {
                format!("AGENTLANE_CRON_MAX_JOBS must be a whole number, got {v:?}")
            })?,
        };
        let enabled = match env("AGENTLANE_CRON_ENABLED").as_deref().map(str::trim) {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(other) => {
                anyhow::bail!("AGENTLANE_CRON_ENABLED must be true or false, got {other:?}")
            }
        };
        Ok(Self {
            tick,
            max_jobs,
            enabled,
        })
    }
}

/// The ticker over `backends`, holding each tenant to its fire budget (`[limits.tenant]
/// cron_fires_per_minute`). Webhook deliveries follow the `http_fetch` SSRF policy, with its
/// allow list (`AGENTLANE_HTTP_FETCH_ALLOW`).
pub fn ticker(backends: &Backends, settings: &Settings, cron: &CronSettings) -> Ticker {
    let policy = SsrfPolicy {
        allow_hosts: settings.tools.http_fetch_allow.clone(),
        ..SsrfPolicy::default()
    };
    Ticker::new(
        backends.store.clone(),
        backends.cron.clone(),
        backends.queue.clone(),
        backends.clock.clone(),
        TickerConfig {
            tick: cron.tick,
            fire_budget: settings.api.limits.fire_budget(),
            ..TickerConfig::default()
        },
        WebhookSender::new(policy),
    )
}
