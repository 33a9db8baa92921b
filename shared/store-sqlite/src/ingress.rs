//! Unfenced writes from the API edge (accept, abort, reset) and the reads. Each write is one
//! `IMMEDIATE` transaction.

use crate::error::{Result, int, uint};
use crate::records::{self, insert_run, load_run, load_session, save_session};
use agentlane_core::{
    AbortReason, AcceptOutcome, Event, LaneMessage, NewTurn, PageBudget, QueueMode, Run, RunId,
    Session, SessionId, SessionKey, SessionStatus, StoreError, TenantId, TranscriptEntry,
    record_size,
};
use rusqlite::{Connection, OptionalExtension, params};

/// Accepts `turn` (see [`TurnIntake::accept_turn`](agentlane_core::TurnIntake::accept_turn));
/// with `queue_at` (the queue's clock), a created run's lane message is stored in the same
/// transaction, as [`crate::lane_table::enqueue`] would store it then. A created run comes
/// back with the JSON it was stored as (its [accepted record](crate::accepted)).
pub(crate) fn accept_turn(
    conn: &mut Connection,
    turn: NewTurn,
    queue_at: Option<u64>,
) -> Result<(AcceptOutcome, Option<String>)> {
    let tx = conn.savepoint()?;
    if let Some(key) = &turn.idempotency_key
        && let Some(run) = live_idempotent_run(&tx, &turn.tenant, key, turn.now)?
    {
        return Ok((turn.replay(run)?, None));
    }

    // A spent period of the tenant's budget refuses the turn, in the accepting transaction.
    let spends = turn
        .spend_caps
        .iter()
        .map(|cap| crate::spend::period_totals(&tx, &turn.tenant, &cap.period))
        .collect::<crate::error::Result<Vec<_>>>()?;
    turn.check_spend(&spends)?;
    let current = crate::agents::current(&tx, &turn.tenant, turn.request.agent())?;
    let agent = turn.resolve_agent(current.as_ref())?;
    let (mut session, session_seq) = match load_session(&tx, &turn.tenant, &turn.session_key)? {
        Some(mut session) => {
            turn.check_agent(&session)?;
            turn.check_room(&session)?;
            let seq = session.runs_accepted;
            session.runs_accepted += 1;
            session.updated_at = session.updated_at.max(turn.now);
            (session, seq)
        }
        None => (turn.first_session(), 0),
    };
    let run = turn.queued_run(
        session.session_id.clone(),
        session_seq,
        session.queue_mode,
        &agent,
    );
    // Encoded once: the size rule measures the JSON the insert stores.
    let run_json = record_size::run_json(&run)?;
    if let Some(mark) = turn.interrupt_mark(&run, &session) {
        session.interrupt = Some(mark);
    }
    session.note_accepted(session_seq, &run.run_id, turn.now);
    save_session(&tx, &session)?;
    if !insert_run(&tx, &run, &run_json)? {
        return Err(StoreError::Conflict(format!("run {} already exists", run.run_id)).into());
    }
    if matches!(
        run.request.queue_mode,
        Some(QueueMode::Steer | QueueMode::Collect)
    ) {
        crate::steer::record_pending(&tx, &run)?;
    }
    if let Some(key) = &turn.idempotency_key {
        tx.prepare_cached(
            "INSERT INTO idempotency (tenant, idem_key, run_id, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (tenant, idem_key)
             DO UPDATE SET run_id = excluded.run_id, expires_at = excluded.expires_at",
        )?
        .execute(params![
            turn.tenant.as_str(),
            key,
            run.run_id.as_str(),
            int(turn.now.saturating_add(turn.idempotency_ttl_ms))
        ])?;
    }
    if let Some(now) = queue_at {
        crate::lane_table::enqueue(&tx, &lane_message(&run), now)?;
    }
    tx.commit()?;
    Ok((AcceptOutcome { run, created: true }, Some(run_json)))
}

