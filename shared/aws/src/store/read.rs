//! Reads (all strongly consistent) and the API's abort flag.

use super::DynamoStore;
use super::error::{DdbError, classify};
use super::item::s;
use super::item::{
    ABORT_REASON, ABORT_REQUESTED, ACTION_ANSWER, ANSWER_FOR, ENTRY_JSON, EVENT_JSON, Item, SEQ,
    entry_from_item, event_from_item, get_u64, run_from_item, session_from_item,
};
use super::keys::{
    self, ENTRY_PREFIX, EVENT_PREFIX, PK, RUN_SK, SESSION_SK, SK, after_bound, entry_sk, event_sk,
};
use agentlane_core::{
    AbortReason, Event, PageBudget, PageTally, Run, RunId, Session, SessionId, SessionKey,
    StoreResult, TenantId, TranscriptEntry,
};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

impl DynamoStore {
    /// Every item of partition `pk` whose sort key starts with `prefix`, strongly consistent,
    /// all pages (listings: a tenant's API keys, its cron jobs).
    pub(super) async fn query_prefix(&self, pk: String, prefix: &str) -> StoreResult<Vec<Item>> {
        self.query_all(pk, &format!("begins_with({SK}, :a)"), &[prefix])
            .await
    }

    /// The first `count` items of partition `pk` whose sort key is between `from` and `to`
    /// (inclusive), ascending, strongly consistent: no more are read (a page of a tenant's
    /// spend counters over a range of days).
    pub(super) async fn query_between_first(
        &self,
        pk: String,
        from: &str,
        to: &str,
        count: usize,
    ) -> StoreResult<Vec<Item>> {
        self.query_first(pk, &format!("{SK} BETWEEN :a AND :b"), &[from, to], count)
            .await
    }

    /// Every item of partition `pk` whose sort key meets `sk_condition`, over the values `:a`,
    /// `:b`, ... (`values`, in order), strongly consistent, all pages.
    async fn query_all(
        &self,
        pk: String,
        sk_condition: &str,
        values: &[&str],
    ) -> StoreResult<Vec<Item>> {
        self.query_first(pk, sk_condition, values, usize::MAX).await
    }

    /// [`query_all`](Self::query_all) up to its first `count` items (`usize::MAX`: all).
    async fn query_first(
        &self,
        pk: String,
        sk_condition: &str,
        values: &[&str],
        count: usize,
    ) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        while items.len() < count {
            let limit = (count != usize::MAX)
                .then(|| i32::try_from(count - items.len()).unwrap_or(i32::MAX));
            let mut query = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression(format!("{PK} = :pk AND {sk_condition}"))
                .expression_attribute_values(":pk", s(pk.clone()));
            for (name, value) in [":a", ":b"].iter().zip(values) {
                query = query.expression_attribute_values(*name, s(*value));
            }
            let out = query
                .consistent_read(true)
                .set_limit(limit)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
        items.truncate(count);
        Ok(items)
    }

