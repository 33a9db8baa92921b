//! Spend control (issue 21), the pure part: what a model's tokens cost, and whether one more
//! model call fits a run's budget.
//!
//! Money is counted in micro-dollars (`u64`): a price in USD per million tokens times a token
//! count is exactly micro-dollars, so sums never drift. A model without a price has no cost
//! (`costUsd: null`); a run whose budget is in USD cannot call such a model.

use crate::ids::TenantId;
use crate::run::Usage;
use crate::store::StoreResult;
use async_trait::async_trait;
use chrono::{Datelike, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// USD per million tokens (`cacheRead` / `cache_read` and `cacheWrite` / `cache_write`: the
/// config file's TOML takes either spelling).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// USD per million prompt tokens not read from or written to the cache.
    pub input: f64,
    /// USD per million output tokens.
    pub output: f64,
    /// USD per million prompt tokens read from the cache (default 0).
    #[serde(default, alias = "cache_read")]
    pub cache_read: f64,
    /// USD per million prompt tokens written to the cache (default 0).
    #[serde(default, alias = "cache_write")]
    pub cache_write: f64,
}

impl Price {
    /// What `usage` costs, in micro-dollars (rounded up): cached prompt tokens at the cache
    /// prices, the rest of the prompt at the input price.
    pub fn cost_micros(&self, usage: &Usage) -> u64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let fresh = usage.input_tokens.saturating_sub(cached);
        let micros = fresh as f64 * self.input
            + usage.cache_read_tokens as f64 * self.cache_read
            + usage.cache_write_tokens as f64 * self.cache_write
            + usage.output_tokens as f64 * self.output;
        micros.max(0.0).ceil() as u64
    }

    /// The problem with this price, if any (a negative or non-finite number).
    pub fn problem(&self) -> Option<String> {
        let all = [self.input, self.output, self.cache_read, self.cache_write];
        (!all.iter().all(|p| p.is_finite() && *p >= 0.0))
            .then(|| "prices must be finite numbers of USD per million tokens, at least 0".into())
    }
}

/// List prices of the models the providers know, in USD per million tokens, as published on
/// 2026-11-30 (openai.com/api/pricing, anthropic.com/pricing). The deployment's
/// `[prices."provider/model"]` entries override or add to them.
const BUILTIN: &[(&str, Price)] = &[
    ("openai/gpt-4o", price(2.50, 10.00, 1.25, 0.0)),
    ("openai/gpt-4o-mini", price(0.15, 0.60, 0.075, 0.0)),
    ("openai/gpt-4.1", price(2.00, 8.00, 0.50, 0.0)),
    ("openai/gpt-4.1-mini", price(0.40, 1.60, 0.10, 0.0)),
    ("openai/gpt-4.1-nano", price(0.10, 0.40, 0.025, 0.0)),
    ("openai/o3", price(2.00, 8.00, 0.50, 0.0)),
    ("openai/o4-mini", price(1.10, 4.40, 0.275, 0.0)),
    (
        "anthropic/claude-opus-4-1",
        price(15.00, 75.00, 1.50, 18.75),
    ),
    (
        "anthropic/claude-sonnet-4-5",
        price(3.00, 15.00, 0.30, 3.75),
    ),
    (
        "anthropic/claude-sonnet-4-0",
        price(3.00, 15.00, 0.30, 3.75),
    ),
    ("anthropic/claude-haiku-4-5", price(1.00, 5.00, 0.10, 1.25)),
    (
        "anthropic/claude-3-5-haiku-latest",
        price(0.80, 4.00, 0.08, 1.00),
    ),
    // The built-in demo model runs in process: free.
    ("demo/agentlane-demo", price(0.0, 0.0, 0.0, 0.0)),
];

const fn price(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
    Price {
        input,
        output,
        cache_read,
        cache_write,
    }
}

/// The prices a deployment charges by, per `provider/model`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

// Prices are checked finite at start-up: equality is total here.
impl Eq for PriceTable {}

impl PriceTable {
    /// The built-in list prices.
    pub fn builtin() -> Self {
        Self {
            prices: BUILTIN
                .iter()
                .map(|(model, price)| ((*model).to_owned(), *price))
                .collect(),
        }
    }

