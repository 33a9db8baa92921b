//! Reading and writing whole session and run records (JSON bodies) by key. All functions run
//! inside the caller's transaction.
//!
//! The fields the indexes and list filters read are copied out of the body into columns of
//! their own when the record is written ([`SessionColumns`], [`RunColumns`]), so no write
//! parses the JSON again to maintain an index (issue 26).

use crate::error::{Result, int};
use agentlane_core::{AbortReason, MAIN_AGENT, Run, RunId, Session, SessionKey, TenantId};
use rusqlite::{Connection, OptionalExtension, params};

/// Issue 26: the indexed and filtered fields of session and run bodies become columns, backfilled
/// from the bodies, and the JSON expression indexes are rebuilt on them (same names, same
/// partial shapes; the processing index is now keyed by the time the supervisor compares).
pub(crate) const SCHEMA: &str = "
DROP INDEX sessions_pending;
DROP INDEX sessions_processing;
DROP INDEX sessions_by_activity;
DROP INDEX runs_by_session;
ALTER TABLE sessions ADD COLUMN status TEXT;
ALTER TABLE sessions ADD COLUMN updated_at INTEGER;
ALTER TABLE sessions ADD COLUMN progress_at INTEGER;
ALTER TABLE sessions ADD COLUMN pending_at INTEGER;
ALTER TABLE sessions ADD COLUMN agent_id TEXT;
UPDATE sessions SET
    status = json_extract(body, '$.status'),
    updated_at = json_extract(body, '$.updatedAt'),
    progress_at = COALESCE(json_extract(body, '$.lastProgressAt'),
                           json_extract(body, '$.updatedAt')),
    pending_at = json_extract(body, '$.pendingAt'),
    agent_id = COALESCE(json_extract(body, '$.agentId'), 'main');
ALTER TABLE runs ADD COLUMN session_key TEXT;
ALTER TABLE runs ADD COLUMN session_seq INTEGER;
ALTER TABLE runs ADD COLUMN status TEXT;
UPDATE runs SET
    session_key = json_extract(body, '$.sessionKey'),
    session_seq = json_extract(body, '$.sessionSeq'),
    status = json_extract(body, '$.status');
CREATE INDEX sessions_pending ON sessions (pending_at) WHERE pending_at IS NOT NULL;
CREATE INDEX sessions_processing ON sessions (progress_at) WHERE status = 'processing';
CREATE INDEX sessions_by_activity ON sessions (tenant, updated_at DESC, session_key DESC);
CREATE INDEX runs_by_session ON runs (tenant, session_key, session_seq DESC);
";

/// A session row's columns besides its body, taken from the record being written: the one place
/// that binds them, so no writer of a session can leave one stale.
#[derive(Debug, PartialEq, Eq)]
struct SessionColumns<'a> {
    /// `status`: `idle` or `processing` (the processing index holds the latter only).
    status: &'static str,
    /// `updated_at`: the activity order of the catalog and the retention sweep.
    updated_at: i64,
    /// `progress_at`: when the session last made progress (`lastProgressAt`, else
    /// `updatedAt`), the time the supervisor's stuck check compares.
    progress_at: i64,
    /// `pending_at`: when its pending work began waiting; `None` keeps the session out of the
    /// pending index.
    pending_at: Option<i64>,
    /// `agent_id`: the agent it talks to, [`MAIN_AGENT`] when the record names none.
    agent_id: &'a str,
}

impl<'a> SessionColumns<'a> {
    fn of(session: &'a Session) -> Self {
        Self {
            status: session.status.as_str(),
            updated_at: int(session.updated_at),
            progress_at: int(session.last_progress_at.unwrap_or(session.updated_at)),
            pending_at: session.pending_at.map(int),
            agent_id: session.agent_id.as_deref().unwrap_or(MAIN_AGENT),
        }
    }
}

/// A run row's columns besides its body and the API-owned ones, taken from the record being
/// written: the one place that binds them.
#[derive(Debug, PartialEq, Eq)]
struct RunColumns<'a> {
    /// `session_key`: the key whose runs the catalog lists.
    session_key: &'a str,
    /// `session_seq`: the run's place in its key's order.
    session_seq: i64,
    /// `status`: the catalog's status filter.
    status: &'static str,
}

impl<'a> RunColumns<'a> {
    fn of(run: &'a Run) -> Self {
        Self {
            session_key: run.session_key.as_str(),
            session_seq: int(run.session_seq),
            status: run.status.as_str(),
        }
    }
}

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

