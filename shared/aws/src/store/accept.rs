//! `accept_turn`: idempotency record, session upsert and queued run in one transaction.

use super::error::build_error;
use super::error::classify;
use super::item::{
    ABORT_REQUESTED, EXPIRES_AT, EXPIRES_AT_MS, EXPIRING, INTERRUPT_AFTER, INTERRUPT_RUN,
    INTERRUPT_SEQ, Item, PEND_AT, PEND_PK, PEND_PK_VALUE, RUN_ID, RUN_JSON, RUNS_ACCEPTED,
    SESSION_ID, STATUS, UPDATED_AT, get_str, n, open_run_attr, opt_u64, run_json, s,
    session_from_item, session_item,
};
use super::keys::{self, IDEM_SK, PK, RUN_SK, SESSION_SK, SK};
use super::{CONFLICT_RETRIES, DynamoStore, Transact, agents, conflict_backoff};
use agentlane_core::{
    AcceptOutcome, NewTurn, QueueMode, Run, RunId, Session, StoreError, StoreResult,
};
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use std::collections::HashMap;
use std::time::Duration;

/// Tries of one accept: each lost race on the session's count means another accept of the
/// same session won, so a burst of n concurrent turns needs at most n rounds.
const ACCEPT_RETRIES: u32 = 4 * CONFLICT_RETRIES;

/// What an accept reads before its transaction.
struct AcceptRead {
    session: Option<Item>,
    record: Option<Item>,
    /// The live definition of the agent the turn names.
    agent: Option<agentlane_core::Agent>,
    /// The tenant's spend in each of the turn's `spend_caps` periods.
    spends: Vec<agentlane_core::spend::PeriodSpend>,
}

/// Where each write sits in the transaction, to read its cancellation reason.
struct Layout {
    idempotency: Option<usize>,
    session: usize,
    run: usize,
}

/// Whether an idempotency record still maps its key at `now` (expiry is exclusive, as in the
/// transaction's `expiresAtMs < :now` condition).
fn is_live(record: &Item, now: u64) -> bool {
    opt_u64(record, EXPIRES_AT_MS)
        .ok()
        .flatten()
        .is_some_and(|until| until >= now)
}

impl DynamoStore {
    pub(super) async fn accept(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        let session_pk = keys::session_pk(&turn.tenant, &turn.session_key);
        let idempotency_pk = turn
            .idempotency_key
            .as_ref()
            .map(|key| keys::idempotency_pk(&turn.tenant, key));
        for attempt in 0..ACCEPT_RETRIES {
            let AcceptRead {
                session: existing,
                record,
                agent,
                spends,
            } = self
                .read_for_accept(&turn, &session_pk, idempotency_pk.as_deref())
                .await?;
            // A live record answers its run without a (failing) transaction.
            if let Some(record) = record.filter(|r| is_live(r, turn.now)) {
                return self.replay(&turn, &record).await;
            }
            // A spent period of the tenant's budget refuses the turn (read in the same batch).
            turn.check_spend(&spends)?;
            let agent = turn.resolve_agent(agent.as_ref())?;
            let (session_write, session_id, session_seq, default_mode) = match &existing {
                None => (
                    self.create_session(&turn, session_pk.clone())?,
                    turn.new_session_id.clone(),
                    0,
                    None,
                ),
                Some(item) if item.contains_key(EXPIRING) => {
                    // The retention sweep is deleting it: the turn waits for the new session.
                    return Err(StoreError::Unavailable(format!(
                        "session {} is being deleted by its retention; retry shortly",
                        turn.session_key
                    )));
                }
                Some(item) => {
                    let session = session_from_item(item)?;
                    turn.check_agent(&session)?;
                    // The count is read consistently and the write below is conditional on it,
                    // so concurrent accepts cannot pass the cap together.
                    turn.check_room(&session)?;
                    let mark = turn.interrupt_mark(
                        &turn.queued_run(
                            session.session_id.clone(),
                            session.runs_accepted,
                            session.queue_mode,
                            &agent,
                        ),
                        &session,
                    );
                    let write =
                        self.count_accepted(&turn, session_pk.clone(), &session, mark.as_ref())?;
                    (
                        write,
                        session.session_id,
                        session.runs_accepted,
                        session.queue_mode,
                    )
                }
            };
            let run = turn.queued_run(session_id, session_seq, default_mode, &agent);
            let mut writes = Vec::with_capacity(3);
            let idempotency = match &turn.idempotency_key {
                Some(key) => {
                    writes.push(self.idempotency_put(&turn, key)?);
                    Some(writes.len() - 1)
                }
                None => None,
            };
            writes.push(session_write);
            writes.push(self.run_put(&run)?);
            let layout = Layout {
                idempotency,
                session: writes.len() - 2,
                run: writes.len() - 1,
            };
            if matches!(
                run.request.queue_mode,
                Some(QueueMode::Steer | QueueMode::Collect)
            ) {
                writes.push(self.pending_steer_put(&run)?);
            }
            // A new session registers its tenant for the retention sweep (unconditional, last:
            // it never fails the transaction's conditions).
            let registers = match &existing {
                None => self.registry_put(&turn.tenant, turn.now)?,
                Some(_) => None,
            };
            let registered = registers.is_some();
            writes.extend(registers);
            let failed = match self.transact_once(writes, "accept_turn").await? {
                Transact::Done => {
                    if registered {
                        self.note_registered(&turn.tenant, turn.now);
                    }
                    return Ok(AcceptOutcome { run, created: true });
                }
                Transact::Conflict => {
                    conflict_backoff(attempt).await;
                    continue;
                }
                Transact::ConditionFailed(failed) => failed,
            };
            if layout.idempotency.is_some_and(|i| failed.contains(&i)) {
                // A concurrent accept recorded the key first: the next read finds its record.
                continue;
            }
            if failed.contains(&layout.session) {
                // Created, reset or counted concurrently: read it again, after a jittered
                // pause (concurrent accepts on one session take their seqs one by one).
                conflict_backoff(attempt).await;
                continue;
            }
            if failed.contains(&layout.run) {
                return Err(StoreError::Conflict(format!(
                    "run {} already exists",
                    turn.run_id
                )));
            }
            return Err(StoreError::Unavailable(format!(
                "accept_turn: unexpected condition failure on items {failed:?}"
            )));
        }
        Err(StoreError::Throttled(
            "accept_turn: the session kept changing under concurrent writes".into(),
        ))
    }

