//! [`SessionRetention`] on DynamoDB (issue 24), without a scan:
//!
//! - The tenants: a registry partition, `PK = TENANTS`, one item per tenant (`SK` = the tenant).
//!   Its item is put in the transaction that creates a session (no extra request), at most
//!   once per [`REGISTRY_REFRESH`] per tenant and process (a warm Lambda or `serve` remembers
//!   when it last wrote it), so the registry never becomes a hot item on a burst of new
//!   sessions; `tenants erase` deletes it. The sweep pages it in tenant order.
//! - A tenant's stale sessions: a query of the GSI `sessions` (`sessTenant` = `T#{tenant}`,
//!   `updatedAt < cutoff`), oldest first.
//! - Expiring a session: the session item is first marked (`expiringSince`) on the rule itself
//!   as the condition (`updatedAt` before the cutoff, idle, no active run, no turn accepted
//!   since it was read, no live lock). A marked session accepts no turn (the accept answers
//!   `unavailable`, retry later), so what it holds no longer changes: its runs, events,
//!   transcripts, idempotency records and pending-steer items are read and deleted, and the
//!   session item last. A turn accepted before the mark fails its condition and keeps the
//!   session whole. A pass cut off after the mark (a crash, a timeout) leaves the marked
//!   session in the `sessions` index with its old `updatedAt`: the next pass finds it and
//!   finishes, whatever the retention says by then, since part of it may be gone.

use super::error::{applied, build_error, classify};
use super::item::{
    ACTIVE_RUN_ID, EXPIRING, Item, LOCK_OWNER, LOCK_UNTIL, RUNS_ACCEPTED, RUNS_FINISHED,
    SESS_TENANT, SESSION_ID, STATUS, TENANT, UPDATED_AT, n, s, session_from_item, status_str,
    tenant_partition,
};
use super::keys::{self, PK, SESSION_SK, SK};
use super::{DynamoStore, SESSIONS_INDEX};
use agentlane_core::store::{Verdict, cutoff as cutoff_of, verdict};
use agentlane_core::{
    Expiry, Session, SessionKey, SessionRetention, SessionStatus, StoreResult, TenantId, TenantPage,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use std::collections::HashMap;
use std::time::Duration;

/// The partition key of the tenant registry.
pub(crate) const TENANTS_PK: &str = "TENANTS";
/// The attribute holding when a process last wrote a registry item (ms).
const REGISTERED_AT: &str = "registeredAt";
/// How long a process goes without writing a tenant's registry item again after writing it.
/// Far below any retention (a day at least): a tenant erased meanwhile is registered again by
/// the first session created after this, long before such a session could expire.
pub(crate) const REGISTRY_REFRESH: Duration = Duration::from_secs(3600);
/// Tenants remembered as registered per process; beyond this the memo is cleared.
const MAX_REMEMBERED_TENANTS: usize = 100_000;

impl DynamoStore {
    /// The registry item of `tenant`, to put in a transaction that creates a session, unless
    /// this process wrote it less than [`REGISTRY_REFRESH`] ago.
    pub(super) fn registry_put(
        &self,
        tenant: &TenantId,
        now: u64,
    ) -> StoreResult<Option<TransactWriteItem>> {
        let refresh = u64::try_from(REGISTRY_REFRESH.as_millis()).unwrap_or(u64::MAX);
        let fresh = self
            .registered
            .lock()
            .ok()
            .and_then(|map| map.get(tenant).copied())
            .is_some_and(|at| now < at.saturating_add(refresh));
        if fresh {
            return Ok(None);
        }
        let item: Item = HashMap::from([
            (PK.to_owned(), s(TENANTS_PK)),
            (SK.to_owned(), s(tenant.as_str())),
            (TENANT.to_owned(), s(tenant.as_str())),
            (REGISTERED_AT.to_owned(), n(now)),
        ]);
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .build()
            .map_err(build_error)?;
        Ok(Some(TransactWriteItem::builder().put(put).build()))
    }

    /// Remembers that the registry item of `tenant` was written at `now`.
    pub(super) fn note_registered(&self, tenant: &TenantId, now: u64) {
        if let Ok(mut map) = self.registered.lock() {
            if map.len() >= MAX_REMEMBERED_TENANTS {
                map.clear();
            }
            map.insert(tenant.clone(), now);
        }
    }

    /// Deletes the registry item of `tenant` (an erasure); whether there was one.
    pub(super) async fn forget_tenant(&self, tenant: &TenantId) -> StoreResult<bool> {
        if let Ok(mut map) = self.registered.lock() {
            map.remove(tenant);
        }
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(TENANTS_PK))
            .key(SK, s(tenant.as_str()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(classify)?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }
}

#[async_trait]
impl SessionRetention for DynamoStore {
    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<TenantPage> {
        let mut page = TenantPage::default();
        let mut start = after.map(|t| {
            HashMap::from([
                (PK.to_owned(), s(TENANTS_PK)),
                (SK.to_owned(), s(t.as_str())),
            ])
        });
        let limit = limit.max(1);
        loop {
            let want = i32::try_from(limit - page.tenants.len()).unwrap_or(i32::MAX);
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(format!("{PK} = :pk"))
                .expression_attribute_values(":pk", s(TENANTS_PK))
                .projection_expression(SK)
                .limit(want)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            page.tenants.extend(
                out.items
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|item| item.get(SK)?.as_s().ok())
                    .map(TenantId::new),
            );
            let more = out.last_evaluated_key.filter(|k| !k.is_empty());
            if page.tenants.len() >= limit {
                page.next = more.and(page.tenants.last().cloned());
                return Ok(page);
            }
            match more {
                Some(key) => start = Some(key),
                None => return Ok(page),
            }
        }
    }

    async fn stale_sessions(
        &self,
        tenant: &TenantId,
        cutoff: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        // `updatedAt < cutoff`: whole milliseconds, so at or before `cutoff - 1`.
        let Some(before) = cutoff.checked_sub(1) else {
            return Ok(Vec::new());
        };
        let partition = tenant_partition(tenant);
        self.query_index(
            SESSIONS_INDEX,
            (SESS_TENANT, &partition),
            UPDATED_AT,
            before,
            limit.max(1),
        )
        .await
    }

    async fn expire_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        retention: Duration,
        now: u64,
    ) -> StoreResult<Expiry> {
        let session_pk = keys::session_pk(tenant, key);
        let Some(item) = self.get_item(session_pk.clone(), SESSION_SK).await? else {
            return Ok(Expiry::Gone);
        };
        let session = session_from_item(&item)?;
        // A marked session is finished whatever the rule says now: part of it may be gone.
        if !item.contains_key(EXPIRING) {
            match verdict(&session, Some(retention), now) {
                Verdict::Expired => {}
                kept => return Ok(Expiry::Kept(kept)),
            }
            if !self
                .mark_expiring(&session, cutoff_of(retention, now), now)
                .await?
            {
                return Ok(match self.load_session(tenant, key).await? {
                    None => Expiry::Gone,
                    Some(now_stored) => {
                        Expiry::Kept(match verdict(&now_stored, Some(retention), now) {
                            Verdict::Expired => Verdict::Busy,
                            other => other,
                        })
                    }
                });
            }
        }
        // Marked: no turn is accepted any more, so what is read here is all there is.
        let runs = self.runs_of_session(&session).await?;
        let others = self.session_partition_others(&session_pk).await?;
        let mut removed = self.remove_runs_and_transcripts(&session, &runs).await?;
        removed.other += u64::try_from(others.len()).unwrap_or(u64::MAX) + 1;
        self.batch_delete(others).await?;
        self.delete_marked(&session).await?;
        Ok(Expiry::Removed(removed))
    }
}

