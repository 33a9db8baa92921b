//! `GET /v1/usage`: what the calling tenant spent today and this month (UTC), from the period
//! counters its budget keeps (issue 21): one read, never a scan.

use crate::Shared;
use crate::auth::Tenant;
use crate::error::ApiError;
use agentlane_core::spend::{day_period, month_period, usd};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use std::sync::Arc;

/// One period of the tenant's spend.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeriodUsage {
    /// `2026-12-04` (a UTC day) or `2026-12` (a UTC month).
    pub period: String,
    /// USD spent, open reservations of calls in flight included.
    pub cost_usd: f64,
    /// Tokens used, open reservations included.
    pub tokens: u64,
    /// USD and tokens reserved by calls still in flight (a part of the above).
    pub held_usd: f64,
    pub held_tokens: u64,
    /// The period's limits (`null`: none).
    pub max_usd: Option<f64>,
    pub max_tokens: Option<u64>,
    /// When the period ends (ms since epoch).
    pub ends_at: u64,
}

/// The answer of `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    /// Whether the tenant has a budget: spend is counted per period only then (a run's own
    /// `costUsd` is always recorded).
    pub counted: bool,
    pub day: PeriodUsage,
    pub month: PeriodUsage,
}

/// The calling tenant's spend today and this month (UTC) against its budget.
#[utoipa::path(get, path = "/v1/usage", operation_id = "getUsage", tag = "runs",
    responses((status = 200, description = "Spend today and this month", body = UsageView)))]
pub async fn get_usage(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
) -> Result<Json<UsageView>, ApiError> {
    let limits = state.admission.limits_of(&tenant);
    let now = state.clock.now_ms();
    let ((day, day_end), (month, month_end)) = (day_period(now), month_period(now));
    let budget = limits.budget();
    let spends = match &state.spend {
        Some(ledger) if !budget.is_unlimited() => {
            ledger
                .periods_spend(&tenant, &[day.clone(), month.clone()])
                .await?
        }
        _ => vec![Default::default(), Default::default()],
    };
    let view =
        |period: &str, ends_at, spend: &agentlane_core::spend::PeriodSpend, max_usd, max_tokens| {
            PeriodUsage {
                period: period.get(1..).unwrap_or(period).to_owned(),
                cost_usd: usd(spend.micros),
                tokens: spend.tokens,
                held_usd: usd(spend.holds.iter().map(|h| h.micros).sum()),
                held_tokens: spend.holds.iter().map(|h| h.tokens).sum(),
                max_usd,
                max_tokens,
                ends_at,
            }
        };
    let empty = agentlane_core::spend::PeriodSpend::default();
    Ok(Json(UsageView {
        counted: !budget.is_unlimited(),
        day: view(
            &day,
            day_end,
            spends.first().unwrap_or(&empty),
            budget.daily_usd,
            budget.daily_tokens,
        ),
        month: view(
            &month,
            month_end,
            spends.get(1).unwrap_or(&empty),
            budget.monthly_usd,
            budget.monthly_tokens,
        ),
    }))
}
