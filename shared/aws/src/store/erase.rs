//! [`TenantEraser`] on DynamoDB, from the tenant's indexes and fixed partitions (no scan):
//! - every session of the `sessions` GSI, with everything of it (runs and events, transcripts,
//!   idempotency records, pending steers: see [`DynamoStore::remove_session`]);
//! - the tenant's own partitions: cron jobs, agents, spend, slots, its rate windows;
//! - its secrets (`T#{t}#SECRETS`: the sealed values and their count; counted as `secrets`);
//! - its API keys: the listing partition `T#{t}#KEYS` and each key's lookup item `KEY#{id}`;
//! - its tenant-registry item (`TENANTS`, `{t}`: see the retention sweep).
//!
//! Sessions written before the `sessions` GSI existed (no `sessTenant`) are not in it, and so
//! not erased by this; on such a table an operator runs `agentlane setup-aws
//! --backfill-indexes` first.

use super::DynamoStore;
use super::api_keys::{LIST_PREFIX, LOOKUP_SK, list_pk, lookup_pk};
use super::item::{Item, s};
use super::keys::{PK, SK};
use agentlane_core::{
    PageBudget, RateScope, SessionCatalog, SessionCursor, SessionFilter, StoreResult, TenantEraser,
    TenantErasure, TenantId,
};
use async_trait::async_trait;
use std::collections::HashMap;

/// Sessions read from the index per page while erasing.
const SESSIONS_PER_PAGE: usize = 100;

#[async_trait]
impl TenantEraser for DynamoStore {
    async fn erase_tenant(&self, tenant: &TenantId) -> StoreResult<TenantErasure> {
        let mut erasure = TenantErasure::default();
        self.erase_sessions(tenant, &mut erasure).await?;
        let partitions = [
            (super::cron::cron_pk(tenant), "cronJobs"),
            (super::agents::agents_pk(tenant), "agents"),
            (super::spend::spend_pk(tenant), "spend"),
            (super::slots::slots_pk(tenant), "slots"),
            (
                super::slots::rate_pk(&RateScope::Tenant(tenant.clone())),
                "rateWindows",
            ),
        ];
        for (pk, kind) in partitions {
            let items = self.partition_keys(&pk).await?;
            erasure.add(kind, u64::try_from(items.len()).unwrap_or(u64::MAX));
            self.batch_delete(items).await?;
        }
        self.erase_api_keys(tenant, &mut erasure).await?;
        self.erase_secrets(tenant, &mut erasure).await?;
        // Last: a failed erasure run again still finds the tenant for the retention sweep.
        if self.forget_tenant(tenant).await? {
            erasure.add("tenantRegistry", 1);
        }
        Ok(erasure)
    }
}

impl DynamoStore {
    /// Every session of the tenant's `sessions` index, going through the index once (a page
    /// at a time, by cursor: entries of sessions already gone may still show for a moment).
    async fn erase_sessions(
        &self,
        tenant: &TenantId,
        erasure: &mut TenantErasure,
    ) -> StoreResult<()> {
        let mut after: Option<SessionCursor> = None;
        loop {
            let page = self
                .list_sessions(
                    tenant,
                    &SessionFilter::default(),
                    after.as_ref(),
                    PageBudget::count(SESSIONS_PER_PAGE),
                )
                .await?;
            for session in &page.sessions {
                if let Some(removed) = self
                    .remove_session(tenant, &session.session_key, None)
                    .await?
                {
                    erasure.add("runs", removed.runs);
                    erasure.add("events", removed.events);
                    erasure.add("transcriptEntries", removed.transcript_entries);
                    erasure.add("sessions", 1);
                    erasure.add("sessionRecords", removed.other.saturating_sub(1));
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// The tenant's secrets partition: every sealed value (counted as `secrets`) and the
    /// count the cap reads.
    async fn erase_secrets(
        &self,
        tenant: &TenantId,
        erasure: &mut TenantErasure,
    ) -> StoreResult<()> {
        let items = self
            .partition_keys(&super::tenant_secrets::secrets_pk(tenant))
            .await?;
        let secrets = items
            .iter()
            .filter(|item| {
                item.get(SK)
                    .and_then(|sk| sk.as_s().ok())
                    .is_some_and(|sk| sk.starts_with(super::tenant_secrets::SECRET_PREFIX))
            })
            .count();
        erasure.add("secrets", u64::try_from(secrets).unwrap_or(u64::MAX));
        self.batch_delete(items).await
    }

    /// The tenant's key listing and each key's lookup item (`KEY#{id}`), so no key of the
    /// tenant authenticates any more.
    async fn erase_api_keys(
        &self,
        tenant: &TenantId,
        erasure: &mut TenantErasure,
    ) -> StoreResult<()> {
        let listing = self.partition_keys(&list_pk(tenant)).await?;
        let lookups: Vec<Item> = listing
            .iter()
            .filter_map(|item| item.get(SK)?.as_s().ok()?.strip_prefix(LIST_PREFIX))
            .map(|key_id| {
                HashMap::from([
                    (PK.to_owned(), s(lookup_pk(key_id))),
                    (SK.to_owned(), s(LOOKUP_SK)),
                ])
            })
            .collect();
        erasure.add("apiKeys", u64::try_from(lookups.len()).unwrap_or(u64::MAX));
        erasure.add(
            "apiKeyListings",
            u64::try_from(listing.len()).unwrap_or(u64::MAX),
        );
        self.batch_delete(lookups).await?;
        self.batch_delete(listing).await
    }
}
