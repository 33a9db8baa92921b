//! `commit`: one fenced `TransactWriteItems` per commit. Core's [`Commit::check`] bounds a
//! commit to `MAX_COMMIT_WRITES` entries and events, so with the run record and the session item
//! it stays within DynamoDB's 100 items (and 4 MB); a larger commit is refused, never split here.

use super::error::build_error;
use super::item::{
    ABORT_REASON, ABORT_REQUESTED, ACTION_ANSWER, ACTIVE_RUN_ID, ANSWER_FOR, ENTRY_JSON,
    EVENT_JSON, EXPIRES_AT, Item, LAST_PROGRESS_AT, LOCK_OWNER, LOCK_UNTIL, PROC_AT, PROC_PK,
    PROC_PK_VALUE, RUN_ID, RUN_JSON, RUNS_FINISHED, SEQ, SESSION_ID, STATUS, UPDATED_AT, n,
    open_run_attr, s, status_str,
};
use super::keys::{self, PK, RUN_SK, SESSION_SK, SK};
use super::lock::FENCE_IS_CURRENT;
use super::{DynamoStore, EVENT_RETENTION};
use agentlane_core::{
    AcceptedRecord, CheckedCommit, Commit, Fence, MAX_COMMIT_WRITES, SessionId, SessionStatus,
    SessionUpdate, StoreError, StoreResult,
};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};
use std::collections::HashMap;

/// DynamoDB's limit on items per transaction: a commit's entries and events, the run record and
/// the session item (update or condition check) must fit in one.
const MAX_TRANSACTION_ITEMS: usize = 100;
const _: () = assert!(MAX_COMMIT_WRITES + 2 <= MAX_TRANSACTION_ITEMS);

/// One non-session write of a commit, and what to call it in a `Conflict`.
pub(super) struct Write {
    pub(super) item: TransactWriteItem,
    pub(super) label: String,
}

/// How a run write is named in a `Conflict`.
const RUN_LABEL: &str = "run ";

/// A run record whose JSON is over this is written by replacing its item whole (a `Put`
/// conditioned on the abort attributes read just before, which it carries over) rather than by
/// an `UpdateItem` of its `run` attribute. Same result on DynamoDB; the emulator (moto) counts
/// an updated attribute's old and new values together against the 400 KB item limit, so an
/// update of a run record over ~200 KB would fail there every time.
const WHOLE_RUN_PUT_BYTES: usize = 190_000;

/// Attempts of a commit whose whole-item run write lost a race with an abort request.
const WHOLE_RUN_PUT_TRIES: u32 = 3;

/// The stored API-owned attributes of a run replaced whole: `abortRequested`, `abortReason`,
/// `actionAnswer` and `answerFor`.
type AbortAttributes = [Option<AttributeValue>; 4];

/// What a commit's run write requires of the stored run besides the fence.
#[derive(Default)]
pub(super) struct RunChecks<'a> {
    /// A whole-item write: the API-owned attributes as read just before, carried over.
    pub(super) abort: Option<AbortAttributes>,
    /// The run was taken from its accepted record: the stored record is still that one, and
    /// no abort was requested.
    pub(super) accepted: Option<&'a AcceptedRecord>,
}

