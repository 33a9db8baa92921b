//! `SqliteBackend`: one database file; the writer connection on its own thread, where the
//! writes that arrive together share one transaction ([`crate::writer`]); a small pool of
//! reader connections (WAL lets readers run beside the writer), each behind its own mutex; WAL
//! checkpoints on a background thread.
//!
//! Reads run on the caller's thread, not on tokio's blocking pool: a read is one short query on
//! a database in the page cache (tens of microseconds), far less than the cost of handing it to
//! another thread and waking the task again. Writes go to the writer thread, so a tokio worker
//! never parks waiting for the writer. The slowest step, the checkpoint that copies the WAL back
//! into the database and syncs, runs on its own thread instead of inside some commit.

use crate::error::{Error, Result};
use crate::schema;
use crate::writer::Writer;
use agentlane_core::{Clock, StoreError, SystemClock};
use rusqlite::Connection;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::Notify;

/// The database file's name inside the data directory.
pub const DB_FILE_NAME: &str = "agentlane.sqlite3";

/// The embedded backend: implements both [`Store`](agentlane_core::Store) and
/// [`LaneQueue`](agentlane_core::LaneQueue) on one SQLite database (WAL, `synchronous=NORMAL`).
/// Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct SqliteBackend {
    pub(crate) inner: Arc<Inner>,
}

/// Reader connections: enough for the runtime's worker threads plus the odd blocking caller.
const READERS: usize = 4;

/// How often the background thread checkpoints the WAL into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

