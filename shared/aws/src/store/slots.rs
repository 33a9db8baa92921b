//! [`SlotStore`] for [`DynamoStore`]: one item per tenant and kind of slot.
//!
//! | `PK` | `SK` | attributes |
//! |---|---|---|
//! | `T#{t}#SLOTS` | `stream` / `wait` | `holders` (map: holder → lease end, ms), `ver`, `expiresAt` |
//!
//! - Take: a strongly consistent `GetItem`, then one `UpdateItem` writing the live holders plus
//!   the new one, conditional on `ver` being unchanged (absent for a new item). A concurrent
//!   change (another take, a renewal, a release) bumps `ver`, so the write fails and the take
//!   reads again: the cap can never be exceeded. Two requests when uncontended.
//! - Renew and release: one `UpdateItem` on the holder's own map entry (conditional on it being
//!   there), bumping `ver`.
//! - `expiresAt` (TTL) is an hour past the latest lease, so a tenant's idle slots item goes.

use super::DynamoStore;
use super::error::{DdbError, build_error};
use super::item::{EXPIRES_AT, Item, n, s};
use super::keys::{PK, SK};
use agentlane_core::{SlotKind, SlotStore, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use std::time::Duration;

const HOLDERS: &str = "holders";
const VER: &str = "ver";
/// Reads and conditional writes a take may try before it answers `Busy`.
const TAKE_TRIES: u32 = 8;
/// How long the item outlives its latest lease (TTL, seconds).
const TTL_AFTER_LEASE_SECS: u64 = 3_600;

fn slots_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#SLOTS")
}

/// `holder → lease end` of an item (an absent or malformed map is empty).
fn holders_of(item: &Item) -> HashMap<String, u64> {
    match item.get(HOLDERS) {
        Some(AttributeValue::M(map)) => map
            .iter()
            .filter_map(|(holder, until)| match until {
                AttributeValue::N(v) => v.parse().ok().map(|v| (holder.clone(), v)),
                _ => None,
            })
            .collect(),
        _ => HashMap::new(),
    }
}

impl DynamoStore {
    /// The item's holders and version (`None`: no item yet).
    async fn read_slots(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
    ) -> StoreResult<(HashMap<String, u64>, Option<String>)> {
        let item = self.get_item(slots_pk(tenant), kind.as_str()).await?;
        Ok(match item {
            None => (HashMap::new(), None),
            Some(item) => {
                let ver = match item.get(VER) {
                    Some(AttributeValue::N(v)) => Some(v.clone()),
                    _ => None,
                };
                (holders_of(&item), ver)
            }
        })
    }

    /// One conditional write of `holders` over version `ver`. `false`: someone changed it.
    async fn write_slots(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holders: &HashMap<String, u64>,
        ver: Option<&str>,
    ) -> StoreResult<bool> {
        let latest = holders.values().copied().max().unwrap_or_default();
        let map: HashMap<String, AttributeValue> = holders
            .iter()
            .map(|(holder, until)| (holder.clone(), n(*until)))
            .collect();
        let next = ver.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1;
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(slots_pk(tenant)))
            .key(SK, s(kind.as_str()))
            .update_expression("SET #h = :h, #v = :next, #x = :ttl")
            .expression_attribute_names("#h", HOLDERS)
            .expression_attribute_names("#v", VER)
            .expression_attribute_names("#x", EXPIRES_AT)
            .expression_attribute_values(":h", AttributeValue::M(map))
            .expression_attribute_values(":next", n(next))
            .expression_attribute_values(":ttl", n(latest / 1_000 + TTL_AFTER_LEASE_SECS));
        let update = match ver {
            None => update.condition_expression("attribute_not_exists(#v)"),
            Some(ver) => update
                .condition_expression("#v = :ver")
                .expression_attribute_values(":ver", AttributeValue::N(ver.to_owned())),
        };
        match update.send().await.map_err(DdbError::from) {
            Ok(_) => Ok(true),
            Err(DdbError::ConditionFailed(_) | DdbError::TransactionConflict) => Ok(false),
            Err(DdbError::Other(e)) => Err(e),
            Err(DdbError::Cancelled(_)) => Err(build_error(
                "a single write reported a cancelled transaction",
            )),
        }
    }

    /// One update of `holder`'s own entry, if it is there: `SET` it to `until`, or `REMOVE` it.
    async fn update_own_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
        until: Option<u64>,
    ) -> StoreResult<bool> {
        let expression = match until {
            Some(_) => "SET #h.#id = :until, #v = #v + :one",
            None => "REMOVE #h.#id SET #v = #v + :one",
        };
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(slots_pk(tenant)))
            .key(SK, s(kind.as_str()))
            .update_expression(expression)
            .condition_expression("attribute_exists(#h.#id)")
            .expression_attribute_names("#h", HOLDERS)
            .expression_attribute_names("#id", holder)
            .expression_attribute_names("#v", VER)
            .expression_attribute_values(":one", n(1));
        if let Some(until) = until {
            update = update.expression_attribute_values(":until", n(until));
        }
        match update.send().await.map_err(DdbError::from) {
            Ok(_) => Ok(true),
            Err(DdbError::ConditionFailed(_)) => Ok(false),
            Err(DdbError::TransactionConflict) => Err(StoreError::Busy),
            Err(DdbError::Other(e)) => Err(e),
            Err(DdbError::Cancelled(_)) => Err(build_error(
                "a single write reported a cancelled transaction",
            )),
        }
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
        for attempt in 0..TAKE_TRIES {
            if attempt > 0 {
                // Another take won the write: read again after a short, jittered pause.
                let pause =
                    agentlane_core::backoff::jittered(Duration::from_millis(5 << attempt.min(5)));
                tokio::time::sleep(pause).await;
            }
            let (mut holders, ver) = self.read_slots(tenant, kind).await?;
            holders.retain(|h, end| *end > now && h != holder);
            if holders.len() >= cap as usize {
                return Ok(false);
            }
            holders.insert(holder.to_owned(), until);
            if self
                .write_slots(tenant, kind, &holders, ver.as_deref())
                .await?
            {
                return Ok(true);
            }
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
        self.update_own_slot(tenant, kind, holder, Some(until))
            .await
    }

    async fn release_slot(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        holder: &str,
    ) -> StoreResult<()> {
        self.update_own_slot(tenant, kind, holder, None)
            .await
            .map(|_| ())
    }
}