    /// These prices, with `overrides` replacing or adding entries.
    pub fn with_overrides(mut self, overrides: &BTreeMap<String, Price>) -> Self {
        for (model, price) in overrides {
            self.prices.insert(model.clone(), *price);
        }
        self
    }

    /// The price of `model` (`provider/model`), if it has one.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }

    /// What `usage` of `model` costs in micro-dollars; `None` when the model has no price.
    pub fn cost_micros(&self, model: &str, usage: &Usage) -> Option<u64> {
        self.price(model).map(|p| p.cost_micros(usage))
    }
}

/// The price a tenant-defined agent's call is charged at: the deployment's, raised field by
/// field where the agent's own entry (`prices` on its spec) is higher. An agent can never lower
/// a price or price a model the deployment leaves unpriced: the operator's table decides.
pub fn agent_price(deployment: Option<&Price>, agent: Option<&Price>) -> Option<Price> {
    let base = *deployment?;
    let Some(own) = agent else {
        return Some(base);
    };
    Some(Price {
        input: base.input.max(own.input),
        output: base.output.max(own.output),
        cache_read: base.cache_read.max(own.cache_read),
        cache_write: base.cache_write.max(own.cache_write),
    })
}

/// Why an agent's own price for a model is refused, naming the field (`input`, `output`,
/// `cacheRead`, `cacheWrite`): it is below the deployment's, or the deployment has no price
/// for the model at all (`None`: the entry only raises prices).
pub fn agent_price_problem(deployment: Option<&Price>, agent: &Price) -> Option<String> {
    let Some(base) = deployment else {
        return Some(
            "the deployment has no price for this model; an agent may only raise the \
             deployment's prices"
                .to_owned(),
        );
    };
    let fields = [
        ("input", agent.input, base.input),
        ("output", agent.output, base.output),
        ("cacheRead", agent.cache_read, base.cache_read),
        ("cacheWrite", agent.cache_write, base.cache_write),
    ];
    fields
        .iter()
        .find(|(_, own, base)| own < base)
        .map(|(name, own, base)| {
            format!(
                "{name}: {own} is below the deployment's {base} USD per million tokens; an agent \
             may only raise the deployment's prices"
            )
        })
}

/// The most a model call writes when neither its turn nor its agent sets `maxOutputTokens`:
/// the model's usual answer size (reasoning tokens included for reasoning models), by
/// `provider/model` prefix; [`DEFAULT_OUTPUT_TOKENS`] for a model not listed. The cap is sent
/// to the provider with every call and is what the call's budget reservation holds.
const OUTPUT_TOKENS: &[(&str, u32)] = &[
    ("openai/o3", 8_192),
    ("openai/o4-mini", 8_192),
    ("openai/o1", 8_192),
    ("openai/gpt-5", 8_192),
    ("openai/gpt-4", 2_048),
    ("anthropic/claude", 2_048),
    ("demo/", 512),
];

/// The output cap of a model the table does not list.
pub const DEFAULT_OUTPUT_TOKENS: u32 = 2_048;

/// The largest `maxOutputTokens` a turn or an agent may ask for.
pub const MAX_OUTPUT_TOKENS: u32 = 128_000;

/// The default output cap of `model` (`provider/model`), from a small table of usual answer
/// sizes.
pub fn default_output_tokens(model: &str) -> u32 {
    OUTPUT_TOKENS
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map_or(DEFAULT_OUTPUT_TOKENS, |(_, cap)| *cap)
}

/// The problem with a `maxOutputTokens` under `at` (the field's name), if any.
pub fn output_tokens_problem(at: &str, cap: u32) -> Option<String> {
    (!(1..=MAX_OUTPUT_TOKENS).contains(&cap))
        .then(|| format!("{at}: must be from 1 to {MAX_OUTPUT_TOKENS} tokens"))
}

