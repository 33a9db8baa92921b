//! `GET /v1/usage`: what the calling tenant spent today and this month (UTC), from the period
//! counters its budget keeps (issue 21): one read, never a scan; with `groupBy`, the spend of
//! each day of a range, by day, agent, model or session (one range read of per-day items).

use crate::Shared;
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use agentlane_core::spend::{UsageGroup, day_period, month_period, period_date, usd};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One period of the tenant's spend.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PeriodUsage {
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

/// Longest range of days `groupBy` reads.
const MAX_DAYS: i64 = 92;

/// `GET /v1/usage` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct UsageQuery {
    /// Rows per day (`day`), or per day and agent, model or session.
    pub group_by: Option<UsageGroup>,
    /// First day (`YYYY-MM-DD`, UTC; default: the first of this month).
    #[param(pattern = r"^\d{4}-\d{2}-\d{2}$")]
    pub from: Option<String>,
    /// Last day, inclusive (default: today). At most 92 days after `from`.
    #[param(pattern = r"^\d{4}-\d{2}-\d{2}$")]
    pub to: Option<String>,
}

/// One row of `rows`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageRowView {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// The agent, model or session (absent by day).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// USD (by day: open reservations of calls in flight included).
    pub cost_usd: f64,
    pub tokens: u64,
}

/// The answer of `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageView {
    /// Whether the tenant has a budget: spend is counted per period only then (a run's own
    /// `costUsd` is always recorded).
    pub counted: bool,
    pub day: PeriodUsage,
    pub month: PeriodUsage,
    /// With `groupBy`: how the rows are grouped, and their range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<UsageGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<UsageRowView>>,
}

/// `(from, to)` as period keys (`D2026-12-01`), checked.
fn day_range(query: &UsageQuery, now: u64) -> Result<(String, String), ApiError> {
    let (today, _) = day_period(now);
    let today = period_date(&today).to_owned();
    let first = format!("{}-01", today.get(..7).unwrap_or_default());
    let parse = |field: &str, value: &str| {
        chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|_| {
            ApiError::InvalidRequest(format!("{field} must be a day, YYYY-MM-DD (got {value:?})"))
        })
    };
    let from = query.from.clone().unwrap_or(first);
    let to = query.to.clone().unwrap_or(today);
    let (a, b) = (parse("from", &from)?, parse("to", &to)?);
    let days = (b - a).num_days();
    if days < 0 {
        return Err(ApiError::InvalidRequest("from must not be after to".into()));
    }
    if days >= MAX_DAYS {
        return Err(ApiError::InvalidRequest(format!(
            "from..to spans {} days; at most {MAX_DAYS}",
            days + 1
        )));
    }
    Ok((format!("D{from}"), format!("D{to}")))
}

/// The calling tenant's spend today and this month (UTC) against its budget.
#[utoipa::path(get, path = "/v1/usage", operation_id = "getUsage", tag = "runs",
    params(UsageQuery),
    responses((status = 200, description = "Spend today and this month (and with `groupBy` per day of a range)", body = UsageView)))]
pub(crate) async fn get_usage(
    State(state): State<Arc<Shared>>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<UsageQuery>,
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
                period: period_date(period).to_owned(),
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
    let mut grouped = (None, None, None, None);
    if let Some(group) = query.group_by {
        let (from, to) = day_range(&query, now)?;
        let rows = match &state.spend {
            Some(ledger) if !budget.is_unlimited() => {
                ledger.usage(&tenant, group, &from, &to).await?
            }
            _ => Vec::new(),
        };
        let rows = rows
            .into_iter()
            .map(|r| UsageRowView {
                day: period_date(&r.day).to_owned(),
                key: (group != UsageGroup::Day).then_some(r.key),
                cost_usd: usd(r.micros),
                tokens: r.tokens,
            })
            .collect();
        let (from, to) = (period_date(&from).to_owned(), period_date(&to).to_owned());
        grouped = (Some(group), Some(from), Some(to), Some(rows));
    }
    Ok(Json(UsageView {
        group_by: grouped.0,
        from: grouped.1,
        to: grouped.2,
        rows: grouped.3,
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
