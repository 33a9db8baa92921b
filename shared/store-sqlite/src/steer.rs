//! Steer messages (SPEC §4 `steer`): recorded as pending when accepted, taken by the running
//! run of their session in one fenced transaction.

use crate::error::{Result, int, uint};
use crate::lock::{fenced_session, put_transcript};
use crate::records::{load_run, replace_run};
use agentlane_core::{Fence, MAX_STEERS_PER_TAKE, Run, RunId, SteerTake};
use rusqlite::{Connection, params};

/// Records `run` (accepted in `steer` or `collect` mode) as waiting for its session's running run; part of
/// the accept's transaction.
pub(crate) fn record_pending(tx: &Connection, run: &Run) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO pending_steers (tenant, session_key, session_seq, run_id)
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
    )?
    .execute(params![
        run.tenant.as_str(),
        run.session_key.as_str(),
        int(run.session_seq),
        run.run_id.as_str()
    ])?;
    Ok(())
}

/// The session's pending steer records, oldest first: `(session_seq, run_id)`.
fn pending(conn: &Connection, fence: &Fence) -> Result<Vec<(u64, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT session_seq, run_id FROM pending_steers
             WHERE tenant = ?1 AND session_key = ?2 ORDER BY session_seq",
        )?
        .query_map(
            params![fence.tenant.as_str(), fence.session_key.as_str()],
            |row| Ok((row.get::<_, i64>(0)?, row.get(1)?)),
        )?
        .map(|row| row.map(|(seq, id)| (uint(seq), id)))
        .collect::<rusqlite::Result<_>>()?)
}

/// [`FencedWriter::steers_waiting`](agentlane_core::FencedWriter::steers_waiting): reads only.
pub(crate) fn waiting(conn: &Connection, fence: &Fence, take: &SteerTake) -> Result<bool> {
    for (_, run_id) in pending(conn, fence)? {
        if load_run(conn, &fence.tenant, &RunId::new(run_id))?.is_some_and(|run| take.takes(&run)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`FencedWriter::take_steers`](agentlane_core::FencedWriter::take_steers) in one
/// transaction.
pub(crate) fn take(conn: &mut Connection, fence: &Fence, take: SteerTake) -> Result<Vec<Run>> {
    let tx = conn.savepoint()?;
    let session = fenced_session(&tx, fence)?;
    let pending = pending(&tx, fence)?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let mut taken = Vec::new();
    let mut done = Vec::new();
    for (seq, run_id) in pending {
        if taken.len() == MAX_STEERS_PER_TAKE {
            break;
        }
        let run = load_run(&tx, &fence.tenant, &RunId::new(run_id))?;
        if take.keeps(run.as_ref()) {
            // A message of the other mode (steer / collect), still waiting for its own take.
            continue;
        }
        if let Some(run) = run.filter(|run| take.takes(run)) {
            taken.push(take.mark(&run));
        }
        // Taken now, or never takeable again (it started, ended, was aborted, or belongs to
        // an older session id or an earlier carrier).
        done.push(seq);
    }
    let entries: Vec<_> = taken
        .iter()
        .enumerate()
        .map(|(i, run)| take.entry(run, i))
        .collect();
    put_transcript(&tx, &fence.tenant, &session.session_id, &entries)?;
    for run in &taken {
        replace_run(&tx, run)?;
    }
    let mut delete = tx.prepare_cached(
        "DELETE FROM pending_steers WHERE tenant = ?1 AND session_key = ?2 AND session_seq = ?3",
    )?;
    for seq in done {
        delete.execute(params![
            fence.tenant.as_str(),
            fence.session_key.as_str(),
            int(seq)
        ])?;
    }
    drop(delete);
    tx.commit()?;
    Ok(taken)
}
