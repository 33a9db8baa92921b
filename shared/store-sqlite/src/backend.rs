//! `SqliteBackend`: one database file, one connection behind a mutex, blocking work on tokio's
//! blocking pool.

use crate::error::{Error, Result};
use crate::schema;
use agentlane_core::{Clock, StoreError, SystemClock};
use rusqlite::Connection;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// The database file's name inside the data directory.
pub const DB_FILE_NAME: &str = "agentlane.sqlite3";

/// The embedded backend: implements both [`Store`](agentlane_core::Store) and
/// [`LaneQueue`](agentlane_core::LaneQueue) on one SQLite database (WAL, `synchronous=NORMAL`).
/// Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct SqliteBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    conn: Mutex<Connection>,
    /// Wall time for the queue's visibility timeouts.
    pub(crate) clock: Arc<dyn Clock>,
    /// Woken whenever a message may have become deliverable (enqueue, ack, hand-back).
    pub(crate) wakeup: Notify,
    /// Acks so far (done messages are pruned every so many).
    pub(crate) acks: AtomicU64,
    /// Failed deliveries after which a message is dead-lettered (see
    /// [`SqliteBackend::set_max_failed_deliveries`]).
    pub(crate) max_failed_deliveries: AtomicU32,
    /// The queue's fair dispatch across tenants (taken with the connection held).
    pub(crate) fair: Mutex<crate::fair::FairState>,
    path: PathBuf,
    /// Keeps a temporary database's directory alive; declared after `conn` so the connection is
    /// closed before the directory is removed.
    _temp: Option<tempfile::TempDir>,
}

impl SqliteBackend {
    /// Opens (or creates) `dir/agentlane.sqlite3`, creating `dir` if needed.
    pub fn open(dir: &Path) -> std::result::Result<Self, StoreError> {
        Self::open_with_clock(dir, Arc::new(SystemClock))
    }

    /// Like [`open`](Self::open), with the clock the queue reads wall time from.
    pub fn open_with_clock(
        dir: &Path,
        clock: Arc<dyn Clock>,
    ) -> std::result::Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
        let path = dir.join(DB_FILE_NAME);
        make_private(dir, &path)?;
        Self::build(path, clock, None)
    }

    /// A backend on a fresh database in a new temporary directory, removed when the last clone
    /// is dropped. For tests and benchmarks.
    pub fn open_temporary() -> std::result::Result<Self, StoreError> {
        let temp = tempfile::Builder::new()
            .prefix("agentlane-")
            .tempdir()
            .map_err(|e| StoreError::Unavailable(format!("cannot create a temp dir: {e}")))?;
        let path = temp.path().join(DB_FILE_NAME);
        Self::build(path, Arc::new(SystemClock), Some(temp))
    }

    fn build(
        path: PathBuf,
        clock: Arc<dyn Clock>,
        temp: Option<tempfile::TempDir>,
    ) -> std::result::Result<Self, StoreError> {
        let conn = schema::open(&path).map_err(StoreError::from)?;
        Ok(Self {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                clock,
                wakeup: Notify::new(),
                acks: AtomicU64::new(0),
                max_failed_deliveries: AtomicU32::new(crate::lane_table::MAX_FAILED_DELIVERIES),
                fair: Mutex::new(crate::fair::FairState::default()),
                path,
                _temp: temp,
            }),
        })
    }

    /// The database file.
    pub fn database_path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `work` with the connection on the blocking pool.
    pub(crate) async fn with_conn<T, E>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error>,
    {
        let inner = self.inner.clone();
        let joined = tokio::task::spawn_blocking(move || {
            // A panic while holding the lock left no open transaction behind (a dropped
            // `Transaction` rolls back), so a poisoned connection is still consistent.
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            work(&mut conn)
        })
        .await;
        match joined {
            Ok(result) => result.map_err(E::from),
            Err(e) => Err(E::from(Error::Task(format!("sqlite task failed: {e}")))),
        }
    }
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// The data directory (0700) and the database file (0600) are the user's alone: transcripts are
/// private. SQLite gives its `-wal` and `-shm` files the database file's permissions.
fn make_private(dir: &Path, db: &Path) -> std::result::Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let fail = |what: &Path, e: std::io::Error| {
            StoreError::Unavailable(format!("cannot make {} private: {e}", what.display()))
        };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| fail(dir, e))?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(db)
            .map_err(|e| fail(db, e))?;
        std::fs::set_permissions(db, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| fail(db, e))?;
    }
    #[cfg(not(unix))]
    let _ = (dir, db);
    Ok(())
}
