//! The session write lock (owner, lease, fencing token on the session record) and the fenced
//! commit. Every function re-reads the session first, in one transaction (its own savepoint, or
//! for [`acquire`] a single write statement that may run inside a caller's transaction).

use crate::error::{Result, int};
use crate::records::{load_session, replace_run_encoded, save_session};
use agentlane_core::{
    AbortReason, AcceptedRecord, CheckedCommit, Fence, FencingToken, InterruptWatch, LockAttempt,
    RunId, Session, SessionId, SessionKey, StoreError, TenantId, TranscriptEntry,
};
use rusqlite::{Connection, params};

/// One write statement (the session's save), so no savepoint of its own: inside a caller's
/// transaction (the receive that takes the lock with a delivery) or alone.
pub(crate) fn acquire(
    tx: &Connection,
    tenant: &TenantId,
    key: &SessionKey,
    owner: &str,
    lease_ms: u64,
    now: u64,
) -> Result<LockAttempt> {
    let Some(mut session) = load_session(tx, tenant, key)? else {
        return Err(StoreError::NotFound(format!("session {}", key.fingerprint())).into());
    };
    if let Some(held) = session.lock_holder(now) {
        return Ok(held);
    }
    session.fence += 1;
    session.lock_owner = Some(owner.to_owned());
    session.lock_until = now.saturating_add(lease_ms);
    save_session(tx, &session)?;
    let fence = Fence {
        tenant: tenant.clone(),
        session_key: key.clone(),
        owner: owner.to_owned(),
        token: FencingToken(session.fence),
    };
    Ok(LockAttempt::Acquired(fence, Box::new(session)))
}

pub(crate) fn renew(conn: &mut Connection, fence: &Fence, lease_ms: u64, now: u64) -> Result<()> {
    let tx = conn.savepoint()?;
    let mut session = fenced_session(&tx, fence)?;
    session.lock_until = now.saturating_add(lease_ms);
    save_session(&tx, &session)?;
    tx.commit()?;
    Ok(())
}

pub(crate) fn release(conn: &mut Connection, fence: &Fence) -> Result<()> {
    let tx = conn.savepoint()?;
    let mut session = fenced_session(&tx, fence)?;
    unlock(&mut session);
    save_session(&tx, &session)?;
    tx.commit()?;
    Ok(())
}

/// Applies everything in `commit` (checked by [`agentlane_core::Commit::check`]) or nothing: transcript entries go to
/// the session's current id (the one the fence guards), events to the commit's events run.
///
/// With `accepted` (the holder took the run from its accepted record), the stored run must still
/// be that record, not aborted ([`crate::accepted::check`]), or nothing is written (`Conflict`).
///
/// With `watch` (the write that carries a held start), the run is also asked to abort
/// (`interrupted`) in the same write when the session's interrupt mark was set on it since its
/// pickup ([`InterruptWatch::interrupted_by`]); answers whether it was.
pub(crate) fn commit(
    conn: &mut Connection,
    fence: &Fence,
    commit: CheckedCommit,
    accepted: Option<&AcceptedRecord>,
    watch: Option<&InterruptWatch>,
) -> Result<bool> {
    let tx = conn.savepoint()?;
    let mut session = fenced_session(&tx, fence)?;
    if let (Some(record), Some(run)) = (accepted, commit.run()) {
        crate::accepted::check(&tx, &fence.tenant, &run.run_id, record)?;
    }
    let interrupted = match watch.filter(|w| w.interrupted_by(&session)) {
        Some(w) => {
            crate::ingress::ask_abort(&tx, &fence.tenant, &w.run_id, AbortReason::Interrupted)?
        }
        None => false,
    };

    // Each record as the check encoded it (no second encoding).
    let entries = commit.transcript().iter().map(|e| e.seq);
    let rows = entries.zip(commit.transcript_json().iter().map(String::as_str));
    put_seq_rows(
        &tx,
        SeqRows::Transcript(&session.session_id),
        &fence.tenant,
        rows,
    )?;
    if let Some(run_id) = commit.events_run() {
        let events = commit.events().iter().map(|e| e.seq);
        let rows = events.zip(commit.events_json().iter().map(String::as_str));
        put_seq_rows(&tx, SeqRows::Events(run_id), &fence.tenant, rows)?;
    }
    if let (Some(run), Some(body)) = (commit.run(), commit.run_json()) {
        replace_run_encoded(&tx, run, body)?;
    }
    if let Some(update) = commit.session() {
        session.status = update.status;
        session.active_run_id = update.active_run_id.clone();
        session.last_progress_at = Some(update.last_progress_at);
        session.runs_finished += update.finished_delta;
        session.drop_finished_runs();
        session.updated_at = session.updated_at.max(update.last_progress_at);
    }
    if commit.release_lock() {
        unlock(&mut session);
    }
    if commit.session().is_some() || commit.release_lock() {
        save_session(&tx, &session)?;
    }
    tx.commit()?;
    Ok(interrupted)
}

