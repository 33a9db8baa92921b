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

use super::DynamoStore;
use super::error::{DdbError, build_error};
use super::item::{EXPIRES_AT, Item, n, s};
use super::keys::{PK, SK};
use agentlane_core::{SlotKind, SlotStore, StoreError, StoreResult, TenantId};
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

fn slots_pk(tenant: &TenantId) -> String {
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
}
