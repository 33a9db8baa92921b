//! [`SecretStore`] for [`DynamoStore`]: a tenant's secrets, sealed, in one partition of its own.
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | secret | `T#{t}#SECRETS` | `N#{name}` | `keyRef` (S), `wrappedKey`, `nonce`, `ciphertext` (B), `createdAt`, `updatedAt`, `version` (N) |
//! | secret count | `T#{t}#SECRETS` | `COUNT` | `secrets` (N): the tenant's secrets, for the cap |
//!
//! - The partition starts with `T#{tenant}#`, so the roles' `dynamodb:LeadingKeys` confinement
//!   holds. The item keeps the sealed value only (see [`agentlane_core::tenant_secret`]): no
//!   attribute holds or reveals the plaintext.
//! - Create: one transaction, the count `ADD 1` under the cap and the secret put if absent,
//!   so concurrent creates never pass the cap. Replace: one `UpdateItem` conditional on the
//!   item existing (`version + 1`, `createdAt` untouched): a reader sees the old value or the
//!   new one. A put tries the replace first and creates when there is nothing to replace.
//! - Delete: one transaction, the secret deleted if present and the count `ADD -1`.
//! - Listing is one `Query` on the partition (`SK > N#{after}`, in name order, values not
//!   projected), never a scan; `COUNT` sorts before every `N#` key.
//! - `tenants erase` deletes the whole partition (count included).

use super::DynamoStore;
use super::error::{DdbError, build_error, classify};
use super::item::{Item, get_str, get_u64, n, s};
use super::keys::{PK, SK};
use agentlane_core::{
    PutSecret, SealedValue, SecretMeta, SecretRecord, SecretStore, StoreError, StoreResult,
    TenantId,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValue, TransactWriteItem, Update,
};

/// Sort-key prefix of a secret item.
pub(super) const SECRET_PREFIX: &str = "N#";
/// Sort key of the tenant's secret count.
const COUNT_SK: &str = "COUNT";
const SECRET_COUNT: &str = "secrets";
const KEY_REF: &str = "keyRef";
const WRAPPED_KEY: &str = "wrappedKey";
const NONCE: &str = "nonce";
const CIPHERTEXT: &str = "ciphertext";
const CREATED_AT: &str = "createdAt";
const UPDATED_AT: &str = "updatedAt";
const VERSION: &str = "version";
/// How often a put goes round when a concurrent create or delete changed the answer between
/// its replace and its create.
const PUT_ROUNDS: u32 = 4;

/// The partition of a tenant's secrets.
pub(super) fn secrets_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#SECRETS")
}

fn secret_sk(name: &str) -> String {
    format!("{SECRET_PREFIX}{name}")
}

fn blob(bytes: &[u8]) -> AttributeValue {
    AttributeValue::B(Blob::new(bytes))
}

fn get_bytes(item: &Item, name: &str) -> StoreResult<Vec<u8>> {
    match item.get(name) {
        Some(AttributeValue::B(b)) => Ok(b.as_ref().to_vec()),
        _ => Err(StoreError::Corrupt(format!(
            "secret item without the binary attribute {name}"
        ))),
    }
}

fn meta_from(name: &str, item: &Item) -> StoreResult<SecretMeta> {
    Ok(SecretMeta {
        name: name.to_owned(),
        created_at: get_u64(item, CREATED_AT)?,
        updated_at: get_u64(item, UPDATED_AT)?,
        version: get_u64(item, VERSION)?,
    })
}

fn name_of(item: &Item) -> StoreResult<&str> {
    let sk = get_str(item, SK)?;
    sk.strip_prefix(SECRET_PREFIX)
        .ok_or_else(|| StoreError::Corrupt(format!("secret item with the sort key {sk:?}")))
}