/// The lane message of a run just accepted: the one the API sends for it on a store that does
/// not check accepted records.
fn lane_message(run: &Run) -> LaneMessage {
    LaneMessage::for_run(run, run.run_id.to_string())
}

/// The run a still-live idempotency record names.
fn live_idempotent_run(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
    now: u64,
) -> Result<Option<Run>> {
    let run_id: Option<String> = conn
        .prepare_cached(
            "SELECT run_id FROM idempotency WHERE tenant = ?1 AND idem_key = ?2 AND expires_at > ?3",
        )?
        .query_row(params![tenant.as_str(), key, int(now)], |row| row.get(0))
        .optional()?;
    let Some(run_id) = run_id else {
        return Ok(None);
    };
    match load_run(conn, tenant, &RunId::new(run_id.clone()))? {
        Some(run) => Ok(Some(run)),
        None => Err(StoreError::Corrupt(format!(
            "idempotency key {key:?} names run {run_id}, which does not exist"
        ))
        .into()),
    }
}

/// Sets the abort flag; the first request's reason stays.
pub(crate) fn request_abort(
    conn: &mut Connection,
    tenant: &TenantId,
    run_id: &RunId,
    reason: AbortReason,
) -> Result<Option<Run>> {
    let tx = conn.savepoint()?;
    if !ask_abort(&tx, tenant, run_id, reason)? {
        return Ok(None);
    }
    let run = load_run(&tx, tenant, run_id)?;
    tx.commit()?;
    Ok(run)
}

/// Asks run `run_id` to abort for `reason` (a reason asked before stays); `false` when there
/// is no such run.
pub(crate) fn ask_abort(
    tx: &Connection,
    tenant: &TenantId,
    run_id: &RunId,
    reason: AbortReason,
) -> Result<bool> {
    let changed = tx
        .prepare_cached(
            "UPDATE runs SET abort_requested = CASE WHEN abort_requested = 0 THEN ?3
             ELSE abort_requested END WHERE tenant = ?1 AND run_id = ?2",
        )?
        .execute(params![
            tenant.as_str(),
            run_id.as_str(),
            records::abort_column(reason)
        ])?;
    Ok(changed > 0)
}

/// Records the answer to a pause while the run waits on it (and on no later pause).
pub(crate) fn answer_action(
    conn: &mut Connection,
    tenant: &TenantId,
    run_id: &RunId,
    answer: &agentlane_core::RecordedAnswer,
) -> Result<agentlane_core::AnswerOutcome> {
    use agentlane_core::AnswerOutcome;
    let tx = conn.savepoint()?;
    let Some(mut run) = load_run(&tx, tenant, run_id)? else {
        return Ok(AnswerOutcome::NotFound);
    };
    let waiting = run.status == agentlane_core::RunStatus::RequiresAction
        && run
            .action_answer
            .as_ref()
            .is_none_or(|a| a.action_id < answer.action_id);
    if !waiting {
        return Ok(AnswerOutcome::NotWaiting(run));
    }
    tx.prepare_cached("UPDATE runs SET action_answer = ?3 WHERE tenant = ?1 AND run_id = ?2")?
        .execute(params![
            tenant.as_str(),
            run_id.as_str(),
            serde_json::to_string(answer)?
        ])?;
    tx.commit()?;
    run.action_answer = Some(answer.clone());
    Ok(AnswerOutcome::Recorded(run))
}

/// New session id and generation; the lock is cleared so an expired holder's fence is dead.
pub(crate) fn reset_session(
    conn: &mut Connection,
    tenant: &TenantId,
    key: &SessionKey,
    new_session_id: SessionId,
    now: u64,
) -> Result<Session> {
    let tx = conn.savepoint()?;
    let Some(mut session) = load_session(&tx, tenant, key)? else {
        return Err(StoreError::NotFound(format!("session {}", key.fingerprint())).into());
    };
    if session.lock_is_live(now) {
        // The runs accepted so far will not start: the reset comes once the lock is free.
        session.reset_barrier = session.reset_barrier.max(session.runs_accepted);
        session.reset_barrier_until = now + agentlane_core::RESET_HOLD_MS;
        save_session(&tx, &session)?;
        tx.commit()?;
        return Err(StoreError::Busy.into());
    }
    session.session_id = new_session_id;
    session.generation += 1;
    session.status = SessionStatus::Idle;
    session.active_run_id = None;
    session.lock_owner = None;
    session.lock_until = 0;
    session.updated_at = session.updated_at.max(now);
    save_session(&tx, &session)?;
    tx.commit()?;
    Ok(session)
}

