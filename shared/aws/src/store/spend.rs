//! [`SpendLedger`] for [`DynamoStore`]: one item per tenant period.
//!
//! | `PK` | `SK` | attributes |
//! |---|---|---|
//! | `T#{t}#SPEND` | `D2026-12-04` / `M2026-12` | `m` (micro-dollars), `k` (tokens): settled spend plus open holds; `o_{holdId}` (`micros:tokens:at`) per open hold; `expiresAt` |
//!
//! - Reserve: one `TransactWriteItems` with an update per limited period: `SET` the hold,
//!   `ADD` its amounts, conditional on the hold not being there and on `m` and `k` staying
//!   within the caps with it. DynamoDB serialises the writes to one item, so a burst of
//!   reservations never passes a cap. A failed condition is read once: a hold already there
//!   is a retried reservation (granted), else the period is full.
//! - Settle: one `TransactWriteItems` that `REMOVE`s the hold and `ADD`s what was spent minus
//!   what was held, conditional on the hold being there as taken (so it settles once).
//! - The settlement also `ADD`s the call's spend to the day's counter of its agent, its model
//!   and its session (`SK` `G#agent#D2026-12-04#<agentId>`, ...), in the same transaction, so
//!   usage by day, agent, model or session is one `Query` over a range of sort keys.
//! - `expiresAt` (TTL) is 400 days after the period ends: a year of history for reading.

use super::DynamoStore;
use super::error::{build_error, classify};
use super::item::{EXPIRES_AT, Item, n, s};
use super::keys::{PK, SK};
use agentlane_core::spend::{
    Hold, PeriodCap, PeriodSpend, Reserved, SpendTags, Spent, UsageGroup, UsageRow,
};
use agentlane_core::{SpendLedger, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, TransactWriteItem, Update};
use std::collections::HashMap;

const MICROS: &str = "m";
const TOKENS: &str = "k";
const HOLD_PREFIX: &str = "o_";
/// How long a period's item is kept after the period ends (TTL, seconds).
const KEEP_AFTER_SECS: u64 = 400 * 86_400;

pub(super) fn spend_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#SPEND")
}

/// `G#agent#D2026-12-04#<agentId>`.
fn group_sk(group: UsageGroup, day: &str, key: &str) -> String {
    format!("G#{}#{day}#{key}", group.as_str())
}

fn hold_attr(id: &str) -> String {
    format!("{HOLD_PREFIX}{id}")
}

fn hold_value(hold: &Hold) -> AttributeValue {
    s(format!("{}:{}:{}", hold.micros, hold.tokens, hold.at))
}

fn signed(value: i128) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn number(item: &Item, name: &str) -> u64 {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(0, |v| u64::try_from(v).unwrap_or(0))
}

/// The open holds of an item.
fn holds_of(item: &Item) -> Vec<Hold> {
    let mut holds: Vec<Hold> = item
        .iter()
        .filter_map(|(name, value)| {
            let id = name.strip_prefix(HOLD_PREFIX)?;
            let mut parts = value.as_s().ok()?.split(':').map(str::parse::<u64>);
            Some(Hold {
                id: id.to_owned(),
                micros: parts.next()?.ok()?,
                tokens: parts.next()?.ok()?,
                at: parts.next()?.ok()?,
            })
        })
        .collect();
    holds.sort_by_key(|h| h.at);
    holds
}

pub(super) fn spend_of(item: &Item) -> PeriodSpend {
    PeriodSpend {
        micros: number(item, MICROS),
        tokens: number(item, TOKENS),
        holds: holds_of(item),
    }
}

