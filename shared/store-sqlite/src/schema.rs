//! Opening the database file: pragmas and idempotent, numbered migrations (`user_version`).
//!
//! Records are stored whole as JSON (`body`) next to the key columns they are found by, and
//! (sessions and runs, issue 26) copies of the fields their indexes and filters read, written
//! with the body ([`crate::records`]). Two things live outside the JSON because a different
//! writer owns them: a run's `abort_requested` (the API) and a lane message's delivery state
//! (the queue).
//!
//! Lane messages: `lane_pending` holds the unacked ones (so a receive scans only those);
//! `lane_done` remembers the dedup ids of acked ones.

use crate::error::{Error, Result};
use agentlane_core::StoreError;
use rusqlite::Connection;
use rusqlite::config::DbConfig;
use std::path::Path;
use std::time::Duration;

/// Migration `n` (1-based) brings the schema from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    V1,
    V2,
    crate::cron::SCHEMA,
    V4,
    crate::fair::SCHEMA,
    crate::api_keys::SCHEMA,
    PENDING_STEERS,
    PENDING_SESSIONS,
    crate::slots::SCHEMA,
    crate::agents::SCHEMA,
    ACTION_ANSWERS,
    crate::spend::SCHEMA,
    crate::slots::RATE_SCHEMA,
    crate::catalog::SCHEMA,
    crate::records::SCHEMA,
    crate::tenant_secrets::SCHEMA,
    crate::spend::CLEARED_SCHEMA,
];

/// The answer to a paused run's pending tool calls (issue 20): owned by the API and the
/// supervisor, like `abort_requested`, so no runner commit (which replaces `body`) changes it.
const ACTION_ANSWERS: &str = "
ALTER TABLE runs ADD COLUMN action_answer TEXT;
";

/// Sessions with pending work (issue 11), by the time it began waiting: the sweep's index of
/// idle sessions whose queued run may have lost its lane message. Partial: a session without
/// `pendingAt` is not in it.
const PENDING_SESSIONS: &str = "
CREATE INDEX sessions_pending ON sessions (json_extract(body, '$.pendingAt'))
    WHERE json_extract(body, '$.pendingAt') IS NOT NULL;
";

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

/// Splits `lane_messages` into pending messages and the dedup ids of acked ones, so that acked
/// messages kept for deduplication no longer slow down every receive.
const V2: &str = "
CREATE TABLE lane_pending (
    id            INTEGER PRIMARY KEY,
    lane          TEXT NOT NULL,
    dedup_id      TEXT NOT NULL UNIQUE,
    body          TEXT NOT NULL,
    visible_at    INTEGER NOT NULL DEFAULT 0,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt       TEXT,
    enqueued_at   INTEGER NOT NULL
);
CREATE TABLE lane_done (
    dedup_id TEXT PRIMARY KEY,
    done_at  INTEGER NOT NULL
);
INSERT INTO lane_pending (id, lane, dedup_id, body, visible_at, receive_count, receipt, enqueued_at)
    SELECT id, lane, dedup_id, body, visible_at, receive_count, receipt, enqueued_at
    FROM lane_messages WHERE done = 0;
INSERT OR IGNORE INTO lane_done (dedup_id, done_at)
    SELECT dedup_id, COALESCE(done_at, 0) FROM lane_messages WHERE done = 1;
DROP TABLE lane_messages;
CREATE INDEX lane_pending_by_lane ON lane_pending (lane, id);
CREATE INDEX lane_done_by_time ON lane_done (done_at);
";

/// Failed deliveries per pending message, and the dead-letter table (SPEC §10): a message whose
/// deliveries kept failing leaves its lane for `lane_dead`, where the sweep reconciles its run.
const V4: &str = "
ALTER TABLE lane_pending ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
CREATE TABLE lane_dead (
    id            INTEGER PRIMARY KEY,
    lane          TEXT NOT NULL,
    dedup_id      TEXT NOT NULL,
    body          TEXT NOT NULL,
    receive_count INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    reason        TEXT NOT NULL,
    dead_at       INTEGER NOT NULL
);
CREATE INDEX sessions_processing ON sessions (json_extract(body, '$.status'))
    WHERE json_extract(body, '$.status') = 'processing';