/// The session, if `fence` is still the current lock; `FenceLost` otherwise.
pub(crate) fn fenced_session(tx: &Connection, fence: &Fence) -> Result<Session> {
    let session = load_session(tx, &fence.tenant, &fence.session_key)?;
    match session {
        Some(s) if s.is_fenced_by(fence) => Ok(s),
        _ => Err(StoreError::FenceLost.into()),
    }
}

fn unlock(session: &mut Session) {
    session.lock_owner = None;
    session.lock_until = 0;
}

pub(crate) fn put_transcript(
    tx: &Connection,
    tenant: &TenantId,
    session_id: &SessionId,
    entries: &[TranscriptEntry],
) -> Result<()> {
    let json = entries
        .iter()
        .map(serde_json::to_string)
        .collect::<serde_json::Result<Vec<_>>>()?;
    let seqs = entries.iter().map(|e| e.seq);
    let rows = seqs.zip(json.iter().map(String::as_str));
    put_seq_rows(tx, SeqRows::Transcript(session_id), tenant, rows)
}

/// The tables of rows numbered within their owner (a session's entries, a run's events).
#[derive(Clone, Copy)]
enum SeqRows<'a> {
    Transcript(&'a SessionId),
    Events(&'a RunId),
}

impl SeqRows<'_> {
    fn owner(&self) -> &str {
        match self {
            Self::Transcript(session_id) => session_id.as_str(),
            Self::Events(run_id) => run_id.as_str(),
        }
    }

    fn insert_sql(&self) -> &'static str {
        match self {
            Self::Transcript(_) => {
                "INSERT INTO transcript (tenant, session_id, seq, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant, session_id, seq) DO NOTHING"
            }
            Self::Events(_) => {
                "INSERT INTO events (tenant, run_id, seq, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant, run_id, seq) DO NOTHING"
            }
        }
    }

    fn taken(&self, seq: u64) -> StoreError {
        StoreError::Conflict(match self {
            Self::Transcript(session_id) => {
                format!("transcript seq {seq} of session {session_id} is taken")
            }
            Self::Events(run_id) => format!("event seq {seq} of run {run_id} is taken"),
        })
    }
}

/// Inserts `rows` (`(seq, JSON)`) into `table`; `Conflict` at the first seq already there.
fn put_seq_rows<'a>(
    tx: &Connection,
    table: SeqRows<'_>,
    tenant: &TenantId,
    rows: impl Iterator<Item = (u64, &'a str)>,
) -> Result<()> {
    let mut rows = rows.peekable();
    if rows.peek().is_none() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(table.insert_sql())?;
    for (seq, body) in rows {
        if insert.execute(params![tenant.as_str(), table.owner(), int(seq), body])? == 0 {
            return Err(table.taken(seq).into());
        }
    }
    Ok(())
}
