//! `GET /v1/usage`: what the calling tenant spent today and this month (UTC), from the period
//! counters its budget keeps (issue 21): one read, never a scan; with `groupBy`, the spend of
//! each day of a range, by day, agent, model or session, a page at a time (by day, then key;
//! at most `limit` rows and [`MAX_USAGE_PAGE_BYTES`] of JSON; `nextCursor` goes on), each page
//! one bounded range read of per-day items.

use super::catalog::{DEFAULT_LIST_PAGE, MAX_LIST_PAGE};
use crate::Shared;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::page;
use agentlane_core::spend::{
    UsageCursor, UsageGroup, UsageRow, day_period, month_period, period_date, usd,
};
use axum::Json;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
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

/// Most bytes of one page's answer (rows and envelope), whatever `limit` (and never more than
/// the deployment's `max_page_bytes`): 1,000 rows of long session keys would pass it.
pub(crate) const MAX_USAGE_PAGE_BYTES: usize = 256 * 1024;

/// Longest `cursor` (a `nextCursor` encodes a day and a key of at most a few hundred bytes).
const MAX_CURSOR_CHARS: usize = 2048;

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
    /// Rows per page with `groupBy`, 1-1000 (default 100); a page also stops before 256 KiB.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// The `nextCursor` of the previous page (the same `groupBy`, `from` and `to`).
    #[param(max_length = 2048)]
    pub cursor: Option<String>,
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
    /// With `groupBy`: a page of rows, by day then key (keys compared bytewise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<UsageRowView>>,
    /// Pass as `cursor` (with the same query) for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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

/// `limit` checked against 1..=[`MAX_LIST_PAGE`], as the session and run lists do.
fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIST_PAGE),
        Some(n) if (1..=MAX_LIST_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::InvalidRequest(format!(
            "limit is {n}; use 1-{MAX_LIST_PAGE}"
        ))),
    }
}

/// A `nextCursor`: the group, day (`YYYY-MM-DD`) and key of the last row sent, as URL-safe
/// base64 (opaque to clients).
fn encode_cursor(group: UsageGroup, after: &UsageCursor) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "{}:{}:{}",
        group.as_str(),
        period_date(&after.day),
        after.key
    ))
}

/// The position `token` names, when it is a `nextCursor` of `group` within `from..=to`
/// (period keys).
fn decode_cursor(
    token: &str,
    group: UsageGroup,
    from: &str,
    to: &str,
) -> Result<UsageCursor, ApiError> {
    let refused = || ApiError::InvalidRequest("cursor is not a nextCursor of this query".into());
    if token.len() > MAX_CURSOR_CHARS {
        return Err(refused());
    }
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| refused())?;
    let text = String::from_utf8(bytes).map_err(|_| refused())?;
    let mut parts = text.splitn(3, ':');
    let (Some(of), Some(day), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(refused());
    };
    if of != group.as_str()
        || chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d").is_err()
        || (group == UsageGroup::Day) != key.is_empty()
    {
        return Err(refused());
    }
    let day = format!("D{day}");
    if day.as_str() < from || day.as_str() > to {
        return Err(refused());
    }
    Ok(UsageCursor {
        day,
        key: key.to_owned(),
    })
}

/// The rows of one page and the cursor of the next: at most `limit` rows of `read` (which the
/// store read as `limit + 1`, to tell whether more remain) and at most `max_bytes` of answer.
fn usage_page(
    group: UsageGroup,
    mut read: Vec<UsageRow>,
    limit: usize,
    max_bytes: usize,
) -> (Vec<UsageRowView>, Option<String>) {
    let more = read.len() > limit;
    read.truncate(limit);
    let views: Vec<UsageRowView> = read
        .iter()
        .map(|r| UsageRowView {
            day: period_date(&r.day).to_owned(),
            key: (group != UsageGroup::Day).then(|| r.key.clone()),
            cost_usd: usd(r.micros),
            tokens: r.tokens,
        })
        .collect();
    let kept = page::fit(views, max_bytes);
    let next = (more || kept.len() < read.len())
        .then(|| kept.len().checked_sub(1).and_then(|last| read.get(last)))
        .flatten()
        .map(|row| encode_cursor(group, &UsageCursor::after(row)));
    (kept, next)
}