impl DynamoStore {
    fn reserve_update(
        &self,
        tenant: &TenantId,
        cap: &PeriodCap,
        hold: &Hold,
    ) -> StoreResult<TransactWriteItem> {
        let mut conditions = vec!["attribute_not_exists(#o)".to_owned()];
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(&cap.period))
            .update_expression("SET #o = :hold, #x = :ttl ADD #m :m, #k :k")
            .expression_attribute_names("#o", hold_attr(&hold.id))
            .expression_attribute_names("#m", MICROS)
            .expression_attribute_names("#k", TOKENS)
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":hold", hold_value(hold))
            .expression_attribute_values(":ttl", n(cap.ends_at / 1000 + KEEP_AFTER_SECS))
            .expression_attribute_values(":m", n(hold.micros))
            .expression_attribute_values(":k", n(hold.tokens));
        if let Some(max) = cap.max_micros {
            conditions.push("(attribute_not_exists(#m) OR #m <= :capm)".to_owned());
            update = update.expression_attribute_values(":capm", n(max - hold.micros));
        }
        if let Some(max) = cap.max_tokens {
            conditions.push("(attribute_not_exists(#k) OR #k <= :capk)".to_owned());
            update = update.expression_attribute_values(":capk", n(max - hold.tokens));
        }
        let update = update
            .condition_expression(conditions.join(" AND "))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    fn settle_update(
        &self,
        tenant: &TenantId,
        period: &str,
        hold: &Hold,
        spent: Spent,
    ) -> StoreResult<TransactWriteItem> {
        let update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(period))
            .update_expression("REMOVE #o ADD #m :dm, #k :dk")
            .condition_expression("#o = :hold")
            .expression_attribute_names("#o", hold_attr(&hold.id))
            .expression_attribute_names("#m", MICROS)
            .expression_attribute_names("#k", TOKENS)
            .expression_attribute_values(":hold", hold_value(hold))
            .expression_attribute_values(
                ":dm",
                signed(i128::from(spent.micros) - i128::from(hold.micros)),
            )
            .expression_attribute_values(
                ":dk",
                signed(i128::from(spent.tokens) - i128::from(hold.tokens)),
            )
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    fn group_update(
        &self,
        tenant: &TenantId,
        group: UsageGroup,
        key: &str,
        tags: &SpendTags,
        spent: Spent,
    ) -> StoreResult<TransactWriteItem> {
        let update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(group_sk(group, &tags.day, key)))
            .update_expression("SET #x = :ttl ADD #m :m, #k :k")
            .expression_attribute_names("#m", MICROS)
            .expression_attribute_names("#k", TOKENS)
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":m", n(spent.micros))
            .expression_attribute_values(":k", n(spent.tokens))
            .expression_attribute_values(":ttl", n(tags.day_ends_at / 1000 + KEEP_AFTER_SECS))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// What each of `periods` holds, one read each.
    async fn each_period_spend(
        &self,
        tenant: &TenantId,
        periods: &[String],
    ) -> StoreResult<Vec<PeriodSpend>> {
        let mut spends = Vec::with_capacity(periods.len());
        for period in periods {
            spends.push(spend_of(&self.spend_item(tenant, period).await?));
        }
        Ok(spends)
    }

    async fn spend_item(&self, tenant: &TenantId, period: &str) -> StoreResult<Item> {
        Ok(self
            .get_item(spend_pk(tenant), period)
            .await?
            .unwrap_or_default())
    }
}

#[async_trait]
impl SpendLedger for DynamoStore {
    async fn reserve(
        &self,
        tenant: &TenantId,
        caps: &[PeriodCap],
        hold: &Hold,
    ) -> StoreResult<Reserved> {
        let refused = |cap: &PeriodCap| Reserved::Refused {
            period: cap.period.clone(),
            ends_at: cap.ends_at,
        };
        // A hold larger than a cap can never fit: no write.
        if let Some(cap) = caps.iter().find(|c| {
            c.max_micros.is_some_and(|m| hold.micros > m)
                || c.max_tokens.is_some_and(|m| hold.tokens > m)
        }) {
            return Ok(refused(cap));
        }
        if caps.is_empty() {
            return Ok(Reserved::Granted);
        }
        let items = caps
            .iter()
            .map(|cap| self.reserve_update(tenant, cap, hold))
            .collect::<StoreResult<Vec<_>>>()?;
        let failed = match self.transact(items, "reserve spend").await? {
            Ok(()) => return Ok(Reserved::Granted),
            Err(failed) => failed,
        };
        // A failed condition is a full period, unless the hold is there already: this
        // reservation was made before (a retry after a lost answer). The periods that do not
        // have it yet are taken again.
        let mut missing = Vec::new();
        for (index, cap) in caps.iter().enumerate() {
            let held = self
                .spend_item(tenant, &cap.period)
                .await?
                .contains_key(&hold_attr(&hold.id));
            match (held, failed.contains(&index)) {
                (false, true) => return Ok(refused(cap)),
                (false, false) => missing.push(cap.clone()),
                (true, _) => {}
            }
        }
        if missing.is_empty() {
            return Ok(Reserved::Granted);
        }
        let caps = missing;
        Box::pin(self.reserve(tenant, &caps, hold)).await
    }

