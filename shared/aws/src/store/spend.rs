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
//! - Clear (a hold of a pickup that is provably gone): as a settlement, and it leaves
//!   `c_{holdId}` (`micros:tokens`, what it counted) in place of the hold. A late settlement of
//!   that hold (the old pickup's call ended after all) finds the marker and `ADD`s what the
//!   call spent beyond it, conditional on the marker as read, and raises the marker.
//! - `expiresAt` (TTL) is 400 days after the period ends: a year of history for reading.

use super::DynamoStore;
use super::error::{build_error, classify};
use super::item::{EXPIRES_AT, Item, n, s};
use super::keys::{PK, SK};
use agentlane_core::spend::{
    Hold, PeriodCap, PeriodSpend, Reserved, SpendTags, Spent, UsageCursor, UsageGroup, UsageRow,
};
use agentlane_core::{SpendLedger, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, TransactWriteItem, Update};
use std::collections::HashMap;

const MICROS: &str = "m";
const TOKENS: &str = "k";
const HOLD_PREFIX: &str = "o_";
const CLEARED_PREFIX: &str = "c_";
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

fn cleared_attr(id: &str) -> String {
    format!("{CLEARED_PREFIX}{id}")
}

fn cleared_value(spent: Spent) -> AttributeValue {
    s(format!("{}:{}", spent.micros, spent.tokens))
}