/// The calling tenant's spend today and this month (UTC) against its budget.
#[utoipa::path(get, path = "/v1/usage", operation_id = "getUsage", tag = "runs",
    params(UsageQuery),
    responses(
        (status = 200, description = "Spend today and this month (and with `groupBy` a page of the spend per day of a range)", body = UsageView),
        (status = 400, description = "`invalid_request`: a malformed `groupBy`, day, range, `limit` or `cursor`", body = ErrorBody),
    ))]
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
    let limit = page_limit(query.limit)?;
    let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
    let mut grouped = (None, None, None, None, None);
    if let Some(group) = query.group_by {
        let (from, to) = day_range(&query, now)?;
        let after = cursor
            .map(|token| decode_cursor(token, group, &from, &to))
            .transpose()?;
        let read = match &state.spend {
            Some(ledger) if !budget.is_unlimited() => {
                ledger
                    .usage(&tenant, group, &from, &to, after.as_ref(), limit + 1)
                    .await?
            }
            _ => Vec::new(),
        };
        let max_bytes = MAX_USAGE_PAGE_BYTES.min(state.config.limits.max_page_bytes);
        let (rows, next) = usage_page(group, read, limit, max_bytes);
        let (from, to) = (period_date(&from).to_owned(), period_date(&to).to_owned());
        grouped = (Some(group), Some(from), Some(to), Some(rows), next);
    } else if cursor.is_some() {
        return Err(ApiError::InvalidRequest(
            "cursor pages the rows of groupBy: send it with the query it came from".into(),
        ));
    }
    Ok(Json(UsageView {
        group_by: grouped.0,
        from: grouped.1,
        to: grouped.2,
        rows: grouped.3,
        next_cursor: grouped.4,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn row(day: &str, key: &str) -> UsageRow {
        UsageRow {
            day: day.to_owned(),
            key: key.to_owned(),
            micros: 1,
            tokens: 1,
        }
    }

    #[test]
    fn a_cursor_names_the_row_it_was_made_after_and_only_for_its_query() {
        let after = UsageCursor::after(&row("D2026-12-04", "key:with:colons"));
        let token = encode_cursor(UsageGroup::Session, &after);
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{token}"
        );
        let decoded = decode_cursor(&token, UsageGroup::Session, "D2026-12-01", "D2026-12-31");
        assert_eq!(decoded.unwrap(), after);
        // Another group, a range without its day, or not a cursor at all: refused.
        for (token, group, from, to) in [
            (
                token.as_str(),
                UsageGroup::Agent,
                "D2026-12-01",
                "D2026-12-31",
            ),
            (
                token.as_str(),
                UsageGroup::Session,
                "D2026-12-05",
                "D2026-12-31",
            ),
            (
                token.as_str(),
                UsageGroup::Session,
                "D2026-12-01",
                "D2026-12-03",
            ),
            ("", UsageGroup::Session, "D2026-12-01", "D2026-12-31"),
            ("!!", UsageGroup::Session, "D2026-12-01", "D2026-12-31"),
        ] {
            assert!(
                matches!(
                    decode_cursor(token, group, from, to),
                    Err(ApiError::InvalidRequest(_))
                ),
                "{token} {group:?} {from} {to}"
            );
        }
        // A day cursor has no key; a keyed one for the day group is refused.
        let day = encode_cursor(
            UsageGroup::Day,
            &UsageCursor::after(&row("D2026-12-04", "")),
        );
        assert!(decode_cursor(&day, UsageGroup::Day, "D2026-12-01", "D2026-12-31").is_ok());
        let keyed = URL_SAFE_NO_PAD.encode("day:2026-12-04:main");
        assert!(decode_cursor(&keyed, UsageGroup::Day, "D2026-12-01", "D2026-12-31").is_err());
        let bad_day = URL_SAFE_NO_PAD.encode("session:2026-13-04:main");
        assert!(
            decode_cursor(&bad_day, UsageGroup::Session, "D2026-12-01", "D2026-12-31").is_err()
        );
    }

    #[test]
    fn a_page_goes_on_after_its_last_row_when_the_count_or_the_bytes_cut_it() {
        let read: Vec<UsageRow> = (0..4)
            .map(|i| row("D2026-12-04", &format!("s{i}")))
            .collect();
        let cursor_of = |next: Option<String>| {
            decode_cursor(
                &next.unwrap(),
                UsageGroup::Session,
                "D2026-12-04",
                "D2026-12-04",
            )
            .unwrap()
            .key
        };
        // The store read one more than the limit: more remain.
        let (rows, next) = usage_page(UsageGroup::Session, read.clone(), 3, usize::MAX);
        assert_eq!(rows.len(), 3);
        assert_eq!(cursor_of(next), "s2");
        // All read fit: the last page.
        let (rows, next) = usage_page(UsageGroup::Session, read.clone(), 4, usize::MAX);
        assert_eq!((rows.len(), next), (4, None));
        // The bytes cut it after two rows.
        let one =
            serde_json::to_vec(&usage_page(UsageGroup::Session, read.clone(), 1, usize::MAX).0)
                .unwrap()
                .len();
        let bytes = page::ENVELOPE_BYTES + 2 * one;
        let (rows, next) = usage_page(UsageGroup::Session, read.clone(), 4, bytes);
        assert_eq!(rows.len(), 2);
        assert_eq!(cursor_of(next), "s1");
        // However small the bound, one row moves the reader on; nothing read, no cursor.
        let (rows, next) = usage_page(UsageGroup::Session, read, 4, 1);
        assert_eq!(rows.len(), 1);
        assert_eq!(cursor_of(next), "s0");
        assert_eq!(
            usage_page(UsageGroup::Day, Vec::new(), 4, 1),
            (Vec::new(), None)
        );
    }

    #[test]
    fn a_limit_outside_one_to_a_thousand_is_refused() {
        assert_eq!(page_limit(None).unwrap(), DEFAULT_LIST_PAGE);
        assert_eq!(page_limit(Some(1000)).unwrap(), 1000);
        for bad in [0, 1001] {
            assert!(matches!(
                page_limit(Some(bad)),
                Err(ApiError::InvalidRequest(_))
            ));
        }
    }
}