impl DynamoStore {
    /// Marks the session item as expiring only if the retention rule still holds for it: its
    /// `updatedAt` before `cutoff`, idle without an active run, every turn finished and none
    /// accepted since `session` was read (same id, same count), no live lock at `now`.
    /// Whether it did.
    async fn mark_expiring(&self, session: &Session, cutoff: u64, now: u64) -> StoreResult<bool> {
        let marked = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(
                PK,
                s(keys::session_pk(&session.tenant, &session.session_key)),
            )
            .key(SK, s(SESSION_SK))
            .update_expression(format!("SET {EXPIRING} = :now"))
            .condition_expression(format!(
                "{UPDATED_AT} < :cut AND #st = :idle AND attribute_not_exists({ACTIVE_RUN_ID}) \
                 AND {SESSION_ID} = :sid AND {RUNS_ACCEPTED} = :acc AND {RUNS_FINISHED} >= :acc \
                 AND (attribute_not_exists({LOCK_OWNER}) OR {LOCK_UNTIL} < :now)"
            ))
            .expression_attribute_names("#st", STATUS)
            .expression_attribute_values(":cut", n(cutoff))
            .expression_attribute_values(":idle", s(status_str(SessionStatus::Idle)))
            .expression_attribute_values(":sid", s(session.session_id.as_str()))
            .expression_attribute_values(":acc", n(session.runs_accepted))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(marked)
    }

    /// Deletes the marked session item, the last of its items (still marked, same session
    /// id: nothing could replace it while marked, checked all the same).
    async fn delete_marked(&self, session: &Session) -> StoreResult<()> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(
                PK,
                s(keys::session_pk(&session.tenant, &session.session_key)),
            )
            .key(SK, s(SESSION_SK))
            .condition_expression(format!(
                "attribute_exists({EXPIRING}) AND {SESSION_ID} = :sid"
            ))
            .expression_attribute_values(":sid", s(session.session_id.as_str()))
            .send()
            .await;
        applied(deleted).map(|_| ())
    }
}