/// Micro-dollars as USD.
pub fn usd(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// USD as micro-dollars (rounded down: a budget never grows by rounding).
pub fn micros(usd: f64) -> u64 {
    (usd.max(0.0) * 1_000_000.0).floor() as u64
}

/// A spent amount in USD (a sum of whole micro-dollars) back as micro-dollars.
pub fn spent_micros(usd: f64) -> u64 {
    (usd.max(0.0) * 1_000_000.0).round() as u64
}

/// What one run may spend over all its model calls (retries, fallbacks, tool rounds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RunBudget {
    /// At most this many USD (more than 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(exclusive_minimum = 0))]
    pub max_cost_usd: Option<f64>,
    /// At most this many tokens, input and output together (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1))]
    pub max_tokens: Option<u64>,
}

// JSON has no NaN and budgets are checked finite before use: equality is total here.
impl Eq for RunBudget {}

impl RunBudget {
    /// No limit at all.
    pub fn is_unlimited(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_tokens.is_none()
    }

    /// This budget where set, else `fallback`'s, field by field (a turn's over its agent's).
    pub fn or(self, fallback: Option<RunBudget>) -> RunBudget {
        let fallback = fallback.unwrap_or_default();
        RunBudget {
            max_cost_usd: self.max_cost_usd.or(fallback.max_cost_usd),
            max_tokens: self.max_tokens.or(fallback.max_tokens),
        }
    }

    /// The problem with this budget under `at` (the field's name), if any.
    pub fn problem(&self, at: &str) -> Option<String> {
        if let Some(usd) = self.max_cost_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Some(format!("{at}.maxCostUsd must be a positive number of USD"));
        }
        if self.max_tokens == Some(0) {
            return Some(format!("{at}.maxTokens must be at least 1"));
        }
        None
    }
}

/// What a run has spent so far: tokens, and micro-dollars where every call was priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spent {
    /// Tokens over the run's model calls so far (prompt and output).
    pub tokens: u64,
    /// Micro-dollars (USD × 10⁶) over its priced calls.
    pub micros: u64,
}

/// The worst case of the next model call: its prompt estimate plus the most it may write.
#[derive(Debug, Clone, PartialEq)]
pub struct CallAsk {
    /// `provider/model`.
    pub model: String,
    /// The estimated prompt (system prompt, history and tools).
    pub prompt_tokens: u64,
    /// The most the call may write (the request's output cap).
    pub max_output_tokens: u64,
    /// The model's price (`None`: unpriced).
    pub price: Option<Price>,
}

impl CallAsk {
    /// The call's worst-case tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.max_output_tokens)
    }

    /// The call's worst-case cost in micro-dollars (`None`: unpriced).
    pub fn micros(&self) -> Option<u64> {
        self.price.map(|p| {
            p.cost_micros(&Usage {
                input_tokens: self.prompt_tokens,
                output_tokens: self.max_output_tokens,
                ..Default::default()
            })
        })
    }
}

/// Why a call does not fit.
#[derive(Debug, Clone, PartialEq)]
pub enum OverBudget {
    /// The budget is in USD and the model has no price.
    Unpriced {
        /// The model asked for (`provider/model`).
        model: String,
    },
    /// The call's worst-case tokens would pass the run's `maxTokens`.
    Tokens {
        /// Tokens the run has used so far.
        spent: u64,
        /// The call's worst-case tokens.
        ask: u64,
        /// The run's `maxTokens`.
        max: u64,
    },
    /// The call's worst-case cost would pass the run's `maxCostUsd`.
    Cost {
        /// Micro-dollars the run has spent so far.
        spent: u64,
        /// The call's worst-case cost (micro-dollars).
        ask: u64,
        /// The run's `maxCostUsd` in micro-dollars.
        max: u64,
    },
}

impl OverBudget {
    /// The run's error code.
    pub const CODE: &'static str = "budget_exceeded";

    /// A sentence for the run's error.
    pub fn message(&self) -> String {
        match self {
            OverBudget::Unpriced { model } => format!(
                "the run has a USD budget and {model} has no price: set [prices.\"{model}\"]"
            ),
            OverBudget::Tokens { spent, ask, max } => format!(
                "the next model call may use {ask} tokens; the run has used {spent} of its \
                 maxTokens {max}"
            ),
            OverBudget::Cost { spent, ask, max } => format!(
                "the next model call may cost ${:.6}; the run has spent ${:.6} of its \
                 maxCostUsd ${:.6}",
                usd(*ask),
                usd(*spent),
                usd(*max)
            ),
        }
    }
}

