//! Steer messages (SPEC §4 `steer`): a `PS#<seq>` item in the session's partition per run
//! accepted in `steer` mode (written by the accept's transaction), found by the running run
//! with one `Query` on that partition and taken in one fenced transaction.

use super::DynamoStore;
use super::commit::{RunChecks, Write};
use super::error::build_error;
use super::error::classify;
use super::item::{Item, RUN_ID, get_str, s};
use super::keys::{self, PENDING_STEER_PREFIX, PK, SK};
use agentlane_core::{Commit, Fence, MAX_STEERS_PER_TAKE, Run, RunId, SteerTake, StoreResult};
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use std::collections::HashMap;

/// Stale pending items dropped by one take at most (the rest go with the next).
const MAX_STALE_PER_TAKE: usize = 20;

impl DynamoStore {
    /// The pending item of `run` (accepted in `steer` or `collect` mode), for the accept's transaction.
    pub(super) fn pending_steer_put(&self, run: &Run) -> StoreResult<TransactWriteItem> {
        let item: Item = HashMap::from([
            (
                PK.to_owned(),
                s(keys::session_pk(&run.tenant, &run.session_key)),
            ),
            (SK.to_owned(), s(keys::pending_steer_sk(run.session_seq))),
            (RUN_ID.to_owned(), s(run.run_id.as_str())),
        ]);
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// [`FencedWriter::take_steers`](agentlane_core::FencedWriter::take_steers): one `Query`
    /// (nothing else when no steer waits), one `GetItem` per waiting run, one transaction.
    /// The session's pending-steer items, oldest first (one strongly consistent Query).
    async fn pending_steer_items(&self, session_pk: &str) -> StoreResult<Vec<Item>> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(format!("{PK} = :pk AND begins_with({SK}, :ps)"))
            .expression_attribute_values(":pk", AttributeValue::S(session_pk.to_owned()))
            .expression_attribute_values(":ps", AttributeValue::S(PENDING_STEER_PREFIX.into()))
            .consistent_read(true)
            .scan_index_forward(true)
            .limit(i32::try_from(MAX_STEERS_PER_TAKE + MAX_STALE_PER_TAKE).unwrap_or(40))
            .send()
            .await
            .map_err(classify)?;
        Ok(out.items.unwrap_or_default())
    }

    /// [`FencedWriter::steers_waiting`](agentlane_core::FencedWriter::steers_waiting): the
    /// pending-steer Query, then each pending run until one would be taken; writes nothing.
    pub(super) async fn steers_waiting_for(
        &self,
        fence: &Fence,
        take: &SteerTake,
    ) -> StoreResult<bool> {
        let session_pk = keys::session_pk(&fence.tenant, &fence.session_key);
        for item in self.pending_steer_items(&session_pk).await? {
            let run_id = RunId::new(get_str(&item, RUN_ID)?);
            if self
                .load_run(&fence.tenant, &run_id)
                .await?
                .is_some_and(|run| take.takes(&run))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(super) async fn take_pending_steers(
        &self,
        fence: &Fence,
        take: SteerTake,
    ) -> StoreResult<Vec<Run>> {
        let session_pk = keys::session_pk(&fence.tenant, &fence.session_key);
        let pending = self.pending_steer_items(&session_pk).await?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let mut taken = Vec::new();
        let mut done = Vec::new();
        for item in &pending {
            if taken.len() == MAX_STEERS_PER_TAKE {
                break;
            }
            let run_id = RunId::new(get_str(item, RUN_ID)?);
            let run = self.load_run(&fence.tenant, &run_id).await?;
            if take.keeps(run.as_ref()) {
                // A message of the other mode (steer / collect), still waiting for its take.
                continue;
            }
            if let Some(run) = run.filter(|run| take.takes(run)) {
                taken.push(take.mark(&run));
            }
            // Taken now, or never takeable again.
            done.push(get_str(item, SK)?.to_owned());
        }
        let session_id = self.fenced_session_id(fence).await?;
        let mut writes: Vec<Write> = Vec::new();
        for (index, run) in taken.iter().enumerate() {
            let part = Commit {
                transcript: vec![take.entry(run, index)],
                run: Some(run.clone()),
                ..Commit::default()
            }
            .check(fence)?;
            writes.extend(self.non_session_writes(
                fence,
                &part,
                Some(&session_id),
                RunChecks::default(),
            )?);
        }
        for sk in done {
            let delete = Delete::builder()
                .table_name(&self.table)
                .key(PK, s(session_pk.clone()))
                .key(SK, s(sk.clone()))
                .build()
                .map_err(build_error)?;
            writes.push(Write {
                item: TransactWriteItem::builder().delete(delete).build(),
                label: format!("pending steer {sk}"),
            });
        }
        let head = self.session_check(fence, Some(&session_id))?;
        self.transact_fenced(fence, head, &writes).await?;
        Ok(taken)
    }
}
