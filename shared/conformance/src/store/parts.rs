//! Commits and their limits: a write larger than one commit goes as [`Commit::split`]'s parts,
//! each atomic; a failure between parts loses nothing when the writer retries; a commit over the
//! limits is refused whole.

use super::commit::{finished, locked_run, stored_run};
use crate::fixtures;
use agentlane_core::{
    Commit, Event, Fence, MAX_COMMIT_BYTES, MAX_COMMIT_WRITES, Message, Run, Session,
    SessionStatus, SessionUpdate, Store, StoreError, TranscriptEntry,
};
use std::sync::Arc;

/// A started run (session processing, lock held by `runner-a`) and the commit that finishes it
/// with `entries` transcript entries and `events` events: the run `ok`, the session idle, the
/// lock released.
async fn big_finish(
    store: &Arc<dyn Store>,
    entries: u64,
    events: u64,
) -> (Run, Fence, Commit, Run) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(store, now).await;
    let started = fixtures::running(&run, now);
    let begin = Commit {
        run: Some(started.clone()),
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: Some(run.run_id.clone()),
            last_progress_at: now,
            finished_delta: 0,
        }),
        ..Commit::default()
    };
    store.commit(&fence, begin).await.expect("begin");
    let done = finished(&started, now + 10);
    let whole = Commit {
        run_id: None,
        transcript: (1..=entries)
            .map(|seq| fixtures::entry(seq, &run.run_id, now + seq))
            .collect(),
        events: (0..events)
            .map(|seq| fixtures::event(seq, now + seq))
            .collect(),
        run: Some(done.clone()),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: now + 10,
            finished_delta: 1,
        }),
        release_lock: true,
    };
    (started, fence, whole, done)
}

async fn transcript(store: &Arc<dyn Store>, run: &Run) -> Vec<TranscriptEntry> {
    store
        .read_transcript(&run.tenant, &run.session_id, None, 10_000)
        .await
        .expect("read_transcript")
}

async fn events(store: &Arc<dyn Store>, run: &Run) -> Vec<Event> {
    store
        .read_events(&run.tenant, &run.run_id, None, 10_000)
        .await
        .expect("read_events")
}

async fn session(store: &Arc<dyn Store>, run: &Run) -> Session {
    store
        .get_session(&run.tenant, &run.session_key)
        .await
        .expect("get_session")
        .expect("session")
}

/// Asserts the end state of a finished big commit: every entry and event once, in order; the
/// run finished; the session idle with the run counted; the lock free.
async fn assert_landed_whole(store: &Arc<dyn Store>, started: &Run, whole: &Commit, done: &Run) {
    assert_eq!(transcript(store, started).await, whole.transcript);
    assert_eq!(events(store, started).await, whole.events);
    assert_eq!(&stored_run(store, started).await, done);
    let session = session(store, started).await;
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.active_run_id, None);
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.lock_owner, None);
}

/// One tool round's worth of writes (150 entries, 100 events) plus the run, session and release:
/// applied as its `split()` parts in order, every part lands, and the run, session update and
/// release only with the last one.
pub async fn case_split_commit_lands_whole_with_the_run_last(store: Arc<dyn Store>) {
    let (started, fence, whole, done) = big_finish(&store, 150, 100).await;
    assert_eq!(whole.write_count(), 250);
    let parts = whole.clone().split();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert!(parts.iter().all(Commit::fits));

    let (last, init) = parts.split_last().expect("parts");
    for part in init {
        store.commit(&fence, part.clone()).await.expect("a part");
        // not finished before the last part
        assert_eq!(stored_run(&store, &started).await, started);
        let session = session(&store, &started).await;
        assert_eq!(session.status, SessionStatus::Processing);
        assert_eq!(session.lock_owner.as_deref(), Some("runner-a"));
    }
    store.commit(&fence, last.clone()).await.expect("last part");

    assert_landed_whole(&store, &started, &whole, &done).await;
}

/// The writer applied part 1, then failed before part 2 landed (a crash, a timeout). Retrying
/// from part 1: its `Conflict` shows it landed, the following parts then apply, and the end state
/// is complete with nothing written twice. A retried part that had landed answers `Conflict`
/// whatever its position.
pub async fn case_a_failure_between_parts_loses_nothing(store: Arc<dyn Store>) {
    let (started, fence, whole, done) = big_finish(&store, 150, 100).await;
    let parts = whole.clone().split();
    assert!(parts.len() >= 3, "{} parts", parts.len());

    store
        .commit(&fence, parts[0].clone())
        .await
        .expect("part 1");
    // part 2 fails: it is never applied; the writer starts over from part 1
    let again = store.commit(&fence, parts[0].clone()).await;
    assert!(
        matches!(again, Err(StoreError::Conflict(_))),
        "a landed part answers Conflict: {again:?}"
    );
    assert_eq!(
        transcript(&store, &started).await.len() + events(&store, &started).await.len(),
        parts[0].write_count(),
        "the retry wrote nothing"
    );
    store
        .commit(&fence, parts[1].clone())
        .await
        .expect("part 2");
    let again = store.commit(&fence, parts[1].clone()).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    for part in &parts[2..] {
        store.commit(&fence, part.clone()).await.expect("a part");
    }

    assert_landed_whole(&store, &started, &whole, &done).await;
}

/// A commit over `MAX_COMMIT_WRITES` entries and events, or over `MAX_COMMIT_BYTES` of them, is
/// refused with `TooLarge` (permanent) and writes nothing: no entry, no run or session change,
/// the lock kept. Adapters never split on their own.
pub async fn case_commit_over_the_limits_is_refused_whole(store: Arc<dyn Store>) {
    let writes = MAX_COMMIT_WRITES as u64;
    let (started, fence, mut whole, _) = big_finish(&store, writes - 3, 4).await;
    assert_eq!(whole.write_count(), MAX_COMMIT_WRITES + 1);
    let session_before = session(&store, &started).await;

    let result = store.commit(&fence, whole.clone()).await;
    assert!(matches!(result, Err(StoreError::TooLarge(_))), "{result:?}");
    assert!(!result.unwrap_err().is_transient());

    // bytes: few entries, each large (but within the record limit)
    let now = fixtures::wall_ms();
    let piece = "z".repeat(300_000);
    let count = (MAX_COMMIT_BYTES / piece.len() + 1) as u64;
    whole.events.clear();
    whole.transcript = (1..=count)
        .map(|seq| TranscriptEntry {
            message: Message::user(piece.clone()),
            ..fixtures::entry(seq, &started.run_id, now)
        })
        .collect();
    assert!(whole.write_count() <= MAX_COMMIT_WRITES);
    let result = store.commit(&fence, whole).await;
    assert!(matches!(result, Err(StoreError::TooLarge(_))), "{result:?}");

    assert!(transcript(&store, &started).await.is_empty());
    assert!(events(&store, &started).await.is_empty());
    assert_eq!(stored_run(&store, &started).await, started);
    assert_eq!(session(&store, &started).await, session_before);
    store
        .commit(&fence, Commit::default())
        .await
        .expect("the fence survives a refused commit");
}