/// Whether the call `ask` fits `budget` after `spent`: the worst case must fit, so a run never
/// passes its budget by more than the estimate of a prompt is off.
pub fn check_call(budget: &RunBudget, spent: Spent, ask: &CallAsk) -> Result<(), OverBudget> {
    if let Some(max) = budget.max_tokens {
        let ask = ask.tokens();
        if spent.tokens.saturating_add(ask) > max {
            return Err(OverBudget::Tokens {
                spent: spent.tokens,
                ask,
                max,
            });
        }
    }
    if let Some(max_usd) = budget.max_cost_usd {
        let Some(ask_micros) = ask.micros() else {
            return Err(OverBudget::Unpriced {
                model: ask.model.clone(),
            });
        };
        let max = micros(max_usd);
        if spent.micros.saturating_add(ask_micros) > max {
            return Err(OverBudget::Cost {
                spent: spent.micros,
                ask: ask_micros,
                max,
            });
        }
    }
    Ok(())
}

/// What one tenant may spend per UTC day and per calendar month (UTC), in USD and tokens
/// (`[limits.tenant]` `daily_usd`, `monthly_usd`, `daily_tokens`, `monthly_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TenantBudget {
    /// USD per UTC day; `None`: no daily USD limit.
    pub daily_usd: Option<f64>,
    /// USD per calendar month (UTC); `None`: no monthly USD limit.
    pub monthly_usd: Option<f64>,
    /// Tokens per UTC day; `None`: no daily token limit.
    pub daily_tokens: Option<u64>,
    /// Tokens per calendar month (UTC); `None`: no monthly token limit.
    pub monthly_tokens: Option<u64>,
}

// Budgets are checked finite before use (config validation): equality is total here.
impl Eq for TenantBudget {}

impl TenantBudget {
    /// No limit at all (the ledger is then not touched).
    pub fn is_unlimited(&self) -> bool {
        self.daily_usd.is_none()
            && self.monthly_usd.is_none()
            && self.daily_tokens.is_none()
            && self.monthly_tokens.is_none()
    }

    /// The problem with these numbers, if any.
    pub fn problem(&self) -> Option<String> {
        for usd in [self.daily_usd, self.monthly_usd].into_iter().flatten() {
            if !(usd.is_finite() && usd >= 0.0) {
                return Some("daily_usd and monthly_usd must be numbers of USD, at least 0".into());
            }
        }
        None
    }

    /// The periods counted at `now` for a tenant with a budget: the day's, then the month's,
    /// each with its limits (`None` where that period is not limited, counted all the same so
    /// that usage can be read per day and per month). Empty without any budget.
    pub fn caps(&self, now: u64) -> Vec<PeriodCap> {
        if self.is_unlimited() {
            return Vec::new();
        }
        let (day, day_end) = day_period(now);
        let (month, month_end) = month_period(now);
        vec![
            PeriodCap {
                period: day,
                ends_at: day_end,
                max_micros: self.daily_usd.map(micros),
                max_tokens: self.daily_tokens,
            },
            PeriodCap {
                period: month,
                ends_at: month_end,
                max_micros: self.monthly_usd.map(micros),
                max_tokens: self.monthly_tokens,
            },
        ]
    }

    /// The limited periods among [`caps`](Self::caps).
    pub fn limited_caps(&self, now: u64) -> Vec<PeriodCap> {
        self.caps(now)
            .into_iter()
            .filter(|c| c.max_micros.is_some() || c.max_tokens.is_some())
            .collect()
    }
}

/// The date of a period key: `2026-12-04` of `D2026-12-04`, `2026-12` of `M2026-12`.
pub fn period_date(period: &str) -> &str {
    period.get(1..).unwrap_or_default()
}

/// `daily` or `monthly`, by a period key's kind.
pub fn period_kind(period: &str) -> &'static str {
    if period.starts_with('M') {
        "monthly"
    } else {
        "daily"
    }
}

/// The UTC day of `now` (ms) as a period key (`D2026-12-04`) and when it ends (ms).
pub fn day_period(now: u64) -> (String, u64) {
    let at = utc(now);
    let start = Utc
        .with_ymd_and_hms(at.year(), at.month(), at.day(), 0, 0, 0)
        .single()
        .map_or(0, |d| d.timestamp_millis());
    let end = u64::try_from(start).unwrap_or(0) + 86_400_000;
    (format!("D{}", at.format("%Y-%m-%d")), end)
}

