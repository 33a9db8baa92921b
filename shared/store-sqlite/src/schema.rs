//! Opening the database file: pragmas and idempotent, numbered migrations (`user_version`).
//!
//! Records are stored whole as JSON (`body`) next to the key columns they are found by. Two
//! fields live outside the JSON because a different writer owns them: a run's `abort_requested`
//! (the API) and a lane message's delivery state (the queue).

use crate::error::{Error, Result};
use agentlane_core::StoreError;
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;

/// Migration `n` (1-based) brings the schema from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[V1];

const V1: &str = "
CREATE TABLE sessions (
    tenant      TEXT NOT NULL,
    session_key TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (tenant, session_key)
);
CREATE TABLE runs (
    tenant          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    body            TEXT NOT NULL,
    abort_requested INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, run_id)
);
CREATE TABLE idempotency (
    tenant     TEXT NOT NULL,
    idem_key   TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, idem_key)
);
CREATE TABLE transcript (
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);
CREATE TABLE events (
    tenant TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (tenant, run_id, seq)
);
CREATE TABLE lane_messages (
    id            INTEGER PRIMARY KEY,
    lane          TEXT NOT NULL,
    dedup_id      TEXT NOT NULL UNIQUE,
    body          TEXT NOT NULL,
    done          INTEGER NOT NULL DEFAULT 0,
    visible_at    INTEGER NOT NULL DEFAULT 0,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt       TEXT,
    enqueued_at   INTEGER NOT NULL,
    done_at       INTEGER
);
CREATE INDEX lane_messages_pending ON lane_messages (lane, id) WHERE done = 0;
CREATE INDEX lane_messages_done ON lane_messages (done_at) WHERE done = 1;
";

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// Opens (creating if needed) the database at `path` in WAL mode and brings its schema up to
/// date.
pub(crate) fn open(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Store(StoreError::Unavailable(format!(
            "{} cannot use WAL (journal mode stays {mode})",
            path.display()
        ))));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn, path)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let version = usize::try_from(version).unwrap_or(usize::MAX);
    if version > SCHEMA_VERSION {
        return Err(Error::Store(StoreError::Unavailable(format!(
            "{} has schema version {version}; this build knows up to {SCHEMA_VERSION}",
            path.display()
        ))));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index + 1)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn reopening_keeps_the_schema_and_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        {
            let conn = open(&path).unwrap();
            conn.execute(
                "INSERT INTO sessions (tenant, session_key, body) VALUES ('t', 'k', '{}')",
                [],
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION as i64);
        let count: i64 = conn
            .query_row("SELECT COUNT(*) FROM sessions", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 1);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        {
            let conn = open(&path).unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
                .unwrap();
        }
        let err = open(&path).unwrap_err();
        assert!(
            matches!(&err, Error::Store(StoreError::Unavailable(m)) if m.contains("schema version")),
            "{err:?}"
        );
    }
}
