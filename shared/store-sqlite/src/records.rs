//! Reading and writing whole session and run records (JSON bodies) by key. All functions run
//! inside the caller's transaction.
//!
//! The fields the indexes and list filters read are copied out of the body into columns of
//! their own when the record is written ([`SessionColumns`], [`RunColumns`]), so no write
//! parses the JSON again to maintain an index (issue 26).

use crate::error::{Result, int};
use agentlane_core::{
    AbortReason, MAIN_AGENT, Run, RunId, RunProgress, RunStatus, Session, SessionKey, TenantId,
};
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
///
/// An existing row gets its body and only the columns whose value changed: SQLite rewrites the
/// entries of every index whose columns an `UPDATE` names, changed or not, and a session is
/// saved several times a turn (taking its lock changes none of its columns). Measured on a WAL
/// (stop 37): an update naming every column, all unchanged, wrote three pages; the body alone, one.
pub(crate) fn save_session(conn: &Connection, session: &Session) -> Result<()> {
    let body = serde_json::to_string(session)?;
    let new = SessionColumns::of(session);
    let stored = conn
        .prepare_cached(
            "SELECT status, updated_at, progress_at, pending_at, agent_id FROM sessions
             WHERE tenant = ?1 AND session_key = ?2",
        )?
        .query_row(
            params![session.tenant.as_str(), session.session_key.as_str()],
            |row| {
                Ok(StoredColumns {
                    status: row.get(0)?,
                    updated_at: row.get(1)?,
                    progress_at: row.get(2)?,
                    pending_at: row.get(3)?,
                    agent_id: row.get(4)?,
                })
            },
        )
        .optional()?;
    let Some(stored) = stored else {
        conn.prepare_cached(
            "INSERT INTO sessions (tenant, session_key, body,
                                   status, updated_at, progress_at, pending_at, agent_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            session.tenant.as_str(),
            session.session_key.as_str(),
            body,
            new.status,
            new.updated_at,
            new.progress_at,
            new.pending_at,
            new.agent_id,
        ])?;
        return Ok(());
    };
    let changed = stored.changed(&new);
    let names: Vec<&str> = changed.iter().map(|(name, _)| *name).collect();
    let (tenant, key) = (session.tenant.as_str(), session.session_key.as_str());
    let mut values: Vec<&dyn rusqlite::ToSql> = vec![&body];
    values.extend(changed.iter().map(|(_, value)| *value));
    values.push(&tenant);
    values.push(&key);
    conn.prepare_cached(&update_session_sql(&names))?
        .execute(values.as_slice())?;
    Ok(())
}

/// A stored session row's columns as they are (any may be `NULL` in a row no write of this
/// build touched).
#[derive(Debug, Default, PartialEq, Eq)]
struct StoredColumns {
    status: Option<String>,
    updated_at: Option<i64>,
    progress_at: Option<i64>,
    pending_at: Option<i64>,
    agent_id: Option<String>,
}

impl StoredColumns {
    /// The columns whose value in `new` differs from the stored one, each with its new value,
    /// in [`SessionColumns`]' order.
    fn changed<'a>(
        &self,
        new: &'a SessionColumns<'_>,
    ) -> Vec<(&'static str, &'a dyn rusqlite::ToSql)> {
        let columns: [(&'static str, bool, &'a dyn rusqlite::ToSql); 5] = [
            (
                "status",
                self.status.as_deref() != Some(new.status),
                &new.status,
            ),
            (
                "updated_at",
                self.updated_at != Some(new.updated_at),
                &new.updated_at,
            ),
            (
                "progress_at",
                self.progress_at != Some(new.progress_at),
                &new.progress_at,
            ),
            // `NULL` stored and `None` written are the same value.
            (
                "pending_at",
                self.pending_at != new.pending_at,
                &new.pending_at,
            ),
            (
                "agent_id",
                self.agent_id.as_deref() != Some(new.agent_id),
                &new.agent_id,
            ),
        ];
        columns
            .into_iter()
            .filter(|(_, differs, _)| *differs)
            .map(|(name, _, value)| (name, value))
            .collect()
    }
}

