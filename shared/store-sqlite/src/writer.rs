//! The writer thread: every write of the backend runs here, on the one writer connection, and
//! the writes that arrive together share one transaction (group commit).
//!
//! Why: SQLite has one writer at a time, so writes queue anyway. When they queued on a mutex,
//! each waiter parked a tokio worker thread (the runtime has one per core), the lock passed
//! between threads at every write, and every write paid its own `COMMIT` (WAL frames for each
//! page it touched, the WAL index update). Here the tokio threads never block: a write is sent
//! to this thread and awaited. The thread takes whatever is waiting (up to [`MAX_GROUP`]),
//! runs each write in its own savepoint inside one `BEGIN IMMEDIATE`, commits once, and only
//! then answers them, so no caller ever sees a write that could still be lost. A write that
//! fails rolls back to its savepoint alone; the others still commit.
//!
//! A write whose caller has gone away (its future was dropped) before the thread reached it is
//! not run at all, as it would not have been before.

use crate::error::{Error, Result};
use agentlane_core::StoreError;
use rusqlite::Connection;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread::{JoinHandle, ThreadId};
use tokio::sync::oneshot;

/// The most writes one transaction takes.
pub(crate) const MAX_GROUP: usize = 64;

/// What the thread does with a write once its group's transaction has ended: answer the
/// caller, given the commit's error if it failed.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// One write: runs on the writer connection (`Some`), or is refused without running (`None`,
/// with the reason) when no transaction could be opened; `None` from the job itself means its
/// caller has gone and it did not run.
type Job = Box<dyn FnOnce(std::result::Result<&mut Connection, &str>) -> Option<Answer> + Send>;

/// The sending side of the writer thread; dropping it stops the thread (after the writes
/// already sent).
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    /// Writes sent so far (tests only: no counter on the write path).
    #[cfg(test)]
    sent: std::sync::atomic::AtomicU64,
    thread: Option<JoinHandle<()>>,
    thread_id: ThreadId,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub(crate) fn start(conn: Connection) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(conn, &queue))
            .map_err(|e| {
                Error::Store(StoreError::Unavailable(format!(
                    "cannot start the writer thread: {e}"
                )))
            })?;
        Ok(Self {
            jobs: Some(jobs),
            #[cfg(test)]
            sent: std::sync::atomic::AtomicU64::new(0),
            thread_id: thread.thread().id(),
            thread: Some(thread),
        })
    }

    /// Runs `work` on the writer connection, in a transaction shared with the writes sent
    /// around the same time; answers once that transaction has committed. `work` must make its
    /// own changes atomic if it makes several (a savepoint: `Connection::savepoint`), as a
    /// failed write is rolled back alone only to the extent it did so.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (answer, answered) = oneshot::channel::<Result<T>>();
        let job: Job = Box::new(move |conn| {
            if answer.is_closed() {
                return None;
            }
            let result = match conn {
                Ok(conn) => work(conn),
                Err(why) => Err(unavailable(why)),
            };
            Some(Box::new(move |commit_failed: Option<&str>| {
                let result = match (result, commit_failed) {
                    (Ok(_), Some(why)) => Err(unavailable(why)),
                    (result, _) => result,
                };
                let _ = answer.send(result);
            }))
        });
        #[cfg(test)]
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = self
            .jobs
            .as_ref()
            .map(|jobs| jobs.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(unavailable("the writer thread has stopped"));
        }
        answered
            .await
            .map_err(|_| unavailable("the writer thread stopped before answering"))?
    }
}

impl Writer {
    /// Writes sent so far (for tests that show a write was not needed).
    #[cfg(test)]
    pub(crate) fn writes_sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            // The last handle can be dropped by a write running on the thread itself (a job
            // that held a clone of the backend): it then ends on its own once the job returns.
            if std::thread::current().id() != self.thread_id {
                let _ = thread.join();
            }
        }
    }
}

fn unavailable(why: &str) -> Error {
    Error::Store(StoreError::Unavailable(format!("sqlite: {why}")))
}

