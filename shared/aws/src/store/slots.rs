//! [`SlotStore`] for [`DynamoStore`]: one item per tenant and kind of slot.
//!
//! | `PK` | `SK` | attributes |
//! |---|---|---|
//! | `T#{t}#SLOTS` | `stream` / `wait` | `n` (slots held), `h_{holder}` (its lease end, ms) per holder, `expiresAt` |
//!
//! - Take: one `UpdateItem` that sets the holder's attribute and adds 1 to `n`, conditional on
//!   `n < cap` and the holder not being there yet. DynamoDB applies the updates of one item one
//!   at a time, so a burst of takes needs no retries and can never pass the cap: the first `cap`
//!   succeed, the rest fail their condition. Only then is the item read: a holder taking again
//!   renews its own slot, and leases that have ended are dropped (one update conditional on
//!   each dropped lease being unchanged, so a renewal in between wins) before one more try.
//! - Renew: `SET` the holder's attribute if it is there. Release: `REMOVE` it and add -1 to `n`
//!   if it is there. `n` and the holders change together in every update, so they agree.
//! - `expiresAt` (TTL) is an hour past the latest take or renewal, so an idle item goes.
//!
//! Rate windows, one item per scope and window:
//!
//! | `PK` | `SK` | attributes |
//! |---|---|---|
//! | `T#{t}#RATE` (a tenant's requests) / `RATE#PROBES#{address}` | window start (ms) | `c` (count), `expiresAt` |
//!
//! An add is one `UpdateItem` (`ADD c :n`, answering the new count), never conditional: every
//! process's add is counted and none is retried. A read (`n = 0`) is one consistent `GetItem`. `expiresAt` is an hour past the window's start.

use super::DynamoStore;
use super::error::{DdbError, build_error};
use super::item::{EXPIRES_AT, Item, n, s};
use super::keys::{PK, SK};
use agentlane_core::{RateScope, SlotKind, SlotStore, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

/// Slots held.
const COUNT: &str = "n";
/// Prefix of a holder's attribute.
const HOLDER_PREFIX: &str = "h_";
/// Rounds of (take, read, drop ended leases) before a take gives up with `Busy`.
const TAKE_ROUNDS: u32 = 4;
/// Ended leases dropped per update (keeps the expression small).
const MAX_DROPPED_PER_UPDATE: usize = 25;
/// How long the item outlives its latest lease (TTL, seconds).
const TTL_AFTER_LEASE_SECS: u64 = 3_600;

/// A rate window's count.
const RATE_COUNT: &str = "c";
/// How long a rate window's item outlives the window's start (TTL, seconds).
const RATE_TTL_SECS: u64 = 3_600;

pub(super) fn rate_pk(scope: &RateScope) -> String {
    match scope {
        RateScope::Tenant(tenant) => format!("T#{tenant}#RATE"),
        RateScope::KeyProbes(source) => format!("RATE#PROBES#{source}"),
    }
}

pub(super) fn slots_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#SLOTS")
}

fn holder_attr(holder: &str) -> String {
    format!("{HOLDER_PREFIX}{holder}")
}

fn ttl(until: u64) -> AttributeValue {
    n(until / 1_000 + TTL_AFTER_LEASE_SECS)
}

/// `(attribute, lease end)` of every holder of an item.
fn holders_of(item: &Item) -> Vec<(String, u64)> {
    item.iter()
        .filter(|(name, _)| name.starts_with(HOLDER_PREFIX))
        .filter_map(|(name, until)| match until {
            AttributeValue::N(v) => v.parse().ok().map(|v| (name.clone(), v)),
            _ => None,
        })
        .collect()
}

/// What one conditional update did.
fn applied(result: Result<(), DdbError>) -> StoreResult<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(DdbError::ConditionFailed(_)) => Ok(false),
        Err(DdbError::TransactionConflict) => Err(StoreError::Busy),
        Err(DdbError::Other(e)) => Err(e),
        Err(DdbError::Cancelled(_)) => Err(build_error(
            "a single update reported a cancelled transaction",
        )),
    }
}

