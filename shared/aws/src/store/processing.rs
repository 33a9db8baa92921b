//! [`ProcessingIndex`] on DynamoDB: a query of the sparse `processing` GSI (`procPk` =
//! `PROCESSING`, `procAt` = last progress). Idle sessions are not in the index, so a sweep of a
//! table with any number of idle sessions costs one query request (plus one per 1 MB page of
//! processing sessions past the warn threshold).
//!
//! The pending sessions (issue 11) likewise: a query of the sparse `pending` GSI (`pendPk` =
//! `PENDING`, `pendAt` = since when), and one conditional `UpdateItem` per session the sweep
//! settles.

use super::error::{applied, classify};
use super::item::{
    PEND_AT, PEND_PK, PEND_PK_VALUE, PROC_AT, PROC_PK, PROC_PK_VALUE, REDRIVES, RUNS_ACCEPTED,
    RUNS_FINISHED, SESSION_ID, n, open_run_attr, s, session_from_item,
};
use super::keys::{self, PK, SESSION_SK, SK};
use super::{DynamoStore, PENDING_INDEX, PROCESSING_INDEX};
use agentlane_core::{PendingSettle, ProcessingIndex, Session, StoreResult};
use async_trait::async_trait;

#[async_trait]
impl ProcessingIndex for DynamoStore {
    async fn processing_sessions(
        &self,
        progress_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        self.query_index(
            PROCESSING_INDEX,
            (PROC_PK, PROC_PK_VALUE),
            PROC_AT,
            progress_before,
            limit,
        )
        .await
    }

    async fn pending_sessions(
        &self,
        pending_before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        self.query_index(
            PENDING_INDEX,
            (PEND_PK, PEND_PK_VALUE),
            PEND_AT,
            pending_before,
            limit,
        )
        .await
    }

    async fn settle_pending(&self, seen: &Session, settle: PendingSettle) -> StoreResult<bool> {
        let Some(seen_at) = seen.pending_at else {
            return Ok(false);
        };
        let mut after = seen.clone();
        after.settle_pending(settle);
        let mut remove: Vec<String> = seen
            .open_runs
            .keys()
            .filter(|seq| !after.open_runs.contains_key(seq))
            .map(|seq| open_run_attr(*seq))
            .collect();
        let mut set = Vec::new();
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(keys::session_pk(&seen.tenant, &seen.session_key)))
            .key(SK, s(SESSION_SK))
            .condition_expression(format!(
                "{SESSION_ID} = :sid AND {RUNS_ACCEPTED} = :acc AND {RUNS_FINISHED} = :fin \
                 AND {PEND_AT} = :seen"
            ))
            .expression_attribute_values(":sid", s(seen.session_id.as_str()))
            .expression_attribute_values(":acc", n(seen.runs_accepted))
            .expression_attribute_values(":fin", n(seen.runs_finished))
            .expression_attribute_values(":seen", n(seen_at));
        match after.pending_at {
            None => remove.extend([PEND_PK.to_owned(), PEND_AT.to_owned(), REDRIVES.to_owned()]),
            Some(at) => {
                set.push(format!("{PEND_AT} = :at, {REDRIVES} = :redrives"));
                update = update
                    .expression_attribute_values(":at", n(at))
                    .expression_attribute_values(":redrives", n(u64::from(after.redrives)));
            }
        }
        let mut expression = String::new();
        if !set.is_empty() {
            expression = format!("SET {}", set.join(", "));
        }
        if !remove.is_empty() {
            expression = format!("{expression} REMOVE {}", remove.join(", "));
        }
        applied(update.update_expression(expression.trim()).send().await)
    }
}

impl DynamoStore {
    /// Up to `limit` items of the GSI `index` (partition `pk`, sort key `at` at or
    /// before `before`), oldest first, as sessions.
    pub(super) async fn query_index(
        &self,
        index: &str,
        pk: (&str, &str),
        at: &str,
        before: u64,
        limit: usize,
    ) -> StoreResult<Vec<Session>> {
        let mut sessions = Vec::new();
        let mut start = None;
        loop {
            let page_limit =
                i32::try_from(limit.saturating_sub(sessions.len())).unwrap_or(i32::MAX);
            if page_limit == 0 {
                return Ok(sessions);
            }
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression("#pk = :pk AND #at <= :before")
                .expression_attribute_names("#pk", pk.0)
                .expression_attribute_names("#at", at)
                .expression_attribute_values(":pk", s(pk.1))
                .expression_attribute_values(":before", n(before))
                .scan_index_forward(true)
                .limit(page_limit)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items.unwrap_or_default() {
                sessions.push(session_from_item(&item)?);
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(sessions),
            }
        }
    }
}
