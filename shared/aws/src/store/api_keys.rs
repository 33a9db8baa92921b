//! [`KeyStore`] for [`DynamoStore`]: two small items per key in the one table.
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | key (lookup) | `KEY#{keyId}` | `KEY` | `tenant`, `hash` (SHA-256 hex of the key), `label`?, `createdAt`, `revokedAt`? |
//! | key (listing) | `T#{t}#KEYS` | `K#{keyId}` | `label`?, `createdAt`, `revokedAt`? (no digest) |
//!
//! - The lookup item is the one partition key not starting with `T#{tenant}#`: authentication
//!   happens before the tenant is known. It holds no tenant data but the tenant's name.
//! - Authenticating a request is one `GetItem` on the lookup item (the key id is in the key).
//! - Listing a tenant's keys is one `Query` on its `KEYS` partition (`SK` begins with `K#`),
//!   never a scan; the ids are time-ordered, so the listing is in creation order.
//! - Create: one transaction putting both items if absent. Revoke: one transaction setting
//!   `revokedAt` (if not yet set) on both, conditional on the lookup item's `tenant`, so a tenant
//!   can revoke only its own keys.

use super::DynamoStore;
use super::error::build_error;
use super::error::classify;
use super::item::{Item, get_str, get_u64, n, opt_str, opt_u64, s};
use super::keys::{PK, SK};
use agentlane_core::api_key::{ApiKeyRecord, KeyStore};
use agentlane_core::{StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};

pub(super) const LOOKUP_SK: &str = "KEY";
pub(super) const LIST_PREFIX: &str = "K#";
const TENANT: &str = "tenant";
const HASH: &str = "hash";
const LABEL: &str = "label";
const CREATED_AT: &str = "createdAt";
const REVOKED_AT: &str = "revokedAt";

pub(super) fn lookup_pk(key_id: &str) -> String {
    format!("KEY#{key_id}")
}

pub(super) fn list_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#KEYS")
}

fn list_sk(key_id: &str) -> String {
    format!("{LIST_PREFIX}{key_id}")
}

fn common(item: &mut Item, record: &ApiKeyRecord) {
    if let Some(label) = &record.label {
        item.insert(LABEL.into(), s(label.clone()));
    }
    item.insert(CREATED_AT.into(), n(record.created_at));
    if let Some(at) = record.revoked_at {
        item.insert(REVOKED_AT.into(), n(at));
    }
}

fn record_from(
    item: &Item,
    key_id: String,
    tenant: TenantId,
    hash: String,
) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        key_id,
        tenant,
        hash,
        label: opt_str(item, LABEL)?.map(str::to_owned),
        created_at: get_u64(item, CREATED_AT)?,
        revoked_at: opt_u64(item, REVOKED_AT)?,
    })
}

#[async_trait]
impl KeyStore for DynamoStore {
    async fn create_key(&self, record: &ApiKeyRecord) -> StoreResult<()> {
        let mut lookup = Item::new();
        lookup.insert(PK.into(), s(lookup_pk(&record.key_id)));
        lookup.insert(SK.into(), s(LOOKUP_SK));
        lookup.insert(TENANT.into(), s(record.tenant.as_str()));
        lookup.insert(HASH.into(), s(record.hash.clone()));
        common(&mut lookup, record);
        let mut listing = Item::new();
        listing.insert(PK.into(), s(list_pk(&record.tenant)));
        listing.insert(SK.into(), s(list_sk(&record.key_id)));
        common(&mut listing, record);
        let mut writes = Vec::new();
        for item in [lookup, listing] {
            let put = Put::builder()
                .table_name(self.table())
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(build_error)?;
            writes.push(TransactWriteItem::builder().put(put).build());
        }
        match self.transact(writes, "create_key").await? {
            Ok(()) => Ok(()),
            Err(_) => Err(StoreError::Conflict(format!(
                "API key {} exists",
                record.key_id
            ))),
        }
    }

    async fn find_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let out = self
            .client
            .get_item()
            .table_name(self.table())
            .key(PK, s(lookup_pk(key_id)))
            .key(SK, s(LOOKUP_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        let tenant = TenantId::new(get_str(&item, TENANT)?);
        let hash = get_str(&item, HASH)?.to_owned();
        record_from(&item, key_id.to_owned(), tenant, hash).map(Some)
    }

    async fn list_keys(&self, tenant: &TenantId) -> StoreResult<Vec<ApiKeyRecord>> {
        let items = self.query_prefix(list_pk(tenant), LIST_PREFIX).await?;
        items
            .iter()
            .map(|item| {
                let sk = get_str(item, SK)?;
                let key_id = sk.strip_prefix(LIST_PREFIX).unwrap_or(sk).to_owned();
                record_from(item, key_id, tenant.clone(), String::new())
            })
            .collect()
    }

    async fn revoke_key(&self, tenant: &TenantId, key_id: &str, at: u64) -> StoreResult<bool> {
        let lookup = Update::builder()
            .table_name(self.table())
            .key(PK, s(lookup_pk(key_id)))
            .key(SK, s(LOOKUP_SK))
            .update_expression("SET #r = if_not_exists(#r, :at)")
            .condition_expression("attribute_exists(PK) AND #t = :tenant")
            .expression_attribute_names("#r", REVOKED_AT)
            .expression_attribute_names("#t", TENANT)
            .expression_attribute_values(":at", n(at))
            .expression_attribute_values(":tenant", s(tenant.as_str()))
            .build()
            .map_err(build_error)?;
        let listing = Update::builder()
            .table_name(self.table())
            .key(PK, s(list_pk(tenant)))
            .key(SK, s(list_sk(key_id)))
            .update_expression("SET #r = if_not_exists(#r, :at)")
            .condition_expression("attribute_exists(PK)")
            .expression_attribute_names("#r", REVOKED_AT)
            .expression_attribute_values(":at", n(at))
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().update(lookup).build(),
            TransactWriteItem::builder().update(listing).build(),
        ];
        Ok(self.transact(writes, "revoke_key").await?.is_ok())
    }
}