impl DynamoStore {
    fn slots_update(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(slots_pk(tenant)))
            .key(SK, s(kind.as_str()))
    }

    /// The atomic take: `false` when the cap is reached or `holder` is already there.
    async fn take_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        cap: u32,
        until: u64,
    ) -> StoreResult<bool> {
        let result = self
            .slots_update(tenant, kind)
            .update_expression("SET #h = :until, #x = :ttl ADD #n :one")
            .condition_expression(
                "(attribute_not_exists(#n) OR #n < :cap) AND attribute_not_exists(#h)",
            )
            .expression_attribute_names("#h", holder_attr(holder))
            .expression_attribute_names("#n", COUNT)
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":ttl", ttl(until))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":cap", n(u64::from(cap)))
            .send()
            .await
            .map(|_| ())
            .map_err(DdbError::from);
        applied(result)
    }

    /// Drops ended leases, each only if it is still the same (a renewal in between keeps it).
    async fn drop_ended(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        ended: &[(String, u64)],
    ) -> StoreResult<bool> {
        let mut update = self.slots_update(tenant, kind);
        let mut removes = Vec::new();
        let mut conditions = Vec::new();
        for (i, (attr, until)) in ended.iter().enumerate() {
            update = update
                .expression_attribute_names(format!("#e{i}"), attr)
                .expression_attribute_values(format!(":e{i}"), n(*until));
            removes.push(format!("#e{i}"));
            conditions.push(format!("#e{i} = :e{i}"));
        }
        let dropped = i64::try_from(ended.len()).unwrap_or(0);
        let result = update
            .update_expression(format!("REMOVE {} ADD #n :minus", removes.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .expression_attribute_names("#n", COUNT)
            .expression_attribute_values(":minus", AttributeValue::N((-dropped).to_string()))
            .send()
            .await
            .map(|_| ())
            .map_err(DdbError::from);
        applied(result)
    }
}

#[async_trait]
impl SlotStore for DynamoStore {
    async fn acquire_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        cap: u32,
        now: u64,
        until: u64,
    ) -> StoreResult<bool> {
        for _ in 0..TAKE_ROUNDS {
            if self.take_slot(tenant, kind, holder, cap, until).await? {
                return Ok(true);
            }
            let item = self
                .get_item(slots_pk(tenant), kind.as_str())
                .await?
                .unwrap_or_default();
            let holders = holders_of(&item);
            if holders.iter().any(|(attr, _)| *attr == holder_attr(holder)) {
                // Taken again by its holder: its lease moves (unless it was just released).
                if self.renew_slot(tenant, kind, holder, until).await? {
                    return Ok(true);
                }
                continue;
            }
            let ended: Vec<(String, u64)> = holders
                .into_iter()
                .filter(|(_, end)| *end <= now)
                .take(MAX_DROPPED_PER_UPDATE)
                .collect();
            if ended.is_empty() {
                // At the cap with live leases only (or a release freed one meanwhile: the next
                // round's take finds it).
                let held = item
                    .get(COUNT)
                    .and_then(|v| v.as_n().ok()?.parse::<u64>().ok());
                if held.unwrap_or(0) >= u64::from(cap) {
                    return Ok(false);
                }
                continue;
            }
            // Whether this drop or a concurrent one removed them, the next take may pass.
            self.drop_ended(tenant, kind, &ended).await?;
        }
        Err(StoreError::Busy)
    }

    async fn renew_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        until: u64,
    ) -> StoreResult<bool> {
        let result = self
            .slots_update(tenant, kind)
            .update_expression("SET #h = :until, #x = :ttl")
            .condition_expression("attribute_exists(#h)")
            .expression_attribute_names("#h", holder_attr(holder))
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":ttl", ttl(until))
            .send()
            .await
            .map(|_| ())
            .map_err(DdbError::from);
        applied(result)
    }

    async fn release_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
    ) -> StoreResult<()> {
        let result = self
            .slots_update(tenant, kind)
            .update_expression("REMOVE #h ADD #n :minus")
            .condition_expression("attribute_exists(#h)")
            .expression_attribute_names("#h", holder_attr(holder))
            .expression_attribute_names("#n", COUNT)
            .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
            .send()
            .await
            .map(|_| ())
            .map_err(DdbError::from);
        applied(result).map(|_| ())
    }

    async fn add_to_window(&self, scope: &RateScope, window: u64, added: u32) -> StoreResult<u64> {
        let count_of = |item: Option<&Item>| {
            item.and_then(|a| a.get(RATE_COUNT))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if added == 0 {
            // A read: one consistent GetItem (no write, no item made).
            let item = self.get_item(rate_pk(scope), &window.to_string()).await?;
            return Ok(count_of(item.as_ref()).unwrap_or(0));
        }
        let answer = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(rate_pk(scope)))
            .key(SK, s(window.to_string()))
            .update_expression("SET #x = :ttl ADD #c :n")
            .expression_attribute_names("#c", RATE_COUNT)
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":n", n(u64::from(added)))
            .expression_attribute_values(":ttl", n(window / 1_000 + RATE_TTL_SECS))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(DdbError::from);
        let answer = match answer {
            Ok(answer) => answer,
            Err(DdbError::Other(e)) => return Err(e),
            Err(DdbError::TransactionConflict) => return Err(StoreError::Busy),
            Err(other) => {
                return Err(StoreError::Unavailable(format!(
                    "a rate add failed: {other:?}"
                )));
            }
        };
        count_of(answer.attributes())
            .ok_or_else(|| StoreError::Unavailable("a rate add answered no count".into()))
    }
}