/// The key's default queue mode, set or cleared.
pub(crate) fn set_queue_mode(
    conn: &mut Connection,
    tenant: &TenantId,
    key: &SessionKey,
    mode: Option<QueueMode>,
    now: u64,
) -> Result<Session> {
    let tx = conn.savepoint()?;
    let Some(mut session) = load_session(&tx, tenant, key)? else {
        return Err(StoreError::NotFound(format!("session {key}")).into());
    };
    session.queue_mode = mode;
    session.updated_at = session.updated_at.max(now);
    save_session(&tx, &session)?;
    tx.commit()?;
    Ok(session)
}

/// `after: None` reads from the start (seqs are never negative).
fn after_seq(after: Option<u64>) -> i64 {
    after.map_or(-1, int)
}

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Entries of the session with `seq > after`, in order, within `budget` (see [`read_page`]).
pub(crate) fn read_transcript(
    conn: &Connection,
    tenant: &TenantId,
    session_id: &SessionId,
    after: Option<u64>,
    budget: PageBudget,
) -> Result<Vec<TranscriptEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT body FROM transcript WHERE tenant = ?1 AND session_id = ?2 AND seq > ?3
         ORDER BY seq LIMIT ?4",
    )?;
    read_page(
        &mut stmt,
        tenant.as_str(),
        session_id.as_str(),
        after,
        budget,
    )
}

/// Events of the run with `seq > after`, in order, within `budget` (see [`read_page`]).
pub(crate) fn read_events(
    conn: &Connection,
    tenant: &TenantId,
    run_id: &RunId,
    after: Option<u64>,
    budget: PageBudget,
) -> Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(
        "SELECT body FROM events WHERE tenant = ?1 AND run_id = ?2 AND seq > ?3
         ORDER BY seq LIMIT ?4",
    )?;
    read_page(&mut stmt, tenant.as_str(), run_id.as_str(), after, budget)
}

/// Steps through the rows of `stmt` (bodies in seq order) and decodes each body only once the
/// budget admits its size: the text is measured where SQLite holds it, so a record that does
/// not fit is never copied, and the read stops there.
fn read_page<T: serde::de::DeserializeOwned>(
    stmt: &mut rusqlite::CachedStatement<'_>,
    tenant: &str,
    owner: &str,
    after: Option<u64>,
    budget: PageBudget,
) -> Result<Vec<T>> {
    let mut rows = stmt.query(params![
        tenant,
        owner,
        after_seq(after),
        limit(budget.count)
    ])?;
    let mut tally = budget.tally();
    let mut records = Vec::new();
    while !tally.is_full() {
        let Some(row) = rows.next()? else { break };
        let body = row.get_ref(0)?.as_str().map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })?;
        if !tally.admit(body.len()) {
            break;
        }
        records.push(serde_json::from_str(body)?);
    }
    Ok(records)
}

/// One more than the run's highest event seq, 0 when it has none.
pub(crate) fn next_event_seq(conn: &Connection, tenant: &TenantId, run_id: &RunId) -> Result<u64> {
    let max: Option<i64> = conn
        .prepare_cached("SELECT MAX(seq) FROM events WHERE tenant = ?1 AND run_id = ?2")?
        .query_row(params![tenant.as_str(), run_id.as_str()], |row| row.get(0))?;
    Ok(max.map_or(0, |seq| uint(seq) + 1))
}