";

/// Steer messages waiting for the running run of their session (SPEC §4 `steer`): one row per
/// run accepted in `steer` mode, found by the carrier with one indexed read, deleted when taken.
const PENDING_STEERS: &str = "
CREATE TABLE pending_steers (
    tenant      TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_seq INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    PRIMARY KEY (tenant, session_key, session_seq)
);
";

/// WAL pages after which a commit checkpoints itself (the checkpoint thread normally keeps the
/// WAL well below this).
const WRITER_AUTOCHECKPOINT_PAGES: i64 = 8192;

/// Size the WAL file is cut back to after a checkpoint let it restart.
const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

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
    plan_once(&conn)?;
    // Checkpoints run on the backend's checkpoint thread, not inside a commit. Under writes
    // without pause that thread never sees the WAL fully copied (new frames keep coming), so a
    // commit still checkpoints, as SQLite does by default, once the WAL passes this many pages
    // (mostly copied already by then); the file is cut back to the size limit afterwards.
    conn.pragma_update(None, "wal_autocheckpoint", WRITER_AUTOCHECKPOINT_PAGES)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES)?;
    // Every write runs in its own savepoint inside the writer's group transaction, so SQLite
    // copies each page a write first touches into the statement sub-journal. That journal
    // spills to a temporary file past 64 KiB (created anew in each group transaction, a
    // `pwrite` per page: 65 write syscalls per turn of `bench --http` against 35 in memory). In
    // memory it holds at most one write's pages: it is emptied when that write's savepoint ends.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Another connection to the database [`open`] prepared (WAL, schema up to date), for reads and