/// The UTC month of `now` (ms) as a period key (`M2026-12`) and when it ends (ms).
pub fn month_period(now: u64) -> (String, u64) {
    let at = utc(now);
    let (year, month) = if at.month() == 12 {
        (at.year() + 1, 1)
    } else {
        (at.year(), at.month() + 1)
    };
    let end = Utc
        .with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .map_or(0, |d| d.timestamp_millis());
    (
        format!("M{}", at.format("%Y-%m")),
        u64::try_from(end).unwrap_or(0),
    )
}

fn utc(now: u64) -> chrono::DateTime<Utc> {
    Utc.timestamp_millis_opt(i64::try_from(now).unwrap_or(i64::MAX))
        .single()
        .unwrap_or_default()
}

/// One tenant period's limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodCap {
    /// `D2026-12-04` or `M2026-12`.
    pub period: String,
    /// When the period ends (ms): a refused turn may retry then.
    pub ends_at: u64,
    /// The period's cap in micro-dollars; `None`: not limited in USD.
    pub max_micros: Option<u64>,
    /// The period's cap in tokens; `None`: not limited in tokens.
    pub max_tokens: Option<u64>,
}

/// A reservation of one model call's worst case, held until the call is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// `<runId>.<attempt index>`: unique, and names the attempt whose ledger entry settles it.
    pub id: String,
    /// The call's worst-case cost (micro-dollars; 0 when unpriced).
    pub micros: u64,
    /// The call's worst-case tokens.
    pub tokens: u64,
    /// When it was taken (ms).
    pub at: u64,
}

impl Hold {
    /// The run and attempt index the hold is for.
    pub fn attempt(&self) -> Option<(&str, u32)> {
        let (run, index) = self.id.rsplit_once('.')?;
        Some((run, index.parse().ok()?))
    }

    /// The run the hold is for (an attempt's hold or a side call's, `<runId>.<n>-compaction`).
    pub fn run_id(&self) -> Option<&str> {
        self.id.rsplit_once('.').map(|(run, _)| run)
    }
}

/// What a settled call is counted under besides its periods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendTags {
    /// The day (`D2026-12-04`) it is counted in, and when that day ends (ms).
    pub day: String,
    /// When that day ends (ms since the epoch).
    pub day_ends_at: u64,
    /// The agent the run ran (`main` by default).
    pub agent: String,
    /// `provider/model`.
    pub model: String,
    /// The run's session key.
    pub session: String,
}

impl SpendTags {
    /// `(group, key)` of each tag.
    pub fn groups(&self) -> [(UsageGroup, &str); 3] {
        [
            (UsageGroup::Agent, self.agent.as_str()),
            (UsageGroup::Model, self.model.as_str()),
            (UsageGroup::Session, self.session.as_str()),
        ]
    }
}

/// How usage is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum UsageGroup {
    /// By UTC day only.
    Day,
    /// By day and agent.
    Agent,
    /// By day and model (`provider/model`).
    Model,
    /// By day and session key.
    Session,
}

impl UsageGroup {
    /// `day`, `agent`, `model`, `session`.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageGroup::Day => "day",
            UsageGroup::Agent => "agent",
            UsageGroup::Model => "model",
            UsageGroup::Session => "session",
        }
    }
}

/// One row of counted usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// `D2026-12-04`.
    pub day: String,
    /// The agent, model or session (empty by day).
    pub key: String,
    /// Micro-dollars counted (USD × 10⁶).
    pub micros: u64,
    /// Tokens counted.
    pub tokens: u64,
}

/// Where a page of usage rows starts: after the row of this day and key (the last row of the
/// previous page), in the order [`SpendLedger::usage`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageCursor {
    /// `D2026-12-04`.
    pub day: String,
    /// The agent, model or session (empty by day).
    pub key: String,
}

impl UsageCursor {
    /// The cursor after `row`.
    pub fn after(row: &UsageRow) -> Self {
        Self {
            day: row.day.clone(),
            key: row.key.clone(),
        }
    }