/// What a clear counted for `id` in `item`, if it was cleared.
fn cleared_of(item: &Item, id: &str) -> Option<Spent> {
    let mut parts = item
        .get(&cleared_attr(id))?
        .as_s()
        .ok()?
        .split(':')
        .map(str::parse::<u64>);
    Some(Spent {
        micros: parts.next()?.ok()?,
        tokens: parts.next()?.ok()?,
    })
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
        // Neither open nor cleared: a reservation retried after its hold was cleared (a lost
        // answer, then a replacing pickup) must not count the hold a second time.
        let mut conditions =
            vec!["attribute_not_exists(#o) AND attribute_not_exists(#c)".to_owned()];
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(&cap.period))
            .update_expression("SET #o = :hold, #x = :ttl ADD #m :m, #k :k")
            .expression_attribute_names("#o", hold_attr(&hold.id))
            .expression_attribute_names("#c", cleared_attr(&hold.id))
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
        clear: bool,
    ) -> StoreResult<TransactWriteItem> {
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(period));
        update = if clear {
            update
                .update_expression("REMOVE #o SET #c = :cleared ADD #m :dm, #k :dk")
                .expression_attribute_names("#c", cleared_attr(&hold.id))
                .expression_attribute_values(":cleared", cleared_value(spent))
        } else {
            update.update_expression("REMOVE #o ADD #m :dm, #k :dk")
        };
        let update = update
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

    /// A late settlement of a cleared hold in `period`: adds `more` and raises the marker
    /// from `was` to `now`, if the marker is still `was`.
    fn late_update(
        &self,
        tenant: &TenantId,
        period: &str,
        hold: &Hold,
        was: Spent,
        now: Spent,
    ) -> StoreResult<TransactWriteItem> {
        let update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(spend_pk(tenant)))
            .key(SK, s(period))
            .update_expression("SET #c = :now ADD #m :dm, #k :dk")
            .condition_expression("#c = :was")
            .expression_attribute_names("#c", cleared_attr(&hold.id))
            .expression_attribute_names("#m", MICROS)
            .expression_attribute_names("#k", TOKENS)
            .expression_attribute_values(":was", cleared_value(was))
            .expression_attribute_values(":now", cleared_value(now))
            .expression_attribute_values(":dm", n(now.micros - was.micros))
            .expression_attribute_values(":dk", n(now.tokens - was.tokens))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Settles (or clears) `hold` in every period that has it open; returns the periods that
    /// did not.
    async fn settle_open(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
        clear: bool,
    ) -> StoreResult<Vec<String>> {
        let mut open = periods.to_vec();
        let mut without = Vec::new();
        while !open.is_empty() {
            let mut items = open
                .iter()
                .map(|period| self.settle_update(tenant, period, hold, spent, clear))
                .collect::<StoreResult<Vec<_>>>()?;
            // Counted by agent, model and session with the hold's removal: once.
            for (group, key) in tags.groups() {
                items.push(self.group_update(tenant, group, key, tags, spent)?);
            }
            match self.transact(items, "settle spend").await? {
                Ok(()) => return Ok(without),
                // Periods without the hold (settled before, or never taken) are left out.
                Err(failed) => {
                    let (gone, kept): (Vec<_>, Vec<_>) = open
                        .into_iter()
                        .enumerate()
                        .partition(|(i, _)| failed.contains(i));
                    without.extend(gone.into_iter().map(|(_, p)| p));
                    open = kept.into_iter().map(|(_, p)| p).collect();
                }
            }
        }
        Ok(without)
    }

    /// A late settlement in the `periods` whose hold was cleared: what `spent` has beyond what
    /// the clear counted is added there, and to the day's agent, model and session once.
    async fn settle_late(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()> {
        let mut items = Vec::new();
        let mut more: Option<Spent> = None;
        for period in periods {
            let item = self.spend_item(tenant, period).await?;
            let Some(was) = cleared_of(&item, &hold.id) else {
                continue;
            };
            let now = Spent {
                micros: was.micros.max(spent.micros),
                tokens: was.tokens.max(spent.tokens),
            };
            if now == was {
                continue;
            }
            more.get_or_insert(Spent {
                micros: now.micros - was.micros,
                tokens: now.tokens - was.tokens,
            });
            items.push(self.late_update(tenant, period, hold, was, now)?);
        }
        let Some(more) = more else {
            return Ok(());
        };
        for (group, key) in tags.groups() {
            items.push(self.group_update(tenant, group, key, tags, more)?);
        }
        if let Err(failed) = self.transact(items, "settle spend late").await? {
            // Another late settlement of the same call raced this one: it counted it.
            tracing::info!(hold = %hold.id, ?failed, "a late settlement was counted by another");
        }
        Ok(())
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
        // A failed condition is a full period, unless the hold is there already, open or
        // cleared: this reservation was made before (a retry after a lost answer). The periods
        // that do not have it yet are taken again.
        let mut missing = Vec::new();
        for (index, cap) in caps.iter().enumerate() {
            let item = self.spend_item(tenant, &cap.period).await?;
            let held = item.contains_key(&hold_attr(&hold.id))
                || item.contains_key(&cleared_attr(&hold.id));
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
        let without = self
            .settle_open(tenant, periods, hold, spent, tags, false)
            .await?;
        if without.is_empty() {
            return Ok(());
        }
        self.settle_late(tenant, &without, hold, spent, tags).await
    }

    async fn clear(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()> {
        self.settle_open(tenant, periods, hold, spent, tags, true)
            .await
            .map(|_| ())
    }

    async fn usage(
        &self,
        tenant: &TenantId,
        group: UsageGroup,
        from: &str,
        to: &str,
        after: Option<&UsageCursor>,
        count: usize,
    ) -> StoreResult<Vec<UsageRow>> {
        let sk_of = |day: &str, key: &str| match group {
            UsageGroup::Day => day.to_owned(),
            other => group_sk(other, day, key),
        };
        let (mut low, high) = match group {
            UsageGroup::Day => (from.to_owned(), to.to_owned()),
            other => (group_sk(other, from, ""), group_sk(other, to, "\u{10FFFF}")),
        };
        // The cursor's own row is read again (BETWEEN is inclusive) and dropped below.
        let mut wanted = count;
        if let Some(cursor) = after {
            let at = sk_of(&cursor.day, &cursor.key);
            if at >= low {
                low = at;
                wanted = count.saturating_add(1);
            }
        }
        if low > high || count == 0 {
            return Ok(Vec::new());
        }
        let prefix = format!("G#{}#", group.as_str());
        let mut rows: Vec<UsageRow> = self
            .query_between_first(spend_pk(tenant), &low, &high, wanted)
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
            .filter(|row| after.is_none_or(|cursor| cursor.precedes(row)))
            .collect();
        rows.sort_by(|a, b| (&a.day, &a.key).cmp(&(&b.day, &b.key)));
        rows.truncate(count);
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
