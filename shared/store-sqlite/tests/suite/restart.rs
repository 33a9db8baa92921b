//! Durability: what was accepted and enqueued is still there after the process restarts.

use agentlane_conformance::fixtures;
use agentlane_core::{HistoryReader, LaneQueue, RunStatus, Store};
use agentlane_store_sqlite::{DB_FILE_NAME, SqliteBackend};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_turns_and_messages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (tenant, key, now) = (
        fixtures::tenant(),
        fixtures::session_key(),
        fixtures::wall_ms(),
    );

    // GIVEN a process that accepted a turn, enqueued it and another lane's turn, and had the
    // first message in flight (1 s visibility) when it stopped
    let (run, in_flight, waiting) = {
        let backend = SqliteBackend::open(&data).unwrap();
        assert_eq!(backend.database_path(), data.join(DB_FILE_NAME));
        let run = fixtures::accept(
            &(std::sync::Arc::new(backend.clone()) as std::sync::Arc<dyn Store>),
            &tenant,
            &key,
            now,
        )
        .await;
        let in_flight = fixtures::message(&agentlane_core::Lane::for_session(&tenant, &key));
        let waiting = fixtures::message(&fixtures::lane());
        backend.enqueue(&in_flight).await.unwrap();
        backend.enqueue(&waiting).await.unwrap();
        let got = backend
            .receive(1, Duration::from_secs(1), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].message, in_flight);
        (run, in_flight, waiting)
    };

    // WHEN the process starts again on the same directory
    let backend = SqliteBackend::open(&data).unwrap();

    // THEN the run and its session are there
    let stored = backend.get_run(&tenant, &run.run_id).await.unwrap();
    assert_eq!(stored, Some(run.clone()));
    assert_eq!(run.status, RunStatus::Queued);
    let session = backend.get_session(&tenant, &key).await.unwrap().unwrap();
    assert_eq!(session.session_id, run.session_id);
    assert_eq!(session.runs_accepted, 1);

    // AND the waiting message is delivered at once, the in-flight one once its visibility ends
    let started = Instant::now();
    let first = backend
        .receive(10, Duration::from_secs(30), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].message, waiting);
    assert_eq!(first[0].receive_count, 1);
    let again = backend
        .receive(10, Duration::from_secs(30), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].message, in_flight);
    assert_eq!(again[0].receive_count, 2);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_directory_and_database_files_are_private_to_the_user() {
    use agentlane_core::TurnIntake;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    // GIVEN a backend opened on a new data directory, which then writes (WAL files appear)
    let backend = SqliteBackend::open(&data).unwrap();
    backend
        .accept_turn(fixtures::turn(
            &fixtures::tenant(),
            &fixtures::session_key(),
            fixtures::wall_ms(),
        ))
        .await
        .unwrap();

    // THEN nobody but the user can read the transcripts
    assert_eq!(mode(&data), 0o700);
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "database and WAL files: {files:?}");
    for file in files {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }

    // AND a directory left open by an older version is closed on the next start
    drop(backend);
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _reopened = SqliteBackend::open(&data).unwrap();
    assert_eq!(mode(&data), 0o700);
}