    /// Whether `row` comes after this cursor (by day, then key, bytewise).
    pub fn precedes(&self, row: &UsageRow) -> bool {
        (row.day.as_str(), row.key.as_str()) > (self.day.as_str(), self.key.as_str())
    }
}

/// What a reservation got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// The hold was added to every period.
    Granted,
    /// `period` would pass its cap; it ends at `ends_at`.
    Refused {
        /// The period key (`D2026-12-04`, `M2026-12`).
        period: String,
        /// When the period ends (ms since the epoch): a refused turn may retry then.
        ends_at: u64,
    },
}

/// What a tenant's period holds: settled spend plus open holds, and the holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeriodSpend {
    /// Micro-dollars counted: settled spend plus open holds.
    pub micros: u64,
    /// Tokens counted: settled spend plus open holds.
    pub tokens: u64,
    /// The open holds (calls not yet settled).
    pub holds: Vec<Hold>,
}

/// Where tenants' period counters are kept (the same database or table as the sessions). A
/// counter counts settled spend and open holds together, so the check at reserve time is one
/// comparison and concurrent reservations can never pass a cap.
#[async_trait]
pub trait SpendLedger: Send + Sync + 'static {
    /// Adds `hold` to every period of `caps` in one atomic write, when each stays within its
    /// caps with it; else changes nothing and names the first period that would not.
    async fn reserve(
        &self,
        tenant: &TenantId,
        caps: &[PeriodCap],
        hold: &Hold,
    ) -> StoreResult<Reserved>;

    /// Replaces `hold` in `periods` by what the call spent, and adds the spend to the day's
    /// counters of `tags` (its agent, model and session), in one atomic write. A hold already
    /// settled, or never taken, changes nothing; a hold [cleared](Self::clear) meanwhile (its
    /// call outlived its pickup) adds what the call spent beyond what the clear counted, so
    /// every call is paid for once, whatever its length.
    async fn settle(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()>;

    /// Settles `hold` for a call whose pickup is provably gone (its run ended, or a later
    /// pickup of the run holds the lock) to `spent`, what the run's attempt ledger says, as
    /// [`settle`](Self::settle) does, and remembers it: a late [`settle`](Self::settle) of the
    /// same hold (the old pickup's call ended after all) then adds only the difference. A hold
    /// not open changes nothing.
    async fn clear(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()>;

    /// The tenant's counted spend from day `from` to day `to` (`D2026-12-01`, inclusive),
    /// by day, or by the day and the agent, model or session: ordered by day, then key
    /// (bytewise), only the rows after `after`, and at most `count` of them: a page of the
    /// range, whose reading stops there however long the range.
    async fn usage(
        &self,
        tenant: &TenantId,
        group: UsageGroup,
        from: &str,
        to: &str,
        after: Option<&UsageCursor>,
        count: usize,
    ) -> StoreResult<Vec<UsageRow>>;

    /// What `period` holds for `tenant` (zero when nothing was counted).
    async fn period_spend(&self, tenant: &TenantId, period: &str) -> StoreResult<PeriodSpend>;

    /// What each of `periods` holds, in order (one read where the store can batch them).
    async fn periods_spend(
        &self,
        tenant: &TenantId,
        periods: &[String],
    ) -> StoreResult<Vec<PeriodSpend>> {
        let mut out = Vec::with_capacity(periods.len());
        for period in periods {
            out.push(self.period_spend(tenant, period).await?);
        }
        Ok(out)
    }
}

/// A tenant's budget of each tenant: `[limits.tenant]` with `[limits.tenants.<name>]`'s keys
/// over it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantBudgets {
    /// The budget of a tenant without its own (`[limits.tenant]`).
    pub default: TenantBudget,
    /// Each named tenant's budget, by tenant id (`[limits.tenants.<name>]` over the default).
    pub tenants: BTreeMap<String, TenantBudget>,
}

impl TenantBudgets {
    /// `tenant`'s budget.
    pub fn for_tenant(&self, tenant: &TenantId) -> TenantBudget {
        self.tenants
            .get(tenant.as_str())
            .copied()
            .unwrap_or(self.default)
    }