impl DynamoStore {
    pub(super) async fn apply_commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        let commit = commit.check(fence)?;
        // A run its holder took from the accepted record: this write checks that record.
        let accepted = commit
            .run()
            .and_then(|run| self.take_accepted(fence, &run.run_id));
        let session_id = if commit.transcript().is_empty() {
            None
        } else {
            Some(self.fenced_session_id(fence).await?)
        };
        let whole_run = match (commit.run(), commit.run_json()) {
            (Some(run), Some(json)) if json.len() > WHOLE_RUN_PUT_BYTES => Some(run.clone()),
            _ => None,
        };
        let Some(run) = whole_run else {
            let checks = RunChecks {
                abort: None,
                accepted: accepted.as_ref(),
            };
            return self
                .apply_checked(fence, &commit, session_id.as_ref(), checks)
                .await;
        };
        if accepted.is_some() {
            // Not checked on a whole-item write: the holder reads the run and starts over.
            return Err(StoreError::Conflict(format!(
                "{RUN_LABEL}{} was not read before a whole-record write",
                run.run_id
            )));
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let abort = self.load_abort_attributes(&run.tenant, &run.run_id).await?;
            let checks = RunChecks {
                abort: Some(abort),
                accepted: None,
            };
            match self
                .apply_checked(fence, &commit, session_id.as_ref(), checks)
                .await
            {
                // The run write's condition failed: an abort request came in between.
                Err(StoreError::Conflict(what))
                    if what.starts_with(RUN_LABEL) && tries < WHOLE_RUN_PUT_TRIES => {}
                other => return other,
            }
        }
    }

    async fn apply_checked(
        &self,
        fence: &Fence,
        commit: &CheckedCommit,
        session_id: Option<&SessionId>,
        checks: RunChecks<'_>,
    ) -> StoreResult<()> {
        let writes = self.non_session_writes(fence, commit, session_id, checks)?;
        let head = if commit.session().is_some() || commit.release_lock() {
            let finished_seq = commit
                .session()
                .filter(|update| update.finished_delta > 0)
                .and(commit.run())
                .map(|run| run.session_seq);
            self.session_write(
                fence,
                commit.session(),
                commit.release_lock(),
                session_id,
                finished_seq,
            )?
        } else {
            self.session_check(fence, session_id)?
        };
        self.transact_fenced(fence, head, &writes).await?;
        if commit.release_lock() {
            self.forget_fence(fence);
        }
        Ok(())
    }

    /// Runs one fenced transaction: `head` (the session condition) first, then `part`.
    pub(super) async fn transact_fenced(
        &self,
        fence: &Fence,
        head: TransactWriteItem,
        part: &[Write],
    ) -> StoreResult<()> {
        let mut items = Vec::with_capacity(part.len() + 1);
        items.push(head);
        items.extend(part.iter().map(|w| w.item.clone()));
        let failed = match self.transact(items, "commit").await? {
            Ok(()) => return Ok(()),
            Err(failed) => failed,
        };
        if failed.contains(&0) {
            self.forget_fence(fence);
            return Err(StoreError::FenceLost);
        }
        let taken = failed
            .iter()
            .find_map(|&i| i.checked_sub(1).and_then(|i| part.get(i)))
            .map_or("an item", |w| w.label.as_str());
        Err(StoreError::Conflict(if taken.starts_with(RUN_LABEL) {
            // The run's own condition: an abort request, or a change since it was accepted.
            format!("{taken} changed meanwhile")
        } else {
            format!("{taken} already exists")
        }))
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

    pub(super) fn session_check(
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
    /// condition itself: an item may appear only once per transaction. A commit that finishes
    /// its run (`finished_seq`, the head of the lane: runs end in order) also drops that run's
    /// `openRun{seq}` attribute, as [`Session::drop_finished_runs`](agentlane_core::Session::drop_finished_runs) does on SQLite, so a busy
    /// session's item does not grow by a run a turn until a sweep settles it.
    fn session_write(
        &self,
        fence: &Fence,
        update: Option<&SessionUpdate>,
        release: bool,
        session_id: Option<&SessionId>,
        finished_seq: Option<u64>,
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
        if let Some(seq) = finished_seq {
            remove.push(open_run_attr(seq));
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

    pub(super) fn non_session_writes(
        &self,
        fence: &Fence,
        commit: &CheckedCommit,
        session_id: Option<&SessionId>,
        checks: RunChecks<'_>,
    ) -> StoreResult<Vec<Write>> {
        let mut writes = Vec::new();
        if let Some(session_id) = session_id {
            let pk = keys::transcript_pk(&fence.tenant, session_id);
            // Each record as the check encoded it (no second encoding).
            for (entry, json) in commit.transcript().iter().zip(commit.transcript_json()) {
                let item = HashMap::from([
                    (PK.to_owned(), s(pk.clone())),
                    (SK.to_owned(), s(keys::entry_sk(entry.seq))),
                    (ENTRY_JSON.to_owned(), s(json.as_str())),
                    (SEQ.to_owned(), n(entry.seq)),
                    (RUN_ID.to_owned(), s(entry.run_id.as_str())),
                ]);
                writes.push(Write {
                    item: self.put_new(item)?,
                    label: format!("transcript entry {} of session {session_id}", entry.seq),
                });
            }
        }
        if let Some(run_id) = commit.events_run() {
            let pk = keys::run_pk(&fence.tenant, run_id);
            for (event, json) in commit.events().iter().zip(commit.events_json()) {
                let expires = self.ttl_epoch_seconds(event.ts, EVENT_RETENTION);
                let item = HashMap::from([
                    (PK.to_owned(), s(pk.clone())),
                    (SK.to_owned(), s(keys::event_sk(event.seq))),
                    (EVENT_JSON.to_owned(), s(json.as_str())),
                    (SEQ.to_owned(), n(event.seq)),
                    (EXPIRES_AT.to_owned(), n(expires)),
                ]);
                writes.push(Write {
                    item: self.put_new(item)?,
                    label: format!("event {} of run {run_id}", event.seq),
                });
            }
        }
        if let (Some(run), Some(kept)) = (commit.run(), checks.abort) {
            // Replaced whole, with the API's attributes as read, and only if they are still so.
            let mut item: Item = HashMap::from([
                (PK.to_owned(), s(keys::run_pk(&fence.tenant, &run.run_id))),
                (SK.to_owned(), s(RUN_SK)),
                (RUN_JSON.to_owned(), s(checked_run_json(commit)?)),
                (STATUS.to_owned(), s(run.status.as_str())),
                (SESSION_ID.to_owned(), s(run.session_id.as_str())),
            ]);
            item.extend(super::item::run_index_attributes(run));
            let mut conditions = vec![format!("attribute_exists({PK})")];
            let mut values: Item = HashMap::new();
            let names = [ABORT_REQUESTED, ABORT_REASON, ACTION_ANSWER, ANSWER_FOR];
            for (i, (name, value)) in names.into_iter().zip(kept).enumerate() {
                match value {
                    Some(value) => {
                        conditions.push(format!("{name} = :kept{i}"));
                        values.insert(format!(":kept{i}"), value.clone());
                        item.insert(name.to_owned(), value);
                    }
                    None => conditions.push(format!("attribute_not_exists({name})")),
                }
            }
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(conditions.join(" AND "))
                .set_expression_attribute_values((!values.is_empty()).then_some(values))
                .build()
                .map_err(build_error)?;
            writes.push(Write {
                item: TransactWriteItem::builder().put(put).build(),
                label: format!("{RUN_LABEL}{}", run.run_id),
            });
        } else if let Some(run) = commit.run() {
            // Replaces the run but never `abortRequested`: only the API sets that.
            let mut update = Update::builder()
                .table_name(&self.table)
                .key(PK, s(keys::run_pk(&fence.tenant, &run.run_id)))
                .key(SK, s(RUN_SK))
                .update_expression(format!(
                    "SET {RUN_JSON} = :run, #st = :status, {SESSION_ID} = :sid"
                ))
                .expression_attribute_names("#st", STATUS)
                .expression_attribute_values(":run", s(checked_run_json(commit)?))
                .expression_attribute_values(":status", s(run.status.as_str()))
                .expression_attribute_values(":sid", s(run.session_id.as_str()));
            if let Some(accepted) = checks.accepted {
                // Taken without a read: still as accepted, and not aborted since.
                update = update
                    .condition_expression(format!(
                        "{RUN_JSON} = :accepted AND {ABORT_REQUESTED} = :notAborted"
                    ))
                    .expression_attribute_values(":accepted", s(accepted.0.as_str()))
                    .expression_attribute_values(":notAborted", AttributeValue::Bool(false));
            }
            let update = update.build().map_err(build_error)?;
            writes.push(Write {
                item: TransactWriteItem::builder().update(update).build(),
                label: format!("{RUN_LABEL}{}", run.run_id),
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

/// The run JSON the check encoded (a commit with a run always has it).
fn checked_run_json(commit: &CheckedCommit) -> StoreResult<&str> {
    commit
        .run_json()
        .ok_or_else(|| StoreError::Corrupt("a checked commit's run has no JSON".into()))
}