/// Inserts or replaces the session record under its own tenant and key, with its columns.
pub(crate) fn save_session(conn: &Connection, session: &Session) -> Result<()> {
    let body = serde_json::to_string(session)?;
    let c = SessionColumns::of(session);
    conn.prepare_cached(
        "INSERT INTO sessions (tenant, session_key, body,
                               status, updated_at, progress_at, pending_at, agent_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (tenant, session_key) DO UPDATE SET
             body = excluded.body, status = excluded.status, updated_at = excluded.updated_at,
             progress_at = excluded.progress_at, pending_at = excluded.pending_at,
             agent_id = excluded.agent_id",
    )?
    .execute(params![
        session.tenant.as_str(),
        session.session_key.as_str(),
        body,
        c.status,
        c.updated_at,
        c.progress_at,
        c.pending_at,
        c.agent_id,
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

/// Creates the run with `body`, its JSON; `false` when a run with that id already exists
/// (nothing written).
pub(crate) fn insert_run(conn: &Connection, run: &Run, body: &str) -> Result<bool> {
    let abort = match (run.abort_requested, run.abort_reason) {
        (false, _) => 0,
        (true, reason) => abort_column(reason.unwrap_or(AbortReason::Requested)),
    };
    let inserted = write_run(
        conn,
        run,
        body,
        abort,
        "INSERT INTO runs (tenant, run_id, body, session_key, session_seq, status, abort_requested)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (tenant, run_id) DO NOTHING",
    )?;
    Ok(inserted == 1)
}

/// Writes the run's body and status, creating the run if absent; never touches
/// `abort_requested`. A run's key and seq are fixed at accept, so an existing row keeps them
/// (and `runs_by_session` is not rewritten).
pub(crate) fn replace_run(conn: &Connection, run: &Run) -> Result<()> {
    replace_run_encoded(conn, run, &serde_json::to_string(run)?)
}

/// [`replace_run`] with the run's JSON already encoded (`body`: a checked commit's).
pub(crate) fn replace_run_encoded(conn: &Connection, run: &Run, body: &str) -> Result<()> {
    write_run(
        conn,
        run,
        body,
        0,
        "INSERT INTO runs (tenant, run_id, body, session_key, session_seq, status, abort_requested)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (tenant, run_id) DO UPDATE SET body = excluded.body, status = excluded.status",
    )?;
    Ok(())
}

/// Runs `sql`, an insert of a whole run row, with the run's key, `body` (its JSON) and
/// [`RunColumns`] bound to `?1`-`?6` and `abort` (the `abort_requested` of a new row) to `?7`;
/// the rows written.
fn write_run(conn: &Connection, run: &Run, body: &str, abort: i64, sql: &str) -> Result<usize> {
    let c = RunColumns::of(run);
    Ok(conn.prepare_cached(sql)?.execute(params![
        run.tenant.as_str(),
        run.run_id.as_str(),
        body,
        c.session_key,
        c.session_seq,
        c.status,
        abort,
    ])?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::{SessionId, SessionStatus};

    fn session(edit: impl FnOnce(&mut Session)) -> Session {
        let mut session = Session::new(
            TenantId::new("t"),
            SessionKey::new("k"),
            SessionId::generate(),
            100,
        );
        session.updated_at = 500;
        edit(&mut session);
        session
    }

    #[test]
    fn a_sessions_columns_are_what_its_indexes_and_filters_read() {
        let cases = [
            (
                "a new idle session: progress is its last update, main's, not pending",
                session(|_| {}),
                SessionColumns {
                    status: "idle",
                    updated_at: 500,
                    progress_at: 500,
                    pending_at: None,
                    agent_id: "main",
                },
            ),
            (
                "a running one that made progress before its last update",
                session(|s| {
                    s.status = SessionStatus::Processing;
                    s.last_progress_at = Some(300);
                    s.agent_id = Some("helper".to_owned());
                }),
                SessionColumns {
                    status: "processing",
                    updated_at: 500,
                    progress_at: 300,
                    pending_at: None,
                    agent_id: "helper",
                },
            ),
            (
                "one with pending work",
                session(|s| s.pending_at = Some(400)),
                SessionColumns {
                    status: "idle",
                    updated_at: 500,
                    progress_at: 500,
                    pending_at: Some(400),
                    agent_id: "main",
                },
            ),
            (
                "a time past i64 saturates as every other column does",
                session(|s| s.updated_at = u64::MAX),
                SessionColumns {
                    status: "idle",
                    updated_at: i64::MAX,
                    progress_at: i64::MAX,
                    pending_at: None,
                    agent_id: "main",
                },
            ),
        ];
        for (case, session, expected) in cases {
            assert_eq!(SessionColumns::of(&session), expected, "{case}");
        }
    }

    #[test]
    fn rewriting_a_session_rewrites_its_columns() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open(&dir.path().join("db.sqlite")).unwrap();
        let columns = |conn: &Connection| -> (String, i64, Option<i64>) {
            conn.query_row(
                "SELECT status, updated_at, pending_at FROM sessions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
        };
        let mut s = session(|s| s.pending_at = Some(400));
        save_session(&conn, &s).unwrap();
        assert_eq!(columns(&conn), ("idle".to_owned(), 500, Some(400)));
        s.status = SessionStatus::Processing;
        s.updated_at = 600;
        s.pending_at = None;
        save_session(&conn, &s).unwrap();
        assert_eq!(
            columns(&conn),
            ("processing".to_owned(), 600, None),
            "settled: out of the pending index"
        );
    }
}