    /// Whether no tenant has a budget.
    pub fn is_unlimited(&self) -> bool {
        self.default.is_unlimited() && self.tenants.values().all(TenantBudget::is_unlimited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(prompt: u64, output: u64, price: Option<Price>) -> CallAsk {
        CallAsk {
            model: "openai/gpt-4o-mini".into(),
            prompt_tokens: prompt,
            max_output_tokens: output,
            price,
        }
    }

    #[test]
    fn a_price_times_tokens_is_micro_dollars() {
        let table = PriceTable::builtin();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 2_000,
            ..Default::default()
        };
        // 1M input at $0.15 + 2k output at $0.60/M = $0.1512
        assert_eq!(
            table.cost_micros("openai/gpt-4o-mini", &usage),
            Some(151_200)
        );
        assert_eq!(table.cost_micros("acme/unknown", &usage), None);
        let cheap = BTreeMap::from([("acme/unknown".to_owned(), price(1.0, 2.0, 0.0, 0.0))]);
        let table = table.with_overrides(&cheap);
        assert_eq!(table.cost_micros("acme/unknown", &usage), Some(1_004_000));
        assert_eq!(usd(151_200), 0.1512);
        assert_eq!(micros(0.1512), 151_200);
        // Cached prompt tokens at the cache prices: 600 fresh at $1, 300 read at $0.1, 100
        // written at $1.25, 10 out at $2 = 600 + 30 + 125 + 20
        let cached = Usage {
            input_tokens: 1_000,
            output_tokens: 10,
            cache_read_tokens: 300,
            cache_write_tokens: 100,
        };
        assert_eq!(price(1.0, 2.0, 0.1, 1.25).cost_micros(&cached), 775);
        assert!(price(-1.0, 0.0, 0.0, 0.0).problem().is_some());
        assert!(price(f64::NAN, 0.0, 0.0, 0.0).problem().is_some());
    }

    #[test]
    fn an_agents_price_only_raises_the_deployments() {
        let base = price(1.0, 2.0, 0.1, 1.25);
        let cases: Vec<(Option<Price>, Option<Price>, Option<Price>)> = vec![
            // no override: the deployment's
            (Some(base), None, Some(base)),
            // priced at 0: still the deployment's
            (Some(base), Some(price(0.0, 0.0, 0.0, 0.0)), Some(base)),
            // a higher price wins, field by field
            (
                Some(base),
                Some(price(10.0, 1.0, 0.0, 2.0)),
                Some(price(10.0, 2.0, 0.1, 2.0)),
            ),
            // a model the deployment leaves unpriced stays unpriced
            (None, Some(price(5.0, 5.0, 0.0, 0.0)), None),
            (None, None, None),
        ];
        for (index, (deployment, agent, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                agent_price(deployment.as_ref(), agent.as_ref()),
                expected,
                "case #{index}"
            );
        }
        let problem = |d: Option<Price>, a: Price| agent_price_problem(d.as_ref(), &a);
        assert_eq!(problem(Some(base), price(1.0, 2.0, 0.1, 1.25)), None);
        assert_eq!(problem(Some(base), price(10.0, 20.0, 1.0, 12.5)), None);
        let zero = problem(Some(base), price(0.0, 0.0, 0.0, 0.0)).unwrap_or_default();
        assert!(zero.starts_with("input:"), "{zero}");
        let cached = problem(Some(base), price(1.0, 2.0, 0.0, 1.25)).unwrap_or_default();
        assert!(cached.starts_with("cacheRead:"), "{cached}");
        assert!(problem(None, price(1.0, 1.0, 0.0, 0.0)).is_some());
    }

    #[test]
    fn a_models_default_output_cap_is_its_usual_answer() {
        let cases = [
            ("openai/gpt-4o-mini", 2_048),
            ("openai/o3", 8_192),
            ("openai/o4-mini", 8_192),
            ("anthropic/claude-sonnet-4-5", 2_048),
            ("demo/agentlane-demo", 512),
            ("local/llama3.2", DEFAULT_OUTPUT_TOKENS),
        ];
        for (model, cap) in cases {
            assert_eq!(default_output_tokens(model), cap, "{model}");
        }
        assert!(output_tokens_problem("maxOutputTokens", 0).is_some());
        assert!(output_tokens_problem("maxOutputTokens", 1).is_none());
        assert!(output_tokens_problem("maxOutputTokens", MAX_OUTPUT_TOKENS).is_none());
        assert!(output_tokens_problem("maxOutputTokens", MAX_OUTPUT_TOKENS + 1).is_some());
    }

    #[test]
    fn a_call_fits_only_when_its_worst_case_fits() {
        let mini = PriceTable::builtin().price("openai/gpt-4o-mini").copied();
        let tokens = RunBudget {
            max_tokens: Some(1_000),
            ..Default::default()
        };
        let dollars = RunBudget {
            max_cost_usd: Some(0.001),
            ..Default::default()
        };
        let spent = |tokens, micros| Spent { tokens, micros };
        let unlimited = RunBudget::default();
        let cases: Vec<(&RunBudget, Spent, CallAsk, &str)> = vec![
            (&unlimited, spent(1 << 40, 1 << 40), ask(9, 9, None), "ok"),
            (&tokens, spent(0, 0), ask(400, 600, None), "ok"),
            (&tokens, spent(1, 0), ask(400, 600, None), "tokens"),
            (&tokens, spent(900, 0), ask(50, 100, None), "tokens"),
            // 1,000 prompt at 0.15 + 1,000 output at 0.60 = 750 micros, within 1,000
            (&dollars, spent(0, 0), ask(1_000, 1_000, mini), "ok"),
            (&dollars, spent(0, 250), ask(1_000, 1_000, mini), "ok"),
            (&dollars, spent(0, 251), ask(1_000, 1_000, mini), "cost"),
            (&dollars, spent(0, 0), ask(1, 1, None), "unpriced"),
        ];
        for (index, (budget, spent, ask, expected)) in cases.into_iter().enumerate() {
            let got = match check_call(budget, spent, &ask) {
                Ok(()) => "ok",
                Err(OverBudget::Tokens { .. }) => "tokens",
                Err(OverBudget::Cost { .. }) => "cost",
                Err(OverBudget::Unpriced { .. }) => "unpriced",
            };
            assert_eq!(got, expected, "case #{index}");
        }
    }

    #[test]
    fn periods_are_utc_days_and_months() {
        // 2026-12-31T23:59:59.999Z
        let now = 1_798_761_599_999;
        assert_eq!(day_period(now), ("D2026-12-31".into(), now + 1));
        assert_eq!(month_period(now), ("M2026-12".into(), now + 1));
        assert_eq!(day_period(now + 1).0, "D2027-01-01");
        let budget = TenantBudget {
            daily_usd: Some(20.0),
            monthly_tokens: Some(1_000),
            ..Default::default()
        };
        let caps = budget.caps(now);
        assert_eq!(caps.len(), 2);
        assert_eq!(caps[0].max_micros, Some(20_000_000));
        assert_eq!(caps[0].max_tokens, None);
        assert_eq!(caps[1].max_tokens, Some(1_000));
        assert!(TenantBudget::default().caps(now).is_empty());
        let hold = Hold {
            id: "run_01ab.3".into(),
            micros: 1,
            tokens: 1,
            at: 0,
        };
        assert_eq!(hold.attempt(), Some(("run_01ab", 3)));
        assert_eq!(hold.run_id(), Some("run_01ab"));
        let side = Hold {
            id: "run_01ab.4-compaction".into(),
            ..hold
        };
        assert_eq!((side.attempt(), side.run_id()), (None, Some("run_01ab")));
    }

    #[test]
    fn a_turns_budget_wins_over_its_agents_field_by_field() {
        let turn = RunBudget {
            max_tokens: Some(5),
            ..Default::default()
        };
        let agent = RunBudget {
            max_tokens: Some(50),
            max_cost_usd: Some(1.0),
        };
        assert_eq!(
            turn.or(Some(agent)),
            RunBudget {
                max_tokens: Some(5),
                max_cost_usd: Some(1.0)
            }
        );
        assert!(RunBudget::default().or(None).is_unlimited());
        assert!(
            RunBudget {
                max_cost_usd: Some(0.0),
                ..Default::default()
            }
            .problem("budget")
            .is_some()
        );
    }
}
