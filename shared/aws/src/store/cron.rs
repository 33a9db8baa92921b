//! [`CronStore`] for [`DynamoStore`].
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | cron job | `T#{t}#CRON` | `J#{jobId}` | `job` (JSON), `version` (N), `dueBucket` = `DUE` and `dueAt` (N) while the job is due some time |
//! | job count | `T#{t}#CRON` | `COUNT` | `jobs` (N): the tenant's jobs, for the cap |
//!
//! - Listing a tenant's jobs is one `Query` on its partition (`SK` begins with `J#`).
//! - Create: one transaction (count `ADD 1` if below the cap; job put if absent). Delete: one
//!   transaction (job delete if present; count `ADD -1`).
//! - Replace (a claim, a reconcile, a PATCH): `PutItem` conditional on `version = :expected`.
//! - A finished fire's session item and transcript entries get `expiresAt` (TTL) 24 h after
//!   its end ([`CronStore::retire_fire`]): DynamoDB deletes them; the run record stays.
//! - Due jobs: a `Query` on the sparse GSI `cronDue` (`dueBucket = DUE AND dueAt <= :until`),
//!   earliest first — never a scan. GSI reads are eventually consistent; a stale copy only makes
//!   the conditional replace fail, and the ticker re-reads the job.

use super::error::build_error;
use super::error::{DdbError, classify};
use super::item::{EXPIRES_AT, Item, get_str, n, s};
use super::keys::{self, PK, SESSION_SK, SK};
use super::{CRON_DUE_INDEX, DynamoStore};
use agentlane_core::cron::{CronJob, CronStore, JobId};
use agentlane_core::{SessionKey, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};

const JOB_JSON: &str = "job";
const VERSION: &str = "version";
const DUE_BUCKET: &str = "dueBucket";
const DUE_AT: &str = "dueAt";
/// The one partition of the due index (a few hundred writes a second at most: enough for
/// a tick per second over many thousands of jobs).
const DUE_BUCKET_VALUE: &str = "DUE";
const COUNT_SK: &str = "COUNT";
const JOB_COUNT: &str = "jobs";
const JOB_PREFIX: &str = "J#";

pub(super) fn cron_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#CRON")
}

fn job_sk(job_id: &JobId) -> String {
    format!("{JOB_PREFIX}{job_id}")
}

fn job_item(job: &CronJob) -> StoreResult<Item> {
    let json = serde_json::to_string(job).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let mut item = Item::new();
    item.insert(PK.into(), s(cron_pk(&job.tenant)));
    item.insert(SK.into(), s(job_sk(&job.job_id)));
    item.insert(JOB_JSON.into(), s(json));
    item.insert(VERSION.into(), n(job.version));
    if let Some(due) = job.due_at() {
        item.insert(DUE_BUCKET.into(), s(DUE_BUCKET_VALUE));
        item.insert(DUE_AT.into(), n(due));
    }
    Ok(item)
}

