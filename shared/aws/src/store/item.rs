//! Conversions between domain records and DynamoDB items, and the attribute names they use.

use agentlane_core::{
    AbortReason, Event, QueueMode, Run, RunId, Session, SessionId, SessionKey, SessionStatus,
    StoreError, StoreResult, TenantId, TranscriptEntry, record_size,
};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::{BTreeMap, HashMap};

/// One DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

// Session item attributes.
pub(crate) const TENANT: &str = "tenant";
pub(crate) const SESSION_KEY: &str = "sessionKey";
pub(crate) const SESSION_ID: &str = "sessionId";
pub(crate) const STATUS: &str = "status";
pub(crate) const ACTIVE_RUN_ID: &str = "activeRunId";
pub(crate) const CREATED_AT: &str = "createdAt";
pub(crate) const UPDATED_AT: &str = "updatedAt";
/// On a session item: when the retention sweep began to expire it (ms); no turn is accepted.
pub(crate) const EXPIRING: &str = "expiringSince";
pub(crate) const LAST_PROGRESS_AT: &str = "lastProgressAt";
pub(crate) const RUNS_ACCEPTED: &str = "runsAccepted";
/// The agent a session belongs to (absent: `main`).
pub(crate) const AGENT_ID: &str = "agentId";
pub(crate) const RUNS_FINISHED: &str = "runsFinished";
pub(crate) const GENERATION: &str = "generation";
pub(crate) const LOCK_OWNER: &str = "lockOwner";
pub(crate) const LOCK_UNTIL: &str = "lockUntil";
pub(crate) const FENCE: &str = "fence";
/// [`Session::reset_barrier`](agentlane_core::Session::reset_barrier); absent = 0.
pub(crate) const RESET_BARRIER: &str = "resetBarrier";
/// [`Session::reset_barrier_until`](agentlane_core::Session::reset_barrier_until); absent = 0.
pub(crate) const RESET_UNTIL: &str = "resetBarrierUntil";
/// [`Session::queue_mode`](agentlane_core::Session::queue_mode); absent = none.
pub(crate) const QUEUE_MODE: &str = "queueMode";
/// [`Session::interrupt`](agentlane_core::Session::interrupt): the interrupting run, its seq
/// and the seq it interrupted; absent = none.
pub(crate) const INTERRUPT_RUN: &str = "interruptRun";
pub(crate) const INTERRUPT_SEQ: &str = "interruptSeq";
pub(crate) const INTERRUPT_AFTER: &str = "interruptAfter";
/// Sparse GSI `processing` partition key: present only while the session is processing.
pub(crate) const PROC_PK: &str = "procPk";
/// Sparse GSI `processing` sort key: the session's last progress time (ms).
pub(crate) const PROC_AT: &str = "procAt";
/// The single partition value of the `processing` GSI.
pub(crate) const PROC_PK_VALUE: &str = "PROCESSING";
/// Sparse GSI `pending` partition key: present while the session has pending work
/// ([`Session::pending_at`](agentlane_core::Session::pending_at)).
pub(crate) const PEND_PK: &str = "pendPk";
/// Sparse GSI `pending` sort key: since when the work has been pending (ms).
pub(crate) const PEND_AT: &str = "pendAt";
/// The single partition value of the `pending` GSI.
pub(crate) const PEND_PK_VALUE: &str = "PENDING";
/// GSI `sessions` partition key of every session item: `T#{tenant}` ([`tenant_partition`]).
pub(crate) const SESS_TENANT: &str = "sessTenant";
/// [`Session::redrives`](agentlane_core::Session::redrives); absent = 0.
pub(crate) const REDRIVES: &str = "redrives";
/// Prefix of the attributes `openRun{seq}` = run id: [`Session::open_runs`](agentlane_core::Session::open_runs)
/// as top-level attributes, so an accept adds one (`SET`) and the sweep removes one (`REMOVE`)
/// without a map that would have to exist first.
pub(crate) const OPEN_RUN_PREFIX: &str = "openRun";

/// The attribute name of the open run numbered `seq`.
pub(crate) fn open_run_attr(seq: u64) -> String {
    format!("{OPEN_RUN_PREFIX}{seq}")
}

