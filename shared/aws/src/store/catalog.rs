//! [`SessionCatalog`] on DynamoDB (issue 24).
//!
//! - A tenant's sessions: a query of the GSI `sessions` (`sessTenant` = `T#{tenant}`, sort key
//!   `updatedAt`), newest first; the agent and status filters are the query's filter
//!   expression (never a scan of the table).
//! - A session's runs: a query of the GSI `sessionRuns` (`runSession` = the session's `PK`,
//!   sort key `sessionSeq`), newest first.
//! - Deleting a session: its runs from `sessionRuns` (and the session's open runs, which the
//!   index may not show yet), each run's partition (run + events), the transcript partition of
//!   every session id they name, their idempotency records (each only if it still names its
//!   run), the session's partition (pending steers) by `BatchWriteItem`, and the session item
//!   last, only if no writer holds its lock.

use super::error::{applied, build_error, classify};
use super::item::{
    AGENT_ID, Item, LOCK_OWNER, LOCK_UNTIL, RUN_ID, RUN_JSON, RUN_SESSION, SESS_TENANT,
    SESSION_SEQ, STATUS, UPDATED_AT, n, run_from_item, s, session_from_item, tenant_partition,
};
use super::keys::{self, EVENT_PREFIX, IDEM_SK, PK, SESSION_SK, SK};
use super::read::call_limit;
use super::{DynamoStore, SESSION_RUNS_INDEX, SESSIONS_INDEX};
use agentlane_core::{
    MAIN_AGENT, PageBudget, Run, RunId, RunPage, RunStatus, Session, SessionCatalog, SessionCursor,
    SessionFilter, SessionId, SessionKey, SessionPage, SessionRemoval, StoreError, StoreResult,
    TenantId, backoff,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
use std::collections::HashMap;
use std::time::Duration;

/// Items per `BatchWriteItem` (DynamoDB's limit).
const BATCH_WRITE_ITEMS: usize = 25;
/// Tries of a batch whose items DynamoDB left unprocessed (throttling) before giving up.
const BATCH_TRIES: u32 = 8;

#[async_trait]
impl SessionCatalog for DynamoStore {
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: &SessionFilter,
        after: Option<&SessionCursor>,
        budget: PageBudget,
    ) -> StoreResult<SessionPage> {
        let mut start = after.map(|c| {
            HashMap::from([
                (PK.to_owned(), s(keys::session_pk(tenant, &c.session_key))),
                (SK.to_owned(), s(SESSION_SK)),
                (SESS_TENANT.to_owned(), s(tenant_partition(tenant))),
                (UPDATED_AT.to_owned(), n(c.updated_at)),
            ])
        });
        let mut tally = budget.tally();
        let mut page = SessionPage::default();
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(SESSIONS_INDEX)
                .key_condition_expression(format!("{SESS_TENANT} = :t"))
                .expression_attribute_values(":t", s(tenant_partition(tenant)))
                .scan_index_forward(false)
                .limit(call_limit(&tally))
                .set_exclusive_start_key(start.take());
            let mut conditions = Vec::new();
            if let Some(agent) = &filter.agent_id {
                conditions.push(if agent == MAIN_AGENT {
                    format!("(attribute_not_exists({AGENT_ID}) OR {AGENT_ID} = :agent)")
                } else {
                    format!("{AGENT_ID} = :agent")
                });
                query = query.expression_attribute_values(":agent", s(agent.as_str()));
            }
            if let Some(status) = filter.status {
                conditions.push("#st = :status".to_owned());
                query = query
                    .expression_attribute_names("#st", STATUS)
                    .expression_attribute_values(":status", s(status.as_str()));
            }
            if !conditions.is_empty() {
                query = query.filter_expression(conditions.join(" AND "));
            }
            let out = query.send().await.map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                let session = session_from_item(&item)?;
                let size = serde_json::to_string(&session).map_or(0, |j| j.len());
                if !tally.admit(size) {
                    page.next = page.sessions.last().map(SessionCursor::after);
                    return Ok(page);
                }
                page.sessions.push(session);
            }
            let more = out.last_evaluated_key.filter(|k| !k.is_empty());
            if tally.is_full() {
                page.next = page.sessions.last().map(SessionCursor::after);
                return Ok(page);
            }
            match more {
                Some(key) => start = Some(key),
                None => return Ok(page),
            }
        }
    }

    async fn list_session_runs(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        status: Option<RunStatus>,
        before: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<RunPage> {
        let mut tally = budget.tally();
        let mut page = RunPage::default();
        let mut start = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(SESSION_RUNS_INDEX)
                .expression_attribute_values(":rs", s(keys::session_pk(tenant, key)))
                .scan_index_forward(false)
                .limit(call_limit(&tally))
                .set_exclusive_start_key(start.take());
            query = match before {
                Some(seq) => query
                    .key_condition_expression(format!(
                        "{RUN_SESSION} = :rs AND {SESSION_SEQ} < :before"
                    ))
                    .expression_attribute_values(":before", n(seq)),
                None => query.key_condition_expression(format!("{RUN_SESSION} = :rs")),
            };
            if let Some(status) = status {
                query = query
                    .filter_expression("#st = :status")
                    .expression_attribute_names("#st", STATUS)
                    .expression_attribute_values(":status", s(status.as_str()));
            }
            let out = query.send().await.map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                let size = item
                    .get(RUN_JSON)
                    .and_then(|v| v.as_s().ok())
                    .map_or(0, String::len);
                if !tally.admit(size) {
                    page.next = page.runs.last().map(|r| r.session_seq);
                    return Ok(page);
                }
                page.runs.push(run_from_item(&item)?);
            }
            let more = out.last_evaluated_key.filter(|k| !k.is_empty());
            if tally.is_full() {
                page.next = page.runs.last().map(|r| r.session_seq);
                return Ok(page);
            }
            match more {
                Some(key) => start = Some(key),
                None => return Ok(page),
            }
        }
    }

    async fn delete_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        now: u64,
    ) -> StoreResult<Option<SessionRemoval>> {
        self.remove_session(tenant, key, Some(now)).await
    }
}