pub(crate) struct Inner {
    /// Every write runs on the writer thread's connection (SQLite has one writer at a time).
    writer: Writer,
    /// Reads (a consistent WAL snapshot each) run on these when the writer is busy.
    readers: Vec<Mutex<Connection>>,
    /// Where the next read starts looking for a free reader.
    next_reader: AtomicUsize,
    /// Stops the checkpoint thread when dropped (then it is joined).
    checkpointer: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    /// Wall time for the queue's visibility timeouts.
    pub(crate) clock: Arc<dyn Clock>,
    /// Woken when a message may have become deliverable to an idle receiver (enqueue, hand-back).
    pub(crate) wakeup: Notify,
    /// Acks so far (done messages are pruned every so many).
    pub(crate) acks: AtomicU64,
    /// Failed deliveries after which a message is dead-lettered (see
    /// [`SqliteBackend::set_max_failed_deliveries`]).
    pub(crate) max_failed_deliveries: AtomicU32,
    /// Whether an accept also queues its run's lane message, in its own transaction (see
    /// [`SqliteBackend::queue_accepted_turns`]).
    pub(crate) queue_on_accept: AtomicBool,
    /// The owner prefix and lease (ms) of the session locks `receive` takes for what it
    /// delivers (see [`SqliteBackend::lock_on_receive`]); `None`: it takes none.
    pub(crate) lock_on_receive: Mutex<Option<(Arc<str>, u64)>>,
    /// The queue's fair dispatch across tenants (taken inside the receive's write).
    pub(crate) fair: Arc<Mutex<crate::fair::FairState>>,
    /// Runs this process accepted, given to their first pickup without a read.
    pub(crate) accepted: Arc<crate::accepted::Accepted>,
    /// The queue's last empty look and the changes since (a receive skips a look that could
    /// only find nothing again).
    pub(crate) looks: crate::looks::Looks,
    path: PathBuf,
    /// Keeps a temporary database's directory alive; declared after the connections so they are
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
        let writer = schema::open(&path).map_err(StoreError::from)?;
        let readers = (0..READERS)
            .map(|_| schema::open_reader(&path).map(Mutex::new))
            .collect::<Result<Vec<_>>>()
            .map_err(StoreError::from)?;
        let checkpointer = start_checkpointer(&path).map_err(StoreError::from)?;
        Ok(Self {
            inner: Arc::new(Inner {
                writer: Writer::start(writer).map_err(StoreError::from)?,
                readers,
                next_reader: AtomicUsize::new(0),
                checkpointer: Some(checkpointer),
                clock,
                wakeup: Notify::new(),
                acks: AtomicU64::new(0),
                max_failed_deliveries: AtomicU32::new(crate::lane_table::MAX_FAILED_DELIVERIES),
                queue_on_accept: AtomicBool::new(false),
                lock_on_receive: Mutex::new(None),
                fair: Arc::new(Mutex::new(crate::fair::FairState::default())),
                accepted: Arc::default(),
                looks: crate::looks::Looks::default(),
                path,
                _temp: temp,
            }),
        })
    }

    /// Makes this backend the lane queue of the turns it accepts: `accept_turn` then writes a
    /// created run's lane message in the accept's own transaction (one commit instead of two,
    /// and no accepted run without its message even across a crash), and the API no longer
    /// enqueues it ([`TurnIntake::queues_accepted_turns`](agentlane_core::TurnIntake::queues_accepted_turns)).
    /// Only for a deployment whose lane queue is this same backend (or a clone of it); off by
    /// default.
    pub fn queue_accepted_turns(&self) {
        self.inner.queue_on_accept.store(true, Ordering::Relaxed);
    }

    /// Makes `receive` take the session lock of each message it delivers, in the same write
    /// (owner `{owner}:{random}`, for `lease`), and hand it to the runner on the delivery
    /// ([`Delivery::lock`](agentlane_core::Delivery::lock)): one write per turn fewer, the
    /// lock acquired exactly as [`SessionLock::acquire_lock`](agentlane_core::SessionLock)
    /// would (a live lock is left to its holder, and the runner then acquires as usual). Only
    /// for a deployment whose runners use this same backend (or a clone) as their store, and
    /// release or use every lock they are given; off by default.
    pub fn lock_on_receive(&self, owner: &str, lease: std::time::Duration) {
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        *self
            .inner
            .lock_on_receive
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Arc::from(owner), lease_ms));
    }

    /// Writes sent to the writer thread so far.
    #[cfg(test)]
    pub(crate) fn writes_sent(&self) -> u64 {
        self.inner.writer.writes_sent()
    }

    /// The database file.
    pub fn database_path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `work` (one write: atomic by itself, in a savepoint when it makes several changes)
    /// on the writer thread; answers once it has committed.
    pub(crate) async fn with_conn<T, E>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error>,
    {
        self.inner.writer.write(work).await.map_err(E::from)
    }

    /// [`with_conn`](Self::with_conn) for a write that may delete lane messages (a session's or
    /// a tenant's): counted as a queue change ([`crate::looks`]), as it may free a tenant's
    /// in-flight slot.
    pub(crate) async fn with_conn_changing_queue<T, E>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error>,
    {
        let result = self.with_conn(work).await;
        self.inner.looks.changed();
        result
    }

    /// Runs `work` (reads only) on a free reader connection.
    pub(crate) async fn with_reader<T, E>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T>,
    ) -> std::result::Result<T, E>
    where
        E: From<Error>,
    {
        let conn = self.inner.reader();
        work(&conn).map_err(E::from)
    }
}

impl Inner {
    /// The connection for a read: a free reader, else the next reader in turn.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        for i in 0..n {
            if let Ok(conn) = self.readers[(start + i) % n].try_lock() {
                return conn;
            }
        }
        self.readers[start % n]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.checkpointer.take() {
            drop(stop);
            let _ = thread.join();
        }
    }
}

/// The thread that checkpoints the WAL every [`CHECKPOINT_EVERY`] (`PASSIVE`: it never waits
/// for, nor blocks, the writer or the readers) until its channel closes.
fn start_checkpointer(path: &Path) -> Result<(mpsc::Sender<()>, JoinHandle<()>)> {
    let conn = schema::open_reader(path)?;
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY)
            {
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                }
            }
            // One last pass so a clean shutdown leaves little WAL behind.
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        })
        .map_err(|e| {
            Error::Store(StoreError::Unavailable(format!(
                "cannot start the checkpoint thread: {e}"
            )))
        })?;
    Ok((stop, thread))
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