    /// One item by key, strongly consistent.
    pub(super) async fn get_item(&self, pk: String, sk: &str) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(pk))
            .key(SK, AttributeValue::S(sk.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        Ok(out.item)
    }

    pub(super) async fn load_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        self.get_item(keys::session_pk(tenant, key), SESSION_SK)
            .await?
            .as_ref()
            .map(session_from_item)
            .transpose()
    }

    pub(super) async fn load_run(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<Option<Run>> {
        self.get_item(keys::run_pk(tenant, run_id), RUN_SK)
            .await?
            .as_ref()
            .map(run_from_item)
            .transpose()
    }

    /// Only the `abortRequested` attribute of a run (a small consistent read).
    pub(super) async fn load_abort_requested(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<bool> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(keys::run_pk(tenant, run_id)))
            .key(SK, AttributeValue::S(RUN_SK.to_owned()))
            .projection_expression("#a")
            .expression_attribute_names("#a", super::item::ABORT_REQUESTED)
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        Ok(matches!(
            out.item
                .as_ref()
                .and_then(|i| i.get(super::item::ABORT_REQUESTED)),
            Some(AttributeValue::Bool(true))
        ))
    }

    /// The run's `abortRequested` and `abortReason` attributes as stored (a small consistent
    /// read), to carry them over when the run item is replaced whole.
    pub(super) async fn load_abort_attributes(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<[Option<AttributeValue>; 4]> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(keys::run_pk(tenant, run_id)))
            .key(SK, AttributeValue::S(RUN_SK.to_owned()))
            .projection_expression("#a, #r, #q, #f")
            .expression_attribute_names("#a", ABORT_REQUESTED)
            .expression_attribute_names("#r", ABORT_REASON)
            .expression_attribute_names("#q", ACTION_ANSWER)
            .expression_attribute_names("#f", ANSWER_FOR)
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        let mut item = out.item.unwrap_or_default();
        Ok([
            item.remove(ABORT_REQUESTED),
            item.remove(ABORT_REASON),
            item.remove(ACTION_ANSWER),
            item.remove(ANSWER_FOR),
        ])
    }

    /// Records the answer to a pause: one conditional `UpdateItem`, only while the run is
    /// `requires_action` and no answer for that pause or a later one is stored.
    pub(super) async fn record_answer(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        answer: &agentlane_core::RecordedAnswer,
    ) -> StoreResult<agentlane_core::AnswerOutcome> {
        use agentlane_core::AnswerOutcome;
        let json = serde_json::to_string(answer)
            .map_err(|e| agentlane_core::StoreError::Corrupt(format!("answer to JSON: {e}")))?;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(keys::run_pk(tenant, run_id)))
            .key(SK, AttributeValue::S(RUN_SK.to_owned()))
            .update_expression(format!(
                "SET {ACTION_ANSWER} = :answer, {ANSWER_FOR} = :for"
            ))
            .condition_expression(format!(
                "#st = :paused AND (attribute_not_exists({ANSWER_FOR}) OR {ANSWER_FOR} < :for)"
            ))
            .expression_attribute_names("#st", super::item::STATUS)
            .expression_attribute_values(":answer", AttributeValue::S(json))
            .expression_attribute_values(":for", AttributeValue::N(answer.action_id.to_string()))
            .expression_attribute_values(
                ":paused",
                AttributeValue::S(
                    agentlane_core::RunStatus::RequiresAction
                        .as_str()
                        .to_owned(),
                ),
            )
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => match out.attributes.as_ref().map(run_from_item).transpose()? {
                Some(run) => Ok(AnswerOutcome::Recorded(run)),
                None => Ok(AnswerOutcome::NotFound),
            },
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(_) => Ok(match self.load_run(tenant, run_id).await? {
                    Some(run) => AnswerOutcome::NotWaiting(run),
                    None => AnswerOutcome::NotFound,
                }),
                other => Err(other.into_store_error("answer_action")),
            },
        }
    }

    /// Sets `abortRequested`; a reason other than a plain request is recorded in
    /// `abortReason` (the first such reason stays). The supervisor only asks when it read no
    /// request.
    pub(super) async fn set_abort_requested(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(keys::run_pk(tenant, run_id)))
            .key(SK, AttributeValue::S(RUN_SK.to_owned()))
            .condition_expression(format!("attribute_exists({PK})"))
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .return_values(ReturnValue::AllNew);
        update = match reason {
            AbortReason::Requested => {
                update.update_expression(format!("SET {ABORT_REQUESTED} = :yes"))
            }
            AbortReason::Stuck | AbortReason::Interrupted => update
                .update_expression(format!(
                    "SET {ABORT_REQUESTED} = :yes, {ABORT_REASON} = if_not_exists({ABORT_REASON}, :reason)"
                ))
                .expression_attribute_values(":reason", AttributeValue::S(reason.code().to_owned())),
        };
        let result = update.send().await;
        match result {
            Ok(out) => out.attributes.as_ref().map(run_from_item).transpose(),
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(_) => Ok(None),
                other => Err(other.into_store_error("request_abort")),
            },
        }
    }

    pub(super) async fn query_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let after = after_bound(ENTRY_PREFIX, after, entry_sk(0).len() - ENTRY_PREFIX.len());
        self.query_page(
            keys::transcript_pk(tenant, session_id),
            after,
            budget,
            ENTRY_JSON,
            entry_from_item,
        )
        .await
    }

    pub(super) async fn query_events(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<Event>> {
        let after = after_bound(EVENT_PREFIX, after, event_sk(0).len() - EVENT_PREFIX.len());
        self.query_page(
            keys::run_pk(tenant, run_id),
            after,
            budget,
            EVENT_JSON,
            event_from_item,
        )
        .await
    }

    /// The seq of the run's newest event, `None` when it has none: one query of the run's
    /// partition, event keys only, newest first, one item, only `seq` projected.
    pub(super) async fn newest_event_seq(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> StoreResult<Option<u64>> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(format!("{PK} = :pk AND begins_with({SK}, :events)"))
            .expression_attribute_values(":pk", AttributeValue::S(keys::run_pk(tenant, run_id)))
            .expression_attribute_values(":events", AttributeValue::S(EVENT_PREFIX.to_owned()))
            .projection_expression("#seq")
            .expression_attribute_names("#seq", SEQ)
            .consistent_read(true)
            .scan_index_forward(false)
            .limit(1)
            .send()
            .await
            .map_err(classify)?;
        out.items
            .unwrap_or_default()
            .first()
            .map(|item| get_u64(item, SEQ))
            .transpose()
    }

    /// Records of partition `pk` with `SK > after`, ascending, within `budget`, each decoded by
    /// `decode` once the budget admits the size of its JSON attribute `json`. Queries with a
    /// small `Limit` sized from the records seen so far (DynamoDB also cuts each answer at 1 MB),
    /// and stops at the first record that does not fit: at most one answer's records beyond the
    /// budget are ever held, and those are dropped undecoded.
    async fn query_page<T>(
        &self,
        pk: String,
        after: String,
        budget: PageBudget,
        json: &str,
        decode: fn(&Item) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut tally = budget.tally();
        let mut records = Vec::new();
        let mut start = None;
        while !tally.is_full() {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(format!("{PK} = :pk AND {SK} > :after"))
                .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
                .expression_attribute_values(":after", AttributeValue::S(after.clone()))
                .consistent_read(true)
                .scan_index_forward(true)
                .limit(call_limit(&tally))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                let size = match item.get(json) {
                    Some(AttributeValue::S(text)) => text.len(),
                    _ => 0,
                };
                if !tally.admit(size) {
                    return Ok(records);
                }
                records.push(decode(&item)?);
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        Ok(records)
    }
}

/// Records asked of DynamoDB in the first call of a byte-bounded page: few, since their size
/// is not known yet (one call of unbounded pages asks for the whole count).
const FIRST_CALL_RECORDS: usize = 16;

/// The `Limit` of the next query call: the count still allowed, and for a byte-bounded page no
/// more records than the bytes left would hold at the average size seen so far (plus one, to
/// find where the page ends).
pub(super) fn call_limit(tally: &PageTally) -> i32 {
    let count = tally.remaining_count();
    let wanted = if tally.budget().bytes == usize::MAX {
        count
    } else if tally.items() == 0 {
        count.min(FIRST_CALL_RECORDS)
    } else {
        let average = (tally.bytes() / tally.items()).max(1);
        count.min(tally.remaining_bytes() / average + 1)
    };
    i32::try_from(wanted.max(1)).unwrap_or(i32::MAX)
}