fn job_from_item(item: &Item) -> StoreResult<CronJob> {
    serde_json::from_str(get_str(item, JOB_JSON)?).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl DynamoStore {
    fn count_key(&self, tenant: &TenantId) -> (String, AttributeValue, String, AttributeValue) {
        (PK.into(), s(cron_pk(tenant)), SK.into(), s(COUNT_SK))
    }

    async fn stored_version(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<Option<u64>> {
        Ok(self.get_job(tenant, job_id).await?.map(|j| j.version))
    }
}

#[async_trait]
impl CronStore for DynamoStore {
    async fn create_job(&self, job: &CronJob, max_jobs: u32) -> StoreResult<()> {
        let (pk_name, pk, sk_name, sk) = self.count_key(&job.tenant);
        let count = Update::builder()
            .table_name(self.table())
            .key(pk_name, pk)
            .key(sk_name, sk)
            .update_expression("ADD #n :one")
            .condition_expression("attribute_not_exists(#n) OR #n < :cap")
            .expression_attribute_names("#n", JOB_COUNT)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":cap", n(u64::from(max_jobs)))
            .build()
            .map_err(build_error)?;
        let put = Put::builder()
            .table_name(self.table())
            .set_item(Some(job_item(job)?))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().update(count).build(),
            TransactWriteItem::builder().put(put).build(),
        ];
        match self.transact(writes, "create_job").await? {
            Ok(()) => Ok(()),
            Err(failed) if failed.contains(&0) => Err(StoreError::Conflict(format!(
                "the tenant already has the most cron jobs allowed (the cap is {max_jobs})"
            ))),
            Err(_) => Err(StoreError::Conflict(format!("job {} exists", job.job_id))),
        }
    }

    async fn get_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<Option<CronJob>> {
        let out = self
            .client
            .get_item()
            .table_name(self.table())
            .key(PK, s(cron_pk(tenant)))
            .key(SK, s(job_sk(job_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        out.item.as_ref().map(job_from_item).transpose()
    }

    async fn list_jobs(&self, tenant: &TenantId) -> StoreResult<Vec<CronJob>> {
        let items = self.query_prefix(cron_pk(tenant), JOB_PREFIX).await?;
        items.iter().map(job_from_item).collect()
    }

    async fn replace_job(&self, job: &CronJob, expected_version: u64) -> StoreResult<()> {
        let result = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(job_item(job)?))
            .condition_expression("attribute_exists(PK) AND #v = :expected")
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_values(":expected", n(expected_version))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(_) => {
                    match self.stored_version(&job.tenant, &job.job_id).await? {
                        None => Err(StoreError::NotFound(format!("job {}", job.job_id))),
                        Some(v) => Err(StoreError::Conflict(format!(
                            "job {} changed (version {v}, expected {expected_version})",
                            job.job_id
                        ))),
                    }
                }
                DdbError::TransactionConflict => Err(StoreError::Conflict(format!(
                    "job {} is being changed",
                    job.job_id
                ))),
                other => Err(other.into_store_error("replace_job")),
            },
        }
    }

    async fn delete_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<bool> {
        let delete = Delete::builder()
            .table_name(self.table())
            .key(PK, s(cron_pk(tenant)))
            .key(SK, s(job_sk(job_id)))
            .condition_expression("attribute_exists(PK)")
            .build()
            .map_err(build_error)?;
        let (pk_name, pk, sk_name, sk) = self.count_key(tenant);
        let count = Update::builder()
            .table_name(self.table())
            .key(pk_name, pk)
            .key(sk_name, sk)
            .update_expression("ADD #n :minus")
            .expression_attribute_names("#n", JOB_COUNT)
            .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().delete(delete).build(),
            TransactWriteItem::builder().update(count).build(),
        ];
        // Only the delete is conditional (the job must exist).
        Ok(self.transact(writes, "delete_job").await?.is_ok())
    }

    async fn retire_fire(
        &self,
        tenant: &TenantId,
        session_key: &SessionKey,
        keep_until: u64,
    ) -> StoreResult<()> {
        let Some(session) = self.load_session(tenant, session_key).await? else {
            return Ok(());
        };
        let ttl = n(keep_until / 1000);
        let mut targets = vec![(keys::session_pk(tenant, session_key), SESSION_SK.to_owned())];
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression(format!("{PK} = :pk"))
                .expression_attribute_values(
                    ":pk",
                    s(keys::transcript_pk(tenant, &session.session_id)),
                )
                .projection_expression(format!("{PK}, {SK}"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                targets.push((
                    get_str(&item, PK)?.to_owned(),
                    get_str(&item, SK)?.to_owned(),
                ));
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        for (pk, sk) in targets {
            let result = self
                .client
                .update_item()
                .table_name(self.table())
                .key(PK, s(pk))
                .key(SK, s(sk))
                .update_expression("SET #ttl = :ttl")
                .condition_expression("attribute_exists(PK)")
                .expression_attribute_names("#ttl", EXPIRES_AT)
                .expression_attribute_values(":ttl", ttl.clone())
                .send()
                .await;
            match result.map_err(DdbError::from) {
                // Gone already: nothing to expire.
                Ok(_) | Err(DdbError::ConditionFailed(_)) => {}
                Err(other) => return Err(other.into_store_error("retire_fire")),
            }
        }
        Ok(())
    }

    async fn due_jobs(&self, until: u64, limit: usize) -> StoreResult<Vec<CronJob>> {
        let mut jobs = Vec::new();
        let mut start = None;
        while jobs.len() < limit {
            let page = i32::try_from(limit - jobs.len()).unwrap_or(i32::MAX);
            let out = self
                .client
                .query()
                .table_name(self.table())
                .index_name(CRON_DUE_INDEX)
                .key_condition_expression("#b = :bucket AND #d <= :until")
                .expression_attribute_names("#b", DUE_BUCKET)
                .expression_attribute_names("#d", DUE_AT)
                .expression_attribute_values(":bucket", s(DUE_BUCKET_VALUE))
                .expression_attribute_values(":until", n(until))
                .scan_index_forward(true)
                .limit(page)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                jobs.push(job_from_item(&item)?);
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        jobs.truncate(limit);
        Ok(jobs)
    }
}
