//! `agentlane setup-aws --backfill-indexes`: the index attributes added to items written before
//! they existed (issue 24), so the `sessions` and `sessionRuns` GSIs and the tenant registry
//! hold every session, run and tenant:
//!
//! - a session item without `sessTenant` gets it (`T#{tenant}`);
//! - a run item without `runSession` gets it and `sessionSeq` (from its run record);
//! - every tenant with a session gets its registry item (`TENANTS`, `{tenant}`).
//!
//! This is the one place that scans the table: an operator's one-off over items no index
//! holds (by definition), never on a request or sweep path. Idempotent; run it again after a
//! failure. Each update is conditional on the item still existing, so items deleted meanwhile
//! are skipped.

use super::DynamoStore;
use super::error::{applied, classify};
use super::item::{
    Item, RUN_SESSION, SESS_TENANT, TENANT, n, run_from_item, run_index_attributes, s,
    tenant_partition,
};
use super::keys::{PK, RUN_SK, SESSION_SK, SK};
use super::retention::TENANTS_PK;
use agentlane_core::{StoreResult, TenantId};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::{BTreeSet, HashMap};

/// What a backfill changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexBackfill {
    /// Session items that got `sessTenant`.
    pub sessions: u64,
    /// Run items that got `runSession` and `sessionSeq`.
    pub runs: u64,
    /// Tenants (re)registered.
    pub tenants: u64,
}

impl DynamoStore {
    /// Adds the missing index attributes to session and run items and registers every tenant
    /// with a session (see the module documentation). Scans the table.
    pub async fn backfill_indexes(&self) -> StoreResult<IndexBackfill> {
        let mut done = IndexBackfill::default();
        let mut tenants = BTreeSet::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression(format!(
                    "{SK} = :session OR ({SK} = :run AND attribute_not_exists({RUN_SESSION}))"
                ))
                .expression_attribute_values(":session", s(SESSION_SK))
                .expression_attribute_values(":run", s(RUN_SK))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                match item.get(SK).and_then(|v| v.as_s().ok()).map(String::as_str) {
                    Some(SESSION_SK) => {
                        let Some(tenant) = item.get(TENANT).and_then(|v| v.as_s().ok()) else {
                            continue;
                        };
                        let tenant = TenantId::new(tenant.as_str());
                        if !item.contains_key(SESS_TENANT)
                            && self
                                .set_if_exists(
                                    &item,
                                    HashMap::from([(
                                        SESS_TENANT.to_owned(),
                                        s(tenant_partition(&tenant)),
                                    )]),
                                )
                                .await?
                        {
                            done.sessions += 1;
                        }
                        tenants.insert(tenant);
                    }
                    Some(RUN_SK) => {
                        let run = run_from_item(&item)?;
                        if self
                            .set_if_exists(&item, run_index_attributes(&run).into())
                            .await?
                        {
                            done.runs += 1;
                        }
                    }
                    _ => {}
                }
            }
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => break,
            }
        }
        for tenant in &tenants {
            self.client
                .put_item()
                .table_name(&self.table)
                .item(PK, s(TENANTS_PK))
                .item(SK, s(tenant.as_str()))
                .item(TENANT, s(tenant.as_str()))
                .item("registeredAt", n(self.clock.now_ms()))
                .send()
                .await
                .map_err(classify)?;
            done.tenants += 1;
        }
        Ok(done)
    }

    /// Sets `attributes` on `item` (by its key) if it still exists; whether it did.
    async fn set_if_exists(
        &self,
        item: &Item,
        attributes: HashMap<String, AttributeValue>,
    ) -> StoreResult<bool> {
        let key: Item = [PK, SK]
            .into_iter()
            .filter_map(|k| Some((k.to_owned(), item.get(k)?.clone())))
            .collect();
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut sets = Vec::new();
        for (i, (name, value)) in attributes.into_iter().enumerate() {
            names.insert(format!("#a{i}"), name);
            values.insert(format!(":v{i}"), value);
            sets.push(format!("#a{i} = :v{i}"));
        }
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .update_expression(format!("SET {}", sets.join(", ")))
            .condition_expression(format!("attribute_exists({PK})"))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        applied(update)
    }
}
