//! The backend's connections: reads beside the writer see every committed write, the WAL is
//! checkpointed into the database file in the background, and idle lane workers are woken one
//! per message without losing any.

use agentlane_conformance::fixtures;
use agentlane_core::{LaneQueue, Store};
use agentlane_store_sqlite::{DB_FILE_NAME, SqliteBackend};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_right_after_a_write_sees_it_from_any_task() {
    let backend = SqliteBackend::open_temporary().unwrap();
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..25 {
                    let (tenant, key, now) = fixtures::fresh();
                    let run = fixtures::accept(&store, &tenant, &key, now).await;
                    // Reads run on other connections than the write: they must see it at once.
                    let read = store.get_run(&tenant, &run.run_id).await.unwrap();
                    assert_eq!(read, Some(run));
                    let session = store.get_session(&tenant, &key).await.unwrap().unwrap();
                    assert_eq!(session.runs_accepted, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn committed_writes_reach_the_database_file_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    for _ in 0..50 {
        backend
            .enqueue(&fixtures::message(&fixtures::lane()))
            .await
            .unwrap();
    }

    // The database file alone (a copy without its -wal) holds the messages once the background
    // checkpoint ran, while the backend stays open.
    let copy = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let pending = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let file = copy.path().join("copy.sqlite3");
        std::fs::copy(dir.path().join(DB_FILE_NAME), &file).unwrap();
        let conn = rusqlite::Connection::open(&file).unwrap();
        let pending: i64 = conn
            .query_row("SELECT COUNT(*) FROM lane_pending", [], |r| r.get(0))
            .unwrap_or(0);
        if pending == 50 || started.elapsed() > Duration::from_secs(5) {
            break pending;
        }
    };
    assert_eq!(
        pending, 50,
        "the WAL was not checkpointed into the database"
    );
    drop(backend);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_workers_each_get_their_own_messages_and_none_is_left_waiting() {
    let queue = SqliteBackend::open_temporary().unwrap();
    // Sixteen workers waiting on an empty queue, each taking one message at a time.
    let delivered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (queue, delivered) = (queue.clone(), delivered.clone());
            tokio::spawn(async move {
                loop {
                    let got = queue
                        .receive(1, LONG, Duration::from_secs(3))
                        .await
                        .unwrap();
                    let Some(delivery) = got.into_iter().next() else {
                        return;
                    };
                    queue.ack(&delivery.receipt).await.unwrap();
                    delivered.lock().unwrap().push(delivery.message.dedup_id);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A burst of messages on different lanes: each is delivered exactly once.
    let mut sent = HashSet::new();
    for _ in 0..200 {
        let message = fixtures::message(&fixtures::lane());
        sent.insert(message.dedup_id.clone());
        queue.enqueue(&message).await.unwrap();
    }
    let delivered_count = || delivered.lock().unwrap().len();
    let started = Instant::now();
    while delivered_count() < sent.len() && started.elapsed() < LONG {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Then messages one at a time, each sent once the one before was taken: each enqueue must
    // wake a worker (a lost wake-up leaves the message to the next one-second recheck).
    let started = Instant::now();
    for _ in 0..10 {
        let message = fixtures::message(&fixtures::lane());
        sent.insert(message.dedup_id.clone());
        queue.enqueue(&message).await.unwrap();
        while delivered_count() < sent.len() && started.elapsed() < LONG {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let took = started.elapsed();
    for worker in workers {
        worker.await.unwrap();
    }
    let delivered = delivered.lock().unwrap().clone();
    assert_eq!(
        delivered.len(),
        sent.len(),
        "a message was delivered twice or never"
    );
    assert_eq!(delivered.into_iter().collect::<HashSet<_>>(), sent);
    assert!(
        took < Duration::from_secs(3),
        "10 messages one at a time took {took:?}"
    );
}