/// The `UPDATE` of a session row's body (`?1`) and `changed` columns (`?2`…, in that order),
/// keyed by the two parameters after them.
fn update_session_sql(changed: &[&str]) -> String {
    let mut sql = String::from("UPDATE sessions SET body = ?1");
    for (i, column) in changed.iter().enumerate() {
        sql.push_str(&format!(", {column} = ?{}", i + 2));
    }
    let n = changed.len() + 2;
    sql.push_str(&format!(
        " WHERE tenant = ?{n} AND session_key = ?{}",
        n + 1
    ));
    sql
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

/// The run's progress from its `status` column and the presence of `intoRunId` in its body
/// (SQLite's JSON parser, no decoding into a [`Run`]): `None` when there is no such run,
/// `Some(None)` when the column does not hold a status (read the whole run instead).
pub(crate) fn load_run_progress(
    conn: &Connection,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Option<Option<RunProgress>>> {
    let row: Option<(Option<String>, bool)> = conn
        .prepare_cached(
            "SELECT status, json_extract(body, '$.intoRunId') IS NOT NULL FROM runs
             WHERE tenant = ?1 AND run_id = ?2",
        )?
        .query_row(params![tenant.as_str(), run_id.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    Ok(row.map(|(status, carried)| {
        let status = status.as_deref().and_then(RunStatus::parse)?;
        Some(RunProgress { status, carried })
    }))
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

    #[test]
    fn a_session_update_names_only_the_columns_whose_value_changed() {
        let stored = StoredColumns {
            status: Some("idle".to_owned()),
            updated_at: Some(500),
            progress_at: Some(500),
            pending_at: Some(400),
            agent_id: Some("main".to_owned()),
        };
        let cases: [(&str, Session, Vec<&str>); 5] = [
            (
                "the lock taken: no column changes",
                session(|s| {
                    s.pending_at = Some(400);
                    s.lock_owner = Some("runner".to_owned());
                    s.fence = 9;
                }),
                vec![],
            ),
            (
                "the run starts",
                session(|s| {
                    s.status = SessionStatus::Processing;
                    s.updated_at = 600;
                    s.last_progress_at = Some(600);
                }),
                vec!["status", "updated_at", "progress_at", "pending_at"],
            ),
            (
                "another agent",
                session(|s| {
                    s.pending_at = Some(400);
                    s.agent_id = Some("helper".to_owned());
                }),
                vec!["agent_id"],
            ),
            (
                "pending again later",
                session(|s| s.pending_at = Some(450)),
                vec!["pending_at"],
            ),
            (
                "progress before the last update",
                session(|s| {
                    s.pending_at = Some(400);
                    s.last_progress_at = Some(300);
                }),
                vec!["progress_at"],
            ),
        ];
        let names = |stored: &StoredColumns, session: &Session| -> Vec<&'static str> {
            let new = SessionColumns::of(session);
            stored
                .changed(&new)
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        for (case, session, expected) in cases {
            assert_eq!(names(&stored, &session), expected, "{case}");
        }
        let unset = names(&StoredColumns::default(), &session(|_| {}));
        assert_eq!(
            unset,
            ["status", "updated_at", "progress_at", "agent_id"],
            "a row no write of this build touched gets every column (pending stays NULL)"
        );
        assert_eq!(
            update_session_sql(&[]),
            "UPDATE sessions SET body = ?1 WHERE tenant = ?2 AND session_key = ?3"
        );
        assert_eq!(
            update_session_sql(&["status", "pending_at"]),
            "UPDATE sessions SET body = ?1, status = ?2, pending_at = ?3 \
             WHERE tenant = ?4 AND session_key = ?5"
        );
    }

    #[test]
    fn saving_a_session_whose_columns_did_not_change_writes_its_row_page_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let conn = crate::schema::open(&path).unwrap();
        // Pages written by one save: the WAL's growth in frames (a 24-byte header and a page).
        let pages_written_by = |s: &Session| -> u64 {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            save_session(&conn, s).unwrap();
            let wal = std::fs::metadata(path.with_extension("sqlite-wal")).unwrap();
            (wal.len() - 32) / (4096 + 24)
        };
        let mut s = session(|s| s.pending_at = Some(400));
        save_session(&conn, &s).unwrap();
        // Taking the lock changes the body only.
        s.lock_owner = Some("runner".to_owned());
        s.fence += 1;
        assert_eq!(pages_written_by(&s), 1, "the row's page; no index page");
        let body: String = conn
            .query_row("SELECT body FROM sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Session>(&body).unwrap().fence,
            s.fence
        );
        // A new activity time moves the session in the activity index: two pages.
        s.updated_at += 1;
        s.last_progress_at = Some(400);
        assert_eq!(
            pages_written_by(&s),
            2,
            "the row's and the activity index's"
        );
    }
}