/// The thread's loop: a group of waiting writes, one transaction, then the answers.
fn run(mut conn: Connection, queue: &mpsc::Receiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    let mut answers: Vec<Answer> = Vec::with_capacity(MAX_GROUP);
    while let Ok(first) = queue.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let why = e.to_string();
            for job in group.drain(..) {
                if let Some(answer) = job(Err(&why)) {
                    answer(Some(&why));
                }
            }
            continue;
        }
        let mut jobs = group.drain(..);
        let mut ended_early = None;
        for job in jobs.by_ref() {
            match catch_unwind(AssertUnwindSafe(|| job(Ok(&mut conn)))) {
                Ok(Some(answer)) => answers.push(answer),
                Ok(None) => {}
                Err(_) => tracing::error!("a store write panicked; it wrote nothing"),
            }
            // SQLite rolls the whole transaction back by itself after some errors (disk full,
            // I/O): the writes run so far are lost, and the rest must not run outside it.
            if conn.is_autocommit() {
                ended_early = Some("the transaction was rolled back (see the SQLite error)");
                break;
            }
        }
        let commit_failed = match ended_early {
            Some(why) => Some(why.to_owned()),
            None => conn.execute_batch("COMMIT").err().map(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                e.to_string()
            }),
        };
        for answer in answers.drain(..) {
            answer(commit_failed.as_deref());
        }
        // Writes not run because the transaction ended early: refused, not lost.
        for job in jobs {
            if let Some(answer) = job(Err("the transaction was rolled back")) {
                answer(Some("the transaction was rolled back"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    fn writer() -> (Arc<Writer>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let conn = Connection::open(dir.path().join("w.sqlite3")).expect("open");
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v INTEGER PRIMARY KEY);")
            .expect("schema");
        (Arc::new(Writer::start(conn).expect("writer")), dir)
    }

    fn insert(v: i64) -> impl FnOnce(&mut Connection) -> Result<()> + Send + 'static {
        move |c| {
            c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
            Ok(())
        }
    }

    async fn values(w: &Writer) -> Vec<i64> {
        w.write(|c| {
            let mut stmt = c.prepare("SELECT v FROM t ORDER BY v")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<i64>>>()?)
        })
        .await
        .expect("read")
    }

    /// Holds the writer thread inside a write until the returned barrier is passed (by a
    /// blocking thread); returns once the thread is inside it.
    async fn hold(w: &Arc<Writer>) -> (tokio::task::JoinHandle<Result<()>>, Arc<Barrier>) {
        let (started, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let held = {
            let (w, started, release) = (w.clone(), started.clone(), release.clone());
            tokio::spawn(async move {
                w.write(move |_| {
                    started.wait();
                    release.wait();
                    Ok(())
                })
                .await
            })
        };
        tokio::task::spawn_blocking(move || started.wait())
            .await
            .expect("the writer thread took the held write");
        (held, release)
    }

    async fn let_go(held: tokio::task::JoinHandle<Result<()>>, release: Arc<Barrier>) {
        tokio::task::spawn_blocking(move || release.wait())
            .await
            .expect("released");
        held.await.expect("joined").expect("the held write");
    }

    /// Spawns `work` as a write and waits until it is queued behind a held one.
    async fn queued<T: Send + 'static>(
        w: &Arc<Writer>,
        work: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<T>> {
        let w = w.clone();
        let task = tokio::spawn(async move { w.write(work).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        task
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_queued_together_commit_together_and_a_failed_one_is_rolled_back_alone() {
        let (w, _dir) = writer();
        let (held, release) = hold(&w).await;
        // Queued behind the held write, so the three share the next group: a failing write
        // (two inserts in a savepoint, the second a duplicate) between two good ones.
        let first = queued(&w, insert(1)).await;
        let failing = queued(&w, |c: &mut Connection| -> Result<()> {
            let sp = c.savepoint()?;
            sp.execute("INSERT INTO t (v) VALUES (100)", [])?;
            sp.execute("INSERT INTO t (v) VALUES (1)", [])?;
            sp.commit()?;
            Ok(())
        })
        .await;
        let third = queued(&w, insert(2)).await;
        let_go(held, release).await;
        first.await.expect("joined").expect("first write");
        assert!(
            failing.await.expect("joined").is_err(),
            "the duplicate fails"
        );
        third.await.expect("joined").expect("third write");
        assert_eq!(
            values(&w).await,
            vec![1, 2],
            "nothing of the failed write remains"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_caller_left_before_it_ran_does_not_run() {
        let (w, _dir) = writer();
        let (held, release) = hold(&w).await;
        let abandoned = queued(&w, insert(7)).await;
        abandoned.abort();
        let _ = abandoned.await;
        let_go(held, release).await;
        w.write(insert(8)).await.expect("a later write");
        assert_eq!(values(&w).await, vec![8], "the abandoned write never ran");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_panics_answers_an_error_and_the_writer_goes_on() {
        let (w, _dir) = writer();
        let panicked = w
            .write(|c: &mut Connection| -> Result<()> {
                let sp = c.savepoint()?;
                sp.execute("INSERT INTO t (v) VALUES (5)", [])?;
                panic!("a bug in a write");
            })
            .await;
        assert!(panicked.is_err());
        w.write(insert(6)).await.expect("the writer still runs");
        assert_eq!(values(&w).await, vec![6]);
    }
}