// Run item attributes (besides STATUS, SESSION_ID, UPDATED_AT).
pub(crate) const RUN_JSON: &str = "run";
/// GSI `sessionRuns` partition key of every run item: its session item's `PK`.
pub(crate) const RUN_SESSION: &str = "runSession";
/// GSI `sessionRuns` sort key: the run's [`Run::session_seq`].
pub(crate) const SESSION_SEQ: &str = "sessionSeq";
pub(crate) const ABORT_REQUESTED: &str = "abortRequested";
/// Why the abort was requested, when not a plain request (`stuck`): set once, with
/// `abortRequested`, by the supervisor.
pub(crate) const ABORT_REASON: &str = "abortReason";
/// The answer to the run's latest pause (JSON), set by the API or the supervisor's expiry,
/// never by a runner commit.
pub(crate) const ACTION_ANSWER: &str = "actionAnswer";
/// The pause [`ACTION_ANSWER`] answers (a number, for the answer's condition).
pub(crate) const ANSWER_FOR: &str = "answerFor";

// Transcript entry, event and idempotency attributes.
pub(crate) const ENTRY_JSON: &str = "entry";
pub(crate) const EVENT_JSON: &str = "event";
pub(crate) const SEQ: &str = "seq";
pub(crate) const RUN_ID: &str = "runId";
/// DynamoDB TTL attribute (epoch seconds).
pub(crate) const EXPIRES_AT: &str = "expiresAt";
/// Exact idempotency expiry (ms), checked in conditions: TTL deletion is only eventual.
pub(crate) const EXPIRES_AT_MS: &str = "expiresAtMs";

/// The `sessions` GSI partition of a tenant's sessions.
pub(crate) fn tenant_partition(tenant: &TenantId) -> String {
    format!("T#{tenant}")
}

/// The `sessionRuns` GSI attributes of a run item (set on every whole write of it).
pub(crate) fn run_index_attributes(run: &Run) -> [(String, AttributeValue); 2] {
    [
        (
            RUN_SESSION.to_owned(),
            s(super::keys::session_pk(&run.tenant, &run.session_key)),
        ),
        (SESSION_SEQ.to_owned(), n(run.session_seq)),
    ]
}

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn corrupt(item: &Item, what: &str) -> StoreError {
    let pk = item
        .get(super::keys::PK)
        .and_then(|v| v.as_s().ok())
        .map_or("?", String::as_str);
    StoreError::Corrupt(format!("item {pk}: {what}"))
}

pub(crate) fn get_str<'a>(item: &'a Item, name: &str) -> StoreResult<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        _ => Err(corrupt(item, &format!("missing string attribute {name}"))),
    }
}

pub(crate) fn opt_str<'a>(item: &'a Item, name: &str) -> StoreResult<Option<&'a str>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v)),
        Some(_) => Err(corrupt(item, &format!("attribute {name} is not a string"))),
    }
}

pub(crate) fn get_u64(item: &Item, name: &str) -> StoreResult<u64> {
    opt_u64(item, name)?.ok_or_else(|| corrupt(item, &format!("missing number attribute {name}")))
}

pub(crate) fn opt_u64(item: &Item, name: &str) -> StoreResult<Option<u64>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse()
            .map(Some)
            .map_err(|_| corrupt(item, &format!("attribute {name} is not a u64: {v}"))),
        Some(_) => Err(corrupt(item, &format!("attribute {name} is not a number"))),
    }
}

pub(crate) fn status_str(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Processing => "processing",
    }
}