    /// The session item and, for a keyed turn, the idempotency record: one consistent read.
    /// The session, the idempotency record (if the turn has a key) and the head of the agent
    /// the turn names, in one consistent `BatchGetItem`.
    async fn read_for_accept(
        &self,
        turn: &NewTurn,
        session_pk: &str,
        idempotency_pk: Option<&str>,
    ) -> StoreResult<AcceptRead> {
        let agent_pk = agents::agents_pk(&turn.tenant);
        let agent_sk = agents::head_sk(turn.request.agent());
        let key =
            |pk: &str, sk: &str| HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))]);
        let mut request = KeysAndAttributes::builder()
            .keys(key(session_pk, SESSION_SK))
            .keys(key(&agent_pk, &agent_sk))
            .consistent_read(true);
        if let Some(idempotency_pk) = idempotency_pk {
            request = request.keys(key(idempotency_pk, IDEM_SK));
        }
        let spend_pk = super::spend::spend_pk(&turn.tenant);
        for cap in &turn.spend_caps {
            request = request.keys(key(&spend_pk, &cap.period));
        }
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.table, request.build().map_err(build_error)?)
            .send()
            .await
            .map_err(classify)?;
        if out.unprocessed_keys.as_ref().is_some_and(|u| !u.is_empty()) {
            // Throttled part-way: read them one by one.
            let session = self.get_item(session_pk.to_owned(), SESSION_SK).await?;
            let agent = self.get_item(agent_pk, &agent_sk).await?;
            let record = match idempotency_pk {
                Some(pk) => self.get_item(pk.to_owned(), IDEM_SK).await?,
                None => None,
            };
            let mut spends = Vec::new();
            for cap in &turn.spend_caps {
                let item = self.get_item(spend_pk.clone(), &cap.period).await?;
                spends.push(super::spend::spend_of(&item.unwrap_or_default()));
            }
            return Ok(AcceptRead {
                session,
                record,
                agent: agents::live_from_head(&turn.tenant, agent.as_ref())?,
                spends,
            });
        }
        let mut items = out
            .responses
            .and_then(|mut r| r.remove(&self.table))
            .unwrap_or_default();
        let mut take = |pk: &str, sk: &str| {
            let index = items.iter().position(|item| {
                let get = |name: &str| {
                    item.get(name)
                        .and_then(|v| v.as_s().ok())
                        .map(String::as_str)
                };
                get(PK) == Some(pk) && get(SK) == Some(sk)
            })?;
            Some(items.swap_remove(index))
        };
        let session = take(session_pk, SESSION_SK);
        let agent = take(&agent_pk, &agent_sk);
        let record = idempotency_pk.and_then(|pk| take(pk, IDEM_SK));
        let spends = turn
            .spend_caps
            .iter()
            .map(|cap| {
                take(&spend_pk, &cap.period)
                    .map(|item| super::spend::spend_of(&item))
                    .unwrap_or_default()
            })
            .collect();
        Ok(AcceptRead {
            session,
            record,
            spends,
            agent: agents::live_from_head(&turn.tenant, agent.as_ref())?,
        })
    }

    /// The accepted turn an idempotency record names.
    async fn replay(&self, turn: &NewTurn, record: &Item) -> StoreResult<AcceptOutcome> {
        let run_id = RunId::new(get_str(record, RUN_ID)?);
        match self.load_run(&turn.tenant, &run_id).await? {
            Some(run) => turn.replay(run),
            None => Err(StoreError::Corrupt(format!(
                "an idempotency key names run {run_id}, which does not exist"
            ))),
        }
    }

    fn create_session(&self, turn: &NewTurn, pk: String) -> StoreResult<TransactWriteItem> {
        let mut session = turn.first_session();
        session.note_accepted(0, &turn.run_id, turn.now);
        let item = session_item(pk, &session);
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(format!("attribute_not_exists({PK})"))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Counts the turn on the session, conditional on the session id and count read: the
    /// count read is the run's `session_seq`, so two concurrent accepts never share one.
    fn count_accepted(
        &self,
        turn: &NewTurn,
        pk: String,
        session: &Session,
        interrupt: Option<&agentlane_core::InterruptMark>,
    ) -> StoreResult<TransactWriteItem> {
        // An interrupt behind unfinished runs marks the session in the same write.
        let mark = match interrupt {
            Some(_) => format!(
                ", {INTERRUPT_RUN} = :irun, {INTERRUPT_SEQ} = :iseq, {INTERRUPT_AFTER} = :iafter"
            ),
            None => String::new(),
        };
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(SESSION_SK))
            // Pending work (issue 11), in the same write: since when (kept if set) and the run
            // by its seq, for the sweep to find a queued run whose lane message was lost.
            .update_expression(format!(
                "SET {RUNS_ACCEPTED} = {RUNS_ACCEPTED} + :one, {UPDATED_AT} = :now, \
                 {PEND_PK} = :pend, {PEND_AT} = if_not_exists({PEND_AT}, :now), #open = :rid{mark}"
            ))
            .condition_expression(format!(
                "{SESSION_ID} = :sid AND {RUNS_ACCEPTED} = :seen \
                 AND attribute_not_exists({EXPIRING})"
            ))
            .expression_attribute_names("#open", open_run_attr(session.runs_accepted))
            .expression_attribute_values(":pend", s(PEND_PK_VALUE))
            .expression_attribute_values(":rid", s(turn.run_id.as_str()))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(turn.now))
            .expression_attribute_values(":sid", s(session.session_id.as_str()))
            .expression_attribute_values(":seen", n(session.runs_accepted));
        if let Some(m) = interrupt {
            update = update
                .expression_attribute_values(":irun", s(m.run_id.as_str()))
                .expression_attribute_values(":iseq", n(m.session_seq))
                .expression_attribute_values(":iafter", n(m.after));
        }
        let update = update.build().map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    fn idempotency_put(&self, turn: &NewTurn, key: &str) -> StoreResult<TransactWriteItem> {
        let expires_ms = turn.now.saturating_add(turn.idempotency_ttl_ms);
        let ttl =
            self.ttl_epoch_seconds(turn.now, Duration::from_millis(turn.idempotency_ttl_ms)) + 1;
        let item: Item = HashMap::from([
            (PK.to_owned(), s(keys::idempotency_pk(&turn.tenant, key))),
            (SK.to_owned(), s(IDEM_SK)),
            (RUN_ID.to_owned(), s(turn.run_id.as_str())),
            (EXPIRES_AT_MS.to_owned(), n(expires_ms)),
            (EXPIRES_AT.to_owned(), n(ttl)),
        ]);
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(format!(
                "attribute_not_exists({PK}) OR {EXPIRES_AT_MS} < :now"
            ))
            .expression_attribute_values(":now", n(turn.now))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn run_put(&self, run: &Run) -> StoreResult<TransactWriteItem> {
        let mut item: Item = HashMap::from([
            (PK.to_owned(), s(keys::run_pk(&run.tenant, &run.run_id))),
            (SK.to_owned(), s(RUN_SK)),
            (RUN_JSON.to_owned(), s(run_json(run)?)),
            (STATUS.to_owned(), s(run.status.as_str())),
            (SESSION_ID.to_owned(), s(run.session_id.as_str())),
            (ABORT_REQUESTED.to_owned(), AttributeValue::Bool(false)),
        ]);
        item.extend(super::item::run_index_attributes(run));
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(format!("attribute_not_exists({PK})"))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}
