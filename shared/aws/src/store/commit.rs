//! `commit`: one fenced `TransactWriteItems` (split at 100 items, each part fenced).

use super::error::{DdbError, REASON_CONDITION, generic_cancellation, reason_code};
use super::item::{
    ACTIVE_RUN_ID, ENTRY_JSON, EVENT_JSON, EXPIRES_AT, Item, LAST_PROGRESS_AT, LOCK_OWNER,
    LOCK_UNTIL, PROC_AT, PROC_PK, PROC_PK_VALUE, RUN_ID, RUN_JSON, RUNS_FINISHED, SEQ, SESSION_ID,
    STATUS, UPDATED_AT, entry_json, event_json, n, run_json, s, status_str,
};
use super::keys::{self, PK, RUN_SK, SESSION_SK, SK};
use super::lock::FENCE_IS_CURRENT;
use super::{CONFLICT_RETRIES, DynamoStore, EVENT_RETENTION, conflict_backoff, ttl_epoch_seconds};
use agentlane_core::{
    Commit, Fence, RunId, SessionId, SessionStatus, SessionUpdate, StoreError, StoreResult,
};
use aws_sdk_dynamodb::error::BuildError;
use aws_sdk_dynamodb::types::{ConditionCheck, Put, TransactWriteItem, Update};
use std::collections::{HashMap, HashSet};

/// DynamoDB's limit on items per transaction.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;

fn build_error(err: BuildError) -> StoreError {
    StoreError::Unavailable(format!("building a DynamoDB request: {err}"))
}

/// One non-session write of a commit, and what to call it in a `Conflict`.
struct Write {
    item: TransactWriteItem,
    label: String,
}

/// Refuses a commit naming one seq twice: DynamoDB would reject the whole transaction with a
/// validation error, and a store must never keep two entries with one seq anyway.
fn check_distinct_seqs(commit: &Commit) -> StoreResult<()> {
    let mut seen = HashSet::new();
    if let Some(entry) = commit.transcript.iter().find(|e| !seen.insert(e.seq)) {
        return Err(StoreError::Conflict(format!(
            "transcript seq {} appears twice in one commit",
            entry.seq
        )));
    }
    let mut seen = HashSet::new();
    if let Some(event) = commit.events.iter().find(|e| !seen.insert(e.seq)) {
        return Err(StoreError::Conflict(format!(
            "event seq {} appears twice in one commit",
            event.seq
        )));
    }
    Ok(())
}

/// The run the commit's events belong to.
fn events_run_id(commit: &Commit) -> StoreResult<Option<RunId>> {
    if commit.events.is_empty() {
        return Ok(None);
    }
    let from_run = commit.run.as_ref().map(|run| run.run_id.clone());
    let from_entries = commit.transcript.first().map(|e| e.run_id.clone());
    commit
        .run_id
        .clone()
        .or(from_run)
        .or(from_entries)
        .map(Some)
        .ok_or_else(|| {
            StoreError::NotFound("a commit with events must carry the run they belong to".into())
        })
}