    async fn settle(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()> {
        let mut open = periods.to_vec();
        while !open.is_empty() {
            let mut items = open
                .iter()
                .map(|period| self.settle_update(tenant, period, hold, spent))
                .collect::<StoreResult<Vec<_>>>()?;
            // Counted by agent, model and session with the hold's removal: once.
            for (group, key) in tags.groups() {
                items.push(self.group_update(tenant, group, key, tags, spent)?);
            }
            match self.transact(items, "settle spend").await? {
                Ok(()) => return Ok(()),
                // Periods without the hold (settled before, or never taken) are left out.
                Err(failed) => {
                    open = open
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| !failed.contains(i))
                        .map(|(_, p)| p)
                        .collect();
                }
            }
        }
        Ok(())
    }

    async fn usage(
        &self,
        tenant: &TenantId,
        group: UsageGroup,
        from: &str,
        to: &str,
    ) -> StoreResult<Vec<UsageRow>> {
        let (low, high) = match group {
            UsageGroup::Day => (from.to_owned(), to.to_owned()),
            other => (group_sk(other, from, ""), group_sk(other, to, "\u{10FFFF}")),
        };
        let prefix = format!("G#{}#", group.as_str());
        let mut rows: Vec<UsageRow> = self
            .query_between(spend_pk(tenant), &low, &high)
            .await?
            .iter()
            .filter_map(|item| {
                let sk = item.get(SK)?.as_s().ok()?;
                let (day, key) = match group {
                    UsageGroup::Day => (sk.clone(), String::new()),
                    _ => {
                        let (day, key) = sk.strip_prefix(&prefix)?.split_once('#')?;
                        (day.to_owned(), key.to_owned())
                    }
                };
                Some(UsageRow {
                    day,
                    key,
                    micros: number(item, MICROS),
                    tokens: number(item, TOKENS),
                })
            })
            .collect();
        rows.sort_by(|a, b| (&a.day, &a.key).cmp(&(&b.day, &b.key)));
        Ok(rows)
    }

    async fn period_spend(&self, tenant: &TenantId, period: &str) -> StoreResult<PeriodSpend> {
        Ok(spend_of(&self.spend_item(tenant, period).await?))
    }

    /// One `BatchGetItem` (consistent) for every period.
    async fn periods_spend(
        &self,
        tenant: &TenantId,
        periods: &[String],
    ) -> StoreResult<Vec<PeriodSpend>> {
        if periods.len() < 2 {
            return self.each_period_spend(tenant, periods).await;
        }
        let pk = spend_pk(tenant);
        let mut request = KeysAndAttributes::builder().consistent_read(true);
        for period in periods {
            request = request.keys(HashMap::from([
                (PK.to_owned(), s(&pk)),
                (SK.to_owned(), s(period)),
            ]));
        }
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.table, request.build().map_err(build_error)?)
            .send()
            .await
            .map_err(classify)?;
        if out.unprocessed_keys.as_ref().is_some_and(|u| !u.is_empty()) {
            // Throttled part-way: read them one by one.
            return self.each_period_spend(tenant, periods).await;
        }
        let items = out
            .responses
            .and_then(|mut r| r.remove(&self.table))
            .unwrap_or_default();
        Ok(periods
            .iter()
            .map(|period| {
                items
                    .iter()
                    .find(|item| item.get(SK).and_then(|v| v.as_s().ok()) == Some(period))
                    .map(spend_of)
                    .unwrap_or_default()
            })
            .collect())
    }
}