impl DynamoStore {
    /// Replaces the value of an existing secret in one conditional write; `None` when there
    /// is none of that name.
    async fn replace_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
        now: u64,
    ) -> StoreResult<Option<SecretMeta>> {
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(secrets_pk(tenant)))
            .key(SK, s(secret_sk(name)))
            .update_expression(
                "SET #kr = :kr, #wk = :wk, #nc = :nc, #ct = :ct, #ua = :now, #v = #v + :one",
            )
            .condition_expression("attribute_exists(PK)")
            .expression_attribute_names("#kr", KEY_REF)
            .expression_attribute_names("#wk", WRAPPED_KEY)
            .expression_attribute_names("#nc", NONCE)
            .expression_attribute_names("#ct", CIPHERTEXT)
            .expression_attribute_names("#ua", UPDATED_AT)
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_values(":kr", s(sealed.key_ref.clone()))
            .expression_attribute_values(":wk", blob(&sealed.wrapped_key))
            .expression_attribute_values(":nc", blob(&sealed.nonce))
            .expression_attribute_values(":ct", blob(&sealed.ciphertext))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match out {
            Ok(out) => {
                let item = out.attributes.unwrap_or_default();
                meta_from(name, &item).map(Some)
            }
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(_) => Ok(None),
                other => Err(other.into_store_error("put_secret")),
            },
        }
    }

    /// Creates the secret under the cap in one transaction. `Ok(None)`: it exists meanwhile.
    async fn create_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
        now: u64,
        max_secrets: u32,
    ) -> StoreResult<Option<SecretMeta>> {
        let count = Update::builder()
            .table_name(self.table())
            .key(PK, s(secrets_pk(tenant)))
            .key(SK, s(COUNT_SK))
            .update_expression("ADD #n :one")
            .condition_expression("attribute_not_exists(#n) OR #n < :cap")
            .expression_attribute_names("#n", SECRET_COUNT)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":cap", n(u64::from(max_secrets)))
            .build()
            .map_err(build_error)?;
        let put = Put::builder()
            .table_name(self.table())
            .item(PK, s(secrets_pk(tenant)))
            .item(SK, s(secret_sk(name)))
            .item(KEY_REF, s(sealed.key_ref.clone()))
            .item(WRAPPED_KEY, blob(&sealed.wrapped_key))
            .item(NONCE, blob(&sealed.nonce))
            .item(CIPHERTEXT, blob(&sealed.ciphertext))
            .item(CREATED_AT, n(now))
            .item(UPDATED_AT, n(now))
            .item(VERSION, n(1))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().update(count).build(),
            TransactWriteItem::builder().put(put).build(),
        ];
        let meta = SecretMeta {
            name: name.to_owned(),
            created_at: now,
            updated_at: now,
            version: 1,
        };
        match self.transact(writes, "put_secret").await? {
            Ok(()) => Ok(Some(meta)),
            Err(failed) if failed.contains(&1) => Ok(None),
            // The count alone failed; the name may still have been created meanwhile (an
            // emulator may stop at the first failed condition): then it is a replace.
            Err(_) => match self.get_item(secrets_pk(tenant), &secret_sk(name)).await? {
                Some(_) => Ok(None),
                None => Err(StoreError::Conflict(format!(
                    "the tenant already has the most secrets allowed (the cap is {max_secrets})"
                ))),
            },
        }
    }
}

#[async_trait]
impl SecretStore for DynamoStore {
    async fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &SealedValue,
        now: u64,
        max_secrets: u32,
    ) -> StoreResult<PutSecret> {
        for _ in 0..PUT_ROUNDS {
            if let Some(meta) = self.replace_secret(tenant, name, sealed, now).await? {
                return Ok(PutSecret {
                    created: false,
                    meta,
                });
            }
            if let Some(meta) = self
                .create_secret(tenant, name, sealed, now, max_secrets)
                .await?
            {
                return Ok(PutSecret {
                    created: true,
                    meta,
                });
            }
        }
        Err(StoreError::Throttled(format!(
            "put_secret: secret {name:?} kept being created and deleted meanwhile"
        )))
    }

    async fn get_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SecretRecord>> {
        let Some(item) = self.get_item(secrets_pk(tenant), &secret_sk(name)).await? else {
            return Ok(None);
        };
        Ok(Some(SecretRecord {
            tenant: tenant.clone(),
            meta: meta_from(name, &item)?,
            sealed: SealedValue {
                key_ref: get_str(&item, KEY_REF)?.to_owned(),
                wrapped_key: get_bytes(&item, WRAPPED_KEY)?,
                nonce: get_bytes(&item, NONCE)?,
                ciphertext: get_bytes(&item, CIPHERTEXT)?,
            },
        }))
    }

    async fn list_secrets(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<SecretMeta>> {
        let mut secrets = Vec::new();
        let mut start = None;
        let lower = secret_sk(after.unwrap_or_default());
        while secrets.len() < limit {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression(format!("{PK} = :pk AND {SK} > :after"))
                .expression_attribute_values(":pk", s(secrets_pk(tenant)))
                .expression_attribute_values(":after", s(lower.clone()))
                .projection_expression("#sk, #ca, #ua, #v")
                .expression_attribute_names("#sk", SK)
                .expression_attribute_names("#ca", CREATED_AT)
                .expression_attribute_names("#ua", UPDATED_AT)
                .expression_attribute_names("#v", VERSION)
                .consistent_read(true)
                .limit(i32::try_from(limit - secrets.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items() {
                if !get_str(item, SK)?.starts_with(SECRET_PREFIX) {
                    return Ok(secrets);
                }
                secrets.push(meta_from(name_of(item)?, item)?);
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        secrets.truncate(limit);
        Ok(secrets)
    }

    async fn delete_secret(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        let delete = Delete::builder()
            .table_name(self.table())
            .key(PK, s(secrets_pk(tenant)))
            .key(SK, s(secret_sk(name)))
            .condition_expression("attribute_exists(PK)")
            .build()
            .map_err(build_error)?;
        let count = Update::builder()
            .table_name(self.table())
            .key(PK, s(secrets_pk(tenant)))
            .key(SK, s(COUNT_SK))
            .update_expression("ADD #n :minus")
            .expression_attribute_names("#n", SECRET_COUNT)
            .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().delete(delete).build(),
            TransactWriteItem::builder().update(count).build(),
        ];
        Ok(self.transact(writes, "delete_secret").await?.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_live_under_the_tenant_and_sort_by_name_after_the_count() {
        let t = TenantId::new("acme");
        assert_eq!(secrets_pk(&t), "T#acme#SECRETS");
        assert_eq!(secret_sk("GITHUB_TOKEN"), "N#GITHUB_TOKEN");
        // Listing from the start is `SK > "N#"`: every secret, never the count.
        assert!(COUNT_SK < secret_sk("").as_str());
        assert!(secret_sk("") < secret_sk("-"));
        assert!(secret_sk("a") < secret_sk("b"));
    }
}