impl DynamoStore {
    pub(super) async fn apply_commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        check_distinct_seqs(&commit)?;
        let session_id = if commit.transcript.is_empty() {
            None
        } else {
            Some(self.fenced_session_id(fence).await?)
        };
        let writes = self.non_session_writes(fence, &commit, session_id.as_ref())?;
        let session_write = match (&commit.session, commit.release_lock) {
            (None, false) => None,
            (update, release) => {
                Some(self.session_write(fence, update.as_ref(), release, session_id.as_ref())?)
            }
        };
        let per_part = MAX_TRANSACTION_ITEMS - 1;
        let parts: Vec<&[Write]> = if writes.is_empty() {
            vec![&[]]
        } else {
            writes.chunks(per_part).collect()
        };
        let last = parts.len() - 1;
        for (index, part) in parts.into_iter().enumerate() {
            let head = match (&session_write, index == last) {
                (Some(update), true) => update.clone(),
                _ => self.session_check(fence, session_id.as_ref())?,
            };
            self.transact_fenced(fence, head, part).await?;
        }
        if commit.release_lock {
            self.forget_fence(fence);
        }
        Ok(())
    }

    /// Runs one fenced transaction: `head` (the session condition) first, then `part`.
    async fn transact_fenced(
        &self,
        fence: &Fence,
        head: TransactWriteItem,
        part: &[Write],
    ) -> StoreResult<()> {
        let mut items = Vec::with_capacity(part.len() + 1);
        items.push(head);
        items.extend(part.iter().map(|w| w.item.clone()));
        for attempt in 0..CONFLICT_RETRIES {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .send()
                .await;
            let reasons = match result {
                Ok(_) => return Ok(()),
                Err(err) => match DdbError::from(err) {
                    DdbError::Cancelled(reasons) => reasons,
                    DdbError::TransactionConflict => {
                        conflict_backoff(attempt).await;
                        continue;
                    }
                    other => return Err(other.into_store_error("commit")),
                },
            };
            if reason_code(&reasons, 0) == Some(REASON_CONDITION) {
                self.forget_fence(fence);
                return Err(StoreError::FenceLost);
            }
            if let Some(taken) = (1..items.len())
                .find(|&i| reason_code(&reasons, i) == Some(REASON_CONDITION))
                .and_then(|i| part.get(i - 1))
            {
                return Err(StoreError::Conflict(format!(
                    "{} already exists",
                    taken.label
                )));
            }
            match generic_cancellation(&reasons) {
                DdbError::TransactionConflict => conflict_backoff(attempt).await,
                other => return Err(other.into_store_error("commit")),
            }
        }
        Err(StoreError::Throttled(
            "commit: the session stayed in conflicting transactions".into(),
        ))
    }

    fn fence_values(fence: &Fence, session_id: Option<&SessionId>) -> (String, Item) {
        let mut values: Item = HashMap::from([
            (":me".to_owned(), s(fence.owner.as_str())),
            (":f".to_owned(), n(fence.token.0)),
        ]);
        let condition = match session_id {
            Some(id) => {
                values.insert(":sid".to_owned(), s(id.as_str()));
                format!("{FENCE_IS_CURRENT} AND {SESSION_ID} = :sid")
            }
            None => FENCE_IS_CURRENT.to_owned(),
        };
        (condition, values)
    }

    fn session_check(
        &self,
        fence: &Fence,
        session_id: Option<&SessionId>,
    ) -> StoreResult<TransactWriteItem> {
        let (condition, values) = Self::fence_values(fence, session_id);
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .key(PK, s(keys::session_pk(&fence.tenant, &fence.session_key)))
            .key(SK, s(SESSION_SK))
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// The session update of a commit (activity and/or lock release), carrying the fence
    /// condition itself: an item may appear only once per transaction.
    fn session_write(
        &self,
        fence: &Fence,
        update: Option<&SessionUpdate>,
        release: bool,
        session_id: Option<&SessionId>,
    ) -> StoreResult<TransactWriteItem> {
        let (condition, mut values) = Self::fence_values(fence, session_id);
        let mut set = Vec::new();
        let mut remove = Vec::new();
        let mut names = None;
        if let Some(update) = update {
            names = Some(HashMap::from([("#st".to_owned(), STATUS.to_owned())]));
            set.push("#st = :status".to_owned());
            values.insert(":status".into(), s(status_str(update.status)));
            set.push(format!(
                "{LAST_PROGRESS_AT} = :progress, {UPDATED_AT} = :progress"
            ));
            values.insert(":progress".into(), n(update.last_progress_at));
            set.push(format!("{RUNS_FINISHED} = {RUNS_FINISHED} + :finished"));
            values.insert(":finished".into(), n(update.finished_delta));
            match &update.active_run_id {
                Some(run_id) => {
                    set.push(format!("{ACTIVE_RUN_ID} = :active"));
                    values.insert(":active".into(), s(run_id.as_str()));
                }
                None => remove.push(ACTIVE_RUN_ID.to_owned()),
            }
            match update.status {
                SessionStatus::Processing => {
                    set.push(format!("{PROC_PK} = :procpk, {PROC_AT} = :progress"));
                    values.insert(":procpk".into(), s(PROC_PK_VALUE));
                }
                SessionStatus::Idle => remove.extend([PROC_PK.to_owned(), PROC_AT.to_owned()]),
            }
        }
        if release {
            set.push(format!("{LOCK_UNTIL} = :zero"));
            values.insert(":zero".into(), n(0));
            remove.push(LOCK_OWNER.to_owned());
        }
        let mut expression = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(keys::session_pk(&fence.tenant, &fence.session_key)))
            .key(SK, s(SESSION_SK))
            .update_expression(expression)
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    fn non_session_writes(
        &self,
        fence: &Fence,
        commit: &Commit,
        session_id: Option<&SessionId>,
    ) -> StoreResult<Vec<Write>> {
        let mut writes = Vec::new();
        if let Some(session_id) = session_id {
            let pk = keys::transcript_pk(&fence.tenant, session_id);
            for entry in &commit.transcript {
                let item = HashMap::from([
                    (PK.to_owned(), s(pk.clone())),
                    (SK.to_owned(), s(keys::entry_sk(entry.seq))),
                    (ENTRY_JSON.to_owned(), s(entry_json(entry)?)),
                    (SEQ.to_owned(), n(entry.seq)),
                    (RUN_ID.to_owned(), s(entry.run_id.as_str())),
                ]);
                writes.push(Write {
                    item: self.put_new(item)?,
                    label: format!("transcript entry {} of session {session_id}", entry.seq),
                });
            }
        }
        if let Some(run_id) = events_run_id(commit)? {
            let pk = keys::run_pk(&fence.tenant, &run_id);
            for event in &commit.events {
                let expires = ttl_epoch_seconds(event.ts, EVENT_RETENTION);
                let item = HashMap::from([
                    (PK.to_owned(), s(pk.clone())),
                    (SK.to_owned(), s(keys::event_sk(event.seq))),
                    (EVENT_JSON.to_owned(), s(event_json(event)?)),
                    (SEQ.to_owned(), n(event.seq)),
                    (EXPIRES_AT.to_owned(), n(expires)),
                ]);
                writes.push(Write {
                    item: self.put_new(item)?,
                    label: format!("event {} of run {run_id}", event.seq),
                });
            }
        }
        if let Some(run) = &commit.run {
            // Replaces the run but never `abortRequested`: only the API sets that.
            let update = Update::builder()
                .table_name(&self.table)
                .key(PK, s(keys::run_pk(&fence.tenant, &run.run_id)))
                .key(SK, s(RUN_SK))
                .update_expression(format!(
                    "SET {RUN_JSON} = :run, #st = :status, {SESSION_ID} = :sid"
                ))
                .expression_attribute_names("#st", STATUS)
                .expression_attribute_values(":run", s(run_json(run)?))
                .expression_attribute_values(":status", s(run.status.as_str()))
                .expression_attribute_values(":sid", s(run.session_id.as_str()))
                .build()
                .map_err(build_error)?;
            writes.push(Write {
                item: TransactWriteItem::builder().update(update).build(),
                label: format!("run {}", run.run_id),
            });
        }
        Ok(writes)
    }

    fn put_new(&self, item: Item) -> StoreResult<TransactWriteItem> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(format!("attribute_not_exists({SK})"))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{Event, EventStream, Message, TranscriptEntry};

    fn entry(seq: u64) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            run_id: RunId::new("run_1"),
            ts: 1,
            message: Message::user("hi"),
        }
    }

    fn event(seq: u64) -> Event {
        Event {
            seq,
            stream: EventStream::Lifecycle,
            ts: 1,
            data: serde_json::json!({}),
        }
    }

    #[test]
    fn a_seq_named_twice_is_a_conflict() {
        let commit = Commit {
            transcript: vec![entry(1), entry(2), entry(1)],
            ..Commit::default()
        };
        assert!(matches!(
            check_distinct_seqs(&commit),
            Err(StoreError::Conflict(_))
        ));
        let commit = Commit {
            events: vec![event(3), event(3)],
            ..Commit::default()
        };
        assert!(matches!(
            check_distinct_seqs(&commit),
            Err(StoreError::Conflict(_))
        ));
        let commit = Commit {
            transcript: vec![entry(1)],
            events: vec![event(1)],
            ..Commit::default()
        };
        assert_eq!(check_distinct_seqs(&commit), Ok(()));
    }

    #[test]
    fn events_need_a_run_to_belong_to() {
        let lone = Commit {
            events: vec![event(1)],
            ..Commit::default()
        };
        assert!(matches!(events_run_id(&lone), Err(StoreError::NotFound(_))));
        let with_entry = Commit {
            events: vec![event(1)],
            transcript: vec![entry(1)],
            ..Commit::default()
        };
        assert_eq!(events_run_id(&with_entry), Ok(Some(RunId::new("run_1"))));
        assert_eq!(events_run_id(&Commit::default()), Ok(None));
    }
}