impl DynamoStore {
    /// Deletes the session of `key` and everything of it. With `unlocked_at`, only while no
    /// writer holds its lock at that time (`Busy` otherwise); without, whatever its lock (an
    /// erasure).
    pub(super) async fn remove_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        unlocked_at: Option<u64>,
    ) -> StoreResult<Option<SessionRemoval>> {
        let Some(session) = self.load_session(tenant, key).await? else {
            return Ok(None);
        };
        if unlocked_at.is_some_and(|now| session.lock_is_live(now)) {
            return Err(StoreError::Busy);
        }
        let session_pk = keys::session_pk(tenant, key);
        let runs = self.runs_of_session(&session).await?;
        let mut removed = self.remove_runs_and_transcripts(&session, &runs).await?;
        let others = self.session_partition_others(&session_pk).await?;
        removed.other += count(others.len());
        self.batch_delete(others).await?;
        let mut delete = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(session_pk))
            .key(SK, s(SESSION_SK));
        if let Some(now) = unlocked_at {
            delete = delete
                .condition_expression(format!(
                    "attribute_exists({PK}) AND \
                     (attribute_not_exists({LOCK_OWNER}) OR {LOCK_UNTIL} < :now)"
                ))
                .expression_attribute_values(":now", n(now));
        }
        let deleted = delete.send().await;
        match deleted {
            Ok(_) => {
                removed.other += 1;
                Ok(Some(removed))
            }
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                // Taken by a writer meanwhile (or deleted by a concurrent delete).
                match self.load_session(tenant, key).await? {
                    Some(_) => Err(StoreError::Busy),
                    None => Ok(Some(removed)),
                }
            }
            Err(err) => Err(classify(err)),
        }
    }

    /// Every run of `session`'s key: those in the `sessionRuns` index, and its open runs,
    /// which the index may not show yet.
    pub(super) async fn runs_of_session(&self, session: &Session) -> StoreResult<Vec<Run>> {
        let session_pk = keys::session_pk(&session.tenant, &session.session_key);
        let mut runs = self.all_session_runs(&session_pk).await?;
        for run_id in session.open_runs.values() {
            if !runs.iter().any(|r| &r.run_id == run_id)
                && let Some(run) = self.load_run(&session.tenant, run_id).await?
            {
                runs.push(run);
            }
        }
        Ok(runs)
    }

    /// The keys of the items of the session partition `session_pk` besides the session item
    /// (pending steers).
    pub(super) async fn session_partition_others(
        &self,
        session_pk: &str,
    ) -> StoreResult<Vec<Item>> {
        Ok(self
            .partition_keys(session_pk)
            .await?
            .into_iter()
            .filter(|i| sort_key(i) != SESSION_SK)
            .collect())
    }

    /// Deletes `runs` (each run's partition: the run and its events), their idempotency
    /// records (each only if it still names its run) and the transcript partition of
    /// `session`'s id and of every session id the runs name.
    pub(super) async fn remove_runs_and_transcripts(
        &self,
        session: &Session,
        runs: &[Run],
    ) -> StoreResult<SessionRemoval> {
        let tenant = &session.tenant;
        let mut removed = SessionRemoval::default();
        let mut session_ids: Vec<SessionId> = vec![session.session_id.clone()];
        for run in runs {
            if !session_ids.contains(&run.session_id) {
                session_ids.push(run.session_id.clone());
            }
            let items = self
                .partition_keys(&keys::run_pk(tenant, &run.run_id))
                .await?;
            let events = items
                .iter()
                .filter(|i| sort_key(i).starts_with(EVENT_PREFIX))
                .count();
            removed.events += count(events);
            removed.runs += count(items.len() - events);
            self.batch_delete(items).await?;
            if let Some(idem) = &run.idempotency_key {
                let pk = keys::idempotency_pk(tenant, idem);
                if self.delete_if_names(&pk, &run.run_id).await? {
                    removed.other += 1;
                }
            }
        }
        for session_id in &session_ids {
            let items = self
                .partition_keys(&keys::transcript_pk(tenant, session_id))
                .await?;
            removed.transcript_entries += count(items.len());
            self.batch_delete(items).await?;
        }
        Ok(removed)
    }

    /// Every run of the session item `session_pk` in the `sessionRuns` index.
    async fn all_session_runs(&self, session_pk: &str) -> StoreResult<Vec<Run>> {
        let mut runs = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(SESSION_RUNS_INDEX)
                .key_condition_expression(format!("{RUN_SESSION} = :rs"))
                .expression_attribute_values(":rs", s(session_pk))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                runs.push(run_from_item(&item)?);
            }
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(runs),
            }
        }
    }

    /// The keys (`PK`, `SK`) of every item in the partition `pk` (consistent reads).
    pub(super) async fn partition_keys(&self, pk: &str) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(format!("{PK} = :pk"))
                .expression_attribute_values(":pk", s(pk))
                .projection_expression(format!("{PK}, {SK}"))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(items),
            }
        }
    }

    /// Deletes the items of `keys` (each `PK` and `SK`) by `BatchWriteItem`, 25 at a time,
    /// sending again what DynamoDB left unprocessed (after a jittered backoff).
    pub(super) async fn batch_delete(&self, keys: Vec<Item>) -> StoreResult<()> {
        let requests = keys
            .into_iter()
            .map(|key| {
                let delete = DeleteRequest::builder()
                    .set_key(Some(key))
                    .build()
                    .map_err(build_error)?;
                Ok(WriteRequest::builder().delete_request(delete).build())
            })
            .collect::<StoreResult<Vec<_>>>()?;
        for chunk in requests.chunks(BATCH_WRITE_ITEMS) {
            let mut pending = chunk.to_vec();
            let mut tries = 0;
            while !pending.is_empty() {
                if tries == BATCH_TRIES {
                    return Err(StoreError::Throttled(format!(
                        "BatchWriteItem: {} deletes still unprocessed after {BATCH_TRIES} tries",
                        pending.len()
                    )));
                }
                if tries > 0 {
                    let delay = Duration::from_millis(50u64 << tries.min(6));
                    tokio::time::sleep(backoff::jittered(delay)).await;
                }
                tries += 1;
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(classify)?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(&self.table))
                    .unwrap_or_default();
            }
        }
        Ok(())
    }

    /// Deletes the idempotency record `pk` if it still names `run_id`; whether it did.
    async fn delete_if_names(&self, pk: &str, run_id: &RunId) -> StoreResult<bool> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(IDEM_SK))
            .condition_expression(format!("{RUN_ID} = :rid"))
            .expression_attribute_values(":rid", s(run_id.as_str()))
            .send()
            .await;
        applied(deleted)
    }
}

/// A query's `Limit` for `remaining` more records (at least 1; DynamoDB applies it before the
/// filter, so a filtered page may take several requests).
fn sort_key(item: &Item) -> &str {
    item.get(SK)
        .and_then(|v| v.as_s().ok())
        .map_or("", String::as_str)
}

fn count(items: usize) -> u64 {
    u64::try_from(items).unwrap_or(u64::MAX)
}
