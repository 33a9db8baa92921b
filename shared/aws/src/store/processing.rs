//! [`ProcessingIndex`] on DynamoDB: a query of the sparse `processing` GSI (`procPk` =
//! `PROCESSING`, `procAt` = last progress). Idle sessions are not in the index, so a sweep of a
//! table with any number of idle sessions costs one query request (plus one per 1 MB page of
//! processing sessions past the warn threshold).

use super::DynamoStore;
use super::PROCESSING_INDEX;
use super::error::classify;
use super::item::{PROC_AT, PROC_PK, PROC_PK_VALUE, n, s, session_from_item};
use agentlane_core::{ProcessingIndex, Session, StoreResult};
use async_trait::async_trait;

#[async_trait]
impl ProcessingIndex for DynamoStore {
    async fn processing_sessions(
        &self,
        progress_before: u64,
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
                .index_name(PROCESSING_INDEX)
                .key_condition_expression("#pk = :pk AND #at <= :before")
                .expression_attribute_names("#pk", PROC_PK)
                .expression_attribute_names("#at", PROC_AT)
                .expression_attribute_values(":pk", s(PROC_PK_VALUE))
                .expression_attribute_values(":before", n(progress_before))
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