/// checkpoints.
pub(crate) fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    plan_once(&conn)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    // A small page cache each: the writer's holds the hot pages, the OS caches the file.
    conn.pragma_update(None, "cache_size", -512)?;
    // No `mmap_size`: a connection that sees another's write drops its page cache and unmaps
    // its whole mapping of the file at the start of its next read, so under writes every read
    // paid a `munmap` (a TLB shootdown on every core), a new `mmap` and a page fault per page;
    // the hot pages are in the WAL, read by `pread` either way. In a profile of `bench --http`
    // (stop 36) the reads' share fell by about 40 % without the mapping: the run read 4.7 → 2.8
    // % of samples, the transcript read 9.9 → 5.6 %.
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// A cached statement keeps the plan it was prepared with. The bundled SQLite is built with
/// STAT4, which otherwise re-prepares a statement whenever a bound value (here: the current time,
/// different at every call) might change its plan; the lane queue's receive was re-parsed and
/// re-planned on every call.
fn plan_once(conn: &Connection) -> Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
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
    fn no_connection_maps_the_file_and_the_writer_journals_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let writer = open(&path).unwrap();
        let reader = open_reader(&path).unwrap();
        let mmap = |c: &Connection| -> i64 {
            c.pragma_query_value(None, "mmap_size", |row| row.get(0))
                .unwrap()
        };
        assert_eq!(mmap(&reader), 0);
        assert_eq!(mmap(&writer), 0);
        let temp_store: i64 = writer
            .pragma_query_value(None, "temp_store", |row| row.get(0))
            .unwrap();
        assert_eq!(temp_store, 2, "the writer's sub-journal stays in memory");
        writer
            .execute(
                "INSERT INTO sessions (tenant, session_key, body) VALUES ('t', 'k', '{}')",
                [],
            )
            .unwrap();
        let seen: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
            .unwrap();
        assert_eq!(seen, 1, "a mapped reader sees the writer's commit");
    }

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
    fn version_1_lane_messages_migrate_to_pending_and_done() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(V1).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute_batch(
                "INSERT INTO lane_messages (id, lane, dedup_id, body, done, visible_at,
                                            receive_count, receipt, enqueued_at, done_at)
                 VALUES (1, 'a', 'acked', '{}', 1, 0, 1, NULL, 10, 20),
                        (2, 'a', 'in-flight', '{}', 0, 99, 1, '2:r', 11, NULL),
                        (3, 'b', 'queued', '{}', 0, 0, 0, NULL, 12, NULL);",
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        let pending: Vec<(i64, String, i64, Option<String>)> = conn
            .prepare("SELECT id, dedup_id, visible_at, receipt FROM lane_pending ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            pending,
            vec![
                (2, "in-flight".to_owned(), 99, Some("2:r".to_owned())),
                (3, "queued".to_owned(), 0, None)
            ]
        );
        let done: Vec<(String, i64)> = conn
            .prepare("SELECT dedup_id, done_at FROM lane_done")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(done, vec![("acked".to_owned(), 20)]);
    }

    /// A session of tenant `t` as `save_session` wrote it before migration 15.
    fn old_session(
        key: &str,
        updated_at: u64,
        edit: impl FnOnce(&mut agentlane_core::Session),
    ) -> agentlane_core::Session {
        let mut session = agentlane_core::Session::new(
            agentlane_core::TenantId::new("t"),
            agentlane_core::SessionKey::new(key),
            agentlane_core::SessionId::generate(),
            100,
        );
        session.updated_at = updated_at;
        edit(&mut session);
        session
    }

    #[tokio::test]
    async fn version_14_sessions_and_runs_are_listed_and_swept_after_their_fields_become_columns() {
        use agentlane_core::{
            PageBudget, ProcessingIndex, RunStatus, SessionCatalog, SessionFilter,
            SessionRetention, SessionStatus, Store,
        };
        use std::sync::Arc;
        // GIVEN a database at version 14 with sessions and runs written the old way (the body
        // alone, found through the JSON expression indexes)
        let template = {
            let store: Arc<dyn Store> = Arc::new(crate::SqliteBackend::open_temporary().unwrap());
            let (tenant, key, now) = agentlane_conformance::fixtures::fresh();
            agentlane_conformance::fixtures::accept(&store, &tenant, &key, now).await
        };
        let sessions = [
            old_session("idle-old", 1_000, |_| {}),
            old_session("busy", 5_000, |s| {
                s.status = SessionStatus::Processing;
                s.last_progress_at = Some(2_000);
                s.agent_id = Some("helper".to_owned());
            }),
            old_session("busy-fresh", 4_000, |s| {
                s.status = SessionStatus::Processing
            }),
            old_session("waiting", 3_000, |s| s.pending_at = Some(2_500)),
        ];
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join(crate::DB_FILE_NAME)).unwrap();
            for sql in &MIGRATIONS[..14] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 14).unwrap();
            for session in &sessions {
                conn.execute(
                    "INSERT INTO sessions (tenant, session_key, body) VALUES ('t', ?1, ?2)",
                    rusqlite::params![
                        session.session_key.as_str(),
                        serde_json::to_string(session).unwrap()
                    ],
                )
                .unwrap();
            }
            for (seq, status) in [
                (1, RunStatus::Ok),
                (2, RunStatus::Error),
                (3, RunStatus::Running),
            ] {
                let mut run = template.clone();
                run.tenant = agentlane_core::TenantId::new("t");
                run.session_key = agentlane_core::SessionKey::new("busy");
                run.run_id = agentlane_core::RunId::generate();
                run.session_seq = seq;
                run.status = status;
                conn.execute(
                    "INSERT INTO runs (tenant, run_id, body, abort_requested) VALUES ('t', ?1, ?2, 0)",
                    rusqlite::params![run.run_id.as_str(), serde_json::to_string(&run).unwrap()],
                )
                .unwrap();
            }
        }

        // WHEN this build opens it
        let backend = crate::SqliteBackend::open(dir.path()).unwrap();

        // THEN the catalog, the sweeps and the retention find the old rows as before
        let tenant = agentlane_core::TenantId::new("t");
        let budget = PageBudget::count(10);
        let listed = |filter: SessionFilter| {
            let backend = backend.clone();
            let tenant = tenant.clone();
            async move {
                let page = backend
                    .list_sessions(&tenant, &filter, None, budget)
                    .await
                    .unwrap();
                page.sessions
                    .iter()
                    .map(|s| s.session_key.as_str().to_owned())
                    .collect::<Vec<_>>()
            }
        };
        let keys = |sessions: &[agentlane_core::Session]| -> Vec<String> {
            sessions
                .iter()
                .map(|s| s.session_key.as_str().to_owned())
                .collect()
        };
        assert_eq!(
            listed(SessionFilter::default()).await,
            ["busy", "busy-fresh", "waiting", "idle-old"],
            "newest activity first"
        );
        let by_agent = |agent: &str| SessionFilter {
            agent_id: Some(agent.to_owned()),
            status: None,
        };
        assert_eq!(listed(by_agent("helper")).await, ["busy"]);
        assert_eq!(
            listed(by_agent("main")).await,
            ["busy-fresh", "waiting", "idle-old"],
            "a session naming no agent is main's"
        );
        let processing = SessionFilter {
            agent_id: None,
            status: Some(SessionStatus::Processing),
        };
        assert_eq!(listed(processing).await, ["busy", "busy-fresh"]);
        let runs = backend
            .list_session_runs(
                &tenant,
                &agentlane_core::SessionKey::new("busy"),
                None,
                None,
                budget,
            )
            .await
            .unwrap();
        let seqs: Vec<u64> = runs.runs.iter().map(|r| r.session_seq).collect();
        assert_eq!(seqs, [3, 2, 1]);
        let ok_runs = backend
            .list_session_runs(
                &tenant,
                &agentlane_core::SessionKey::new("busy"),
                Some(RunStatus::Ok),
                None,
                budget,
            )
            .await
            .unwrap();
        assert_eq!(ok_runs.runs.len(), 1);
        assert_eq!(ok_runs.runs[0].session_seq, 1);
        assert_eq!(
            keys(&backend.processing_sessions(2_500, 10).await.unwrap()),
            ["busy"],
            "silent since its last progress (2000), though updated at 5000"
        );
        assert_eq!(
            keys(&backend.processing_sessions(4_000, 10).await.unwrap()),
            ["busy", "busy-fresh"],
            "the longest silent first"
        );
        assert_eq!(
            keys(&backend.pending_sessions(3_000, 10).await.unwrap()),
            ["waiting"]
        );
        assert!(
            backend
                .pending_sessions(2_499, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            keys(&backend.stale_sessions(&tenant, 3_001, 10).await.unwrap()),
            ["idle-old", "waiting"],
            "oldest activity first"
        );
    }

    #[test]
    fn a_cached_statement_keeps_its_plan_when_its_bound_values_change() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db.sqlite")).unwrap();
        conn.execute_batch(
            "INSERT INTO lane_pending (lane, dedup_id, body, visible_at, enqueued_at)
             VALUES ('a', 'd1', '{}', 5, 1), ('b', 'd2', '{}', 50, 1);",
        )
        .unwrap();
        // The lane queue's receive binds the current time, different at every call.
        let sql = "SELECT m.id FROM lane_pending m
                   WHERE m.visible_at <= ?1
                     AND m.id = (SELECT MIN(h.id) FROM lane_pending h WHERE h.lane = m.lane)
                   ORDER BY m.id LIMIT ?2";
        for now in 0..20_i64 {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            let ids: Vec<i64> = stmt
                .query_map(rusqlite::params![now * 3, 10], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert_eq!(
                ids.len(),
                usize::from(now * 3 >= 5) + usize::from(now * 3 >= 50)
            );
        }
        let stmt = conn.prepare_cached(sql).unwrap();
        assert_eq!(
            stmt.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "the statement was parsed and planned again"
        );
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
