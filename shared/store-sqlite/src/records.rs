//! Reading and writing whole session and run records (JSON bodies) by key. All functions run
//! inside the caller's transaction.

use crate::error::Result;
use agentlane_core::{AbortReason, Run, RunId, Session, SessionKey, TenantId};
use rusqlite::{Connection, OptionalExtension, params};

pub(crate) fn load_session(
    conn: &Connection,
    tenant: &TenantId,
    key: &SessionKey,
) -> Result<Option<Session>> {
    let body: Option<String> = conn
        .prepare_cached("SELECT body FROM sessions WHERE tenant = ?1 AND session_key = ?2")?
        .query_row(params![tenant.as_str(), key.as_str()], |row| row.get(0))
        .optional()?;
    Ok(body.map(|b| serde_json::from_str(&b)).transpose()?)
}

/// Inserts or replaces the session record under its own tenant and key.
pub(crate) fn save_session(conn: &Connection, session: &Session) -> Result<()> {
    let body = serde_json::to_string(session)?;
    conn.prepare_cached(
        "INSERT INTO sessions (tenant, session_key, body) VALUES (?1, ?2, ?3)
         ON CONFLICT (tenant, session_key) DO UPDATE SET body = excluded.body",
    )?
    .execute(params![
        session.tenant.as_str(),
        session.session_key.as_str(),
        body
    ])?;
    Ok(())
}

/// The run with its `abort_requested` and `action_answer` taken from the API-owned columns.
pub(crate) fn load_run(
    conn: &Connection,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Option<Run>> {
    let row: Option<(String, i64, Option<String>)> = conn
        .prepare_cached(
            "SELECT body, abort_requested, action_answer FROM runs
             WHERE tenant = ?1 AND run_id = ?2",
        )?
        .query_row(params![tenant.as_str(), run_id.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((body, abort_requested, answer)) = row else {
        return Ok(None);
    };
    decode_run(&body, abort_requested, answer.as_deref()).map(Some)
}

/// A run from its row: the body with `abort_requested` and `action_answer` merged in.
pub(crate) fn decode_run(body: &str, abort_requested: i64, answer: Option<&str>) -> Result<Run> {
    let mut run: Run = serde_json::from_str(body)?;
    run.abort_requested = abort_requested != 0;
    run.abort_reason = abort_reason_from_column(abort_requested);
    run.action_answer = answer.map(serde_json::from_str).transpose()?;
    Ok(run)
}

/// The `abort_requested` column: 0 no request, 1 a plain request, 2 the supervisor's (stuck),
/// 3 an interrupt message's.
pub(crate) fn abort_column(reason: AbortReason) -> i64 {
    match reason {
        AbortReason::Requested => 1,
        AbortReason::Stuck => 2,
        AbortReason::Interrupted => 3,
    }
}

fn abort_reason_from_column(value: i64) -> Option<AbortReason> {
    match value {
        2 => Some(AbortReason::Stuck),
        3 => Some(AbortReason::Interrupted),
        _ => None,
    }
}

/// Creates the run; `false` when a run with that id already exists (nothing written).
pub(crate) fn insert_run(conn: &Connection, run: &Run) -> Result<bool> {
    let body = serde_json::to_string(run)?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO runs (tenant, run_id, body, abort_requested) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (tenant, run_id) DO NOTHING",
        )?
        .execute(params![
            run.tenant.as_str(),
            run.run_id.as_str(),
            body,
            match (run.abort_requested, run.abort_reason) {
                (false, _) => 0,
                (true, reason) => abort_column(reason.unwrap_or(AbortReason::Requested)),
            }
        ])?;
    Ok(inserted == 1)
}

/// Writes the run's body, creating it if absent; never touches `abort_requested`.
pub(crate) fn replace_run(conn: &Connection, run: &Run) -> Result<()> {
    let body = serde_json::to_string(run)?;
    conn.prepare_cached(
        "INSERT INTO runs (tenant, run_id, body, abort_requested) VALUES (?1, ?2, ?3, 0)
         ON CONFLICT (tenant, run_id) DO UPDATE SET body = excluded.body",
    )?
    .execute(params![run.tenant.as_str(), run.run_id.as_str(), body])?;
    Ok(())
}