/// The whole session as an item under `pk` (used to create one: [`Session::new`] and
/// [`NewTurn::first_session`](agentlane_core::NewTurn::first_session) decide its fields).
pub(crate) fn session_item(pk: String, session: &Session) -> Item {
    let mut item = HashMap::from([
        (super::keys::PK.to_owned(), s(pk)),
        (super::keys::SK.to_owned(), s(super::keys::SESSION_SK)),
        (TENANT.to_owned(), s(session.tenant.as_str())),
        (SESS_TENANT.to_owned(), s(tenant_partition(&session.tenant))),
        (SESSION_KEY.to_owned(), s(session.session_key.as_str())),
        (SESSION_ID.to_owned(), s(session.session_id.as_str())),
        (STATUS.to_owned(), s(status_str(session.status))),
        (CREATED_AT.to_owned(), n(session.created_at)),
        (UPDATED_AT.to_owned(), n(session.updated_at)),
        (RUNS_ACCEPTED.to_owned(), n(session.runs_accepted)),
        (RUNS_FINISHED.to_owned(), n(session.runs_finished)),
        (GENERATION.to_owned(), n(session.generation)),
        (LOCK_UNTIL.to_owned(), n(session.lock_until)),
        (FENCE.to_owned(), n(session.fence)),
    ]);
    if let Some(run_id) = &session.active_run_id {
        item.insert(ACTIVE_RUN_ID.to_owned(), s(run_id.as_str()));
    }
    if let Some(agent) = &session.agent_id {
        item.insert(AGENT_ID.to_owned(), s(agent.as_str()));
    }
    if let Some(at) = session.last_progress_at {
        item.insert(LAST_PROGRESS_AT.to_owned(), n(at));
    }
    if let Some(owner) = &session.lock_owner {
        item.insert(LOCK_OWNER.to_owned(), s(owner.as_str()));
    }
    if let Some(mark) = &session.interrupt {
        item.insert(INTERRUPT_RUN.to_owned(), s(mark.run_id.as_str()));
        item.insert(INTERRUPT_SEQ.to_owned(), n(mark.session_seq));
        item.insert(INTERRUPT_AFTER.to_owned(), n(mark.after));
    }
    if session.status == SessionStatus::Processing {
        item.insert(PROC_PK.to_owned(), s(PROC_PK_VALUE));
        let at = session.last_progress_at.unwrap_or(session.updated_at);
        item.insert(PROC_AT.to_owned(), n(at));
    }
    if let Some(at) = session.pending_at {
        item.insert(PEND_PK.to_owned(), s(PEND_PK_VALUE));
        item.insert(PEND_AT.to_owned(), n(at));
    }
    if session.redrives > 0 {
        item.insert(REDRIVES.to_owned(), n(u64::from(session.redrives)));
    }
    for (seq, run_id) in &session.open_runs {
        item.insert(open_run_attr(*seq), s(run_id.as_str()));
    }
    item
}

/// The `openRun{seq}` attributes of a session item.
fn open_runs(item: &Item) -> BTreeMap<u64, RunId> {
    item.iter()
        .filter_map(|(name, value)| {
            let seq = name.strip_prefix(OPEN_RUN_PREFIX)?.parse::<u64>().ok()?;
            Some((seq, RunId::new(value.as_s().ok()?)))
        })
        .collect()
}

pub(crate) fn session_from_item(item: &Item) -> StoreResult<Session> {
    let status = match get_str(item, STATUS)? {
        "idle" => SessionStatus::Idle,
        "processing" => SessionStatus::Processing,
        other => return Err(corrupt(item, &format!("unknown session status {other}"))),
    };
    Ok(Session {
        tenant: TenantId::new(get_str(item, TENANT)?),
        session_key: SessionKey::new(get_str(item, SESSION_KEY)?),
        session_id: SessionId::new(get_str(item, SESSION_ID)?),
        status,
        active_run_id: opt_str(item, ACTIVE_RUN_ID)?.map(RunId::new),
        created_at: get_u64(item, CREATED_AT)?,
        updated_at: get_u64(item, UPDATED_AT)?,
        last_progress_at: opt_u64(item, LAST_PROGRESS_AT)?,
        runs_accepted: get_u64(item, RUNS_ACCEPTED)?,
        agent_id: opt_str(item, AGENT_ID)?.map(str::to_owned),
        runs_finished: get_u64(item, RUNS_FINISHED)?,
        generation: get_u64(item, GENERATION)?,
        lock_owner: opt_str(item, LOCK_OWNER)?.map(str::to_owned),
        lock_until: opt_u64(item, LOCK_UNTIL)?.unwrap_or(0),
        fence: opt_u64(item, FENCE)?.unwrap_or(0),
        reset_barrier: opt_u64(item, RESET_BARRIER)?.unwrap_or(0),
        reset_barrier_until: opt_u64(item, RESET_UNTIL)?.unwrap_or(0),
        queue_mode: match opt_str(item, QUEUE_MODE)? {
            None => None,
            Some(name) => Some(
                QueueMode::parse(name)
                    .ok_or_else(|| corrupt(item, &format!("unknown queue mode {name}")))?,
            ),
        },
        interrupt: match opt_str(item, INTERRUPT_RUN)? {
            None => None,
            Some(run_id) => Some(agentlane_core::InterruptMark {
                run_id: RunId::new(run_id),
                session_seq: get_u64(item, INTERRUPT_SEQ)?,
                after: get_u64(item, INTERRUPT_AFTER)?,
            }),
        },
        pending_at: opt_u64(item, PEND_AT)?,
        open_runs: open_runs(item),
        redrives: u32::try_from(opt_u64(item, REDRIVES)?.unwrap_or(0)).unwrap_or(u32::MAX),
    })
}

/// The run as JSON, after core's size rule (a run over `MAX_RECORD_BYTES` is refused up front,
/// rather than sent and rejected by DynamoDB with an error that would look transient).
pub(crate) fn run_json(run: &Run) -> StoreResult<String> {
    record_size::run_json(run)
}

/// The run JSON with the `abortRequested` attribute merged back: that attribute is the only
/// truth about abort requests (runner writes never touch it).
pub(crate) fn run_from_item(item: &Item) -> StoreResult<Run> {
    let mut run: Run = serde_json::from_str(get_str(item, RUN_JSON)?)
        .map_err(|e| corrupt(item, &format!("run JSON: {e}")))?;
    run.abort_requested = matches!(item.get(ABORT_REQUESTED), Some(AttributeValue::Bool(true)));
    run.abort_reason = match item.get(ABORT_REASON) {
        Some(AttributeValue::S(r)) if r == "stuck" => Some(AbortReason::Stuck),
        Some(AttributeValue::S(r)) if r == "interrupted" => Some(AbortReason::Interrupted),
        _ => None,
    };
    run.action_answer = match item.get(ACTION_ANSWER) {
        Some(AttributeValue::S(json)) => Some(
            serde_json::from_str(json)
                .map_err(|e| corrupt(item, &format!("action answer JSON: {e}")))?,
        ),
        _ => None,
    };
    Ok(run)
}

pub(crate) fn entry_from_item(item: &Item) -> StoreResult<TranscriptEntry> {
    serde_json::from_str(get_str(item, ENTRY_JSON)?)
        .map_err(|e| corrupt(item, &format!("transcript entry JSON: {e}")))
}

pub(crate) fn event_from_item(item: &Item) -> StoreResult<Event> {
    serde_json::from_str(get_str(item, EVENT_JSON)?)
        .map_err(|e| corrupt(item, &format!("event JSON: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn session() -> Session {
        Session::new(
            TenantId::new("t"),
            SessionKey::new("k"),
            SessionId::new("s1"),
            42,
        )
    }

    #[test]
    fn a_new_session_item_decodes_to_the_same_session() {
        let new = session();
        assert_eq!(
            session_from_item(&session_item("pk".into(), &new)).unwrap(),
            new
        );
    }

    #[test]
    fn every_session_field_survives_the_item() {
        let busy = Session {
            status: SessionStatus::Processing,
            active_run_id: Some(RunId::new("run_1")),
            last_progress_at: Some(50),
            runs_accepted: 3,
            runs_finished: 2,
            generation: 1,
            lock_owner: Some("runner".into()),
            lock_until: 99,
            fence: 7,
            interrupt: Some(agentlane_core::InterruptMark {
                run_id: RunId::new("run_2"),
                session_seq: 2,
                after: 1,
            }),
            ..session()
        };
        let item = session_item("pk".into(), &busy);
        assert_eq!(session_from_item(&item).unwrap(), busy);
        assert_eq!(item[PROC_PK], s(PROC_PK_VALUE));
        assert_eq!(item[PROC_AT], n(50));
        assert!(!session_item("pk".into(), &session()).contains_key(PROC_PK));
    }

    #[test]
    fn a_run_too_large_for_an_item_is_refused_as_permanent() {
        let run: Run = serde_json::from_value(serde_json::json!({
            "runId": "run_1", "tenant": "t", "sessionKey": "k", "sessionId": "s",
            "status": "running", "livenessState": "working",
            "request": { "message": "x".repeat(400_000) }, "acceptedAt": 1
        }))
        .unwrap();
        let err = run_json(&run).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge(_)), "{err:?}");
        assert!(!err.is_transient());
    }
}
