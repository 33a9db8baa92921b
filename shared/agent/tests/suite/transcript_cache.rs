//! The runner's transcript cache (issue 26.1): a session's next turn is built from the entries
//! the runner kept, not read again, and never from stale ones: a write by another lock holder
//! (another process appending, a compaction), a reset, and a failed commit all make the next
//! turn read the transcript again and see the change.

use crate::support::*;
use agentlane_agent::TurnExit;
use agentlane_core::{
    Clock, Commit, Layered, LockAttempt, Message, RunId, RunStatus, SessionId, Store, StoreCall,
    StoreLayer, StoreResult, SystemClock, TranscriptEntry,
};
use agentlane_providers::history::{WireFormat, request_body, request_body_whole};
use agentlane_providers::{ModelRequest, SharedMessage};
use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the transcript reads that reach the store.
struct CountReads {
    inner: Arc<dyn Store>,
    reads: Arc<AtomicUsize>,
}

#[async_trait]
impl StoreLayer for CountReads {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn before(&self, call: StoreCall) -> StoreResult<()> {
        if call == StoreCall::ReadTranscript {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

fn counted(script: Vec<Script>, megabytes: usize) -> (Fixture, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let f = fixture_on(
        script,
        agentlane_agent::RunnerConfig {
            transcript_cache_bytes: megabytes << 20,
            ..config()
        },
        |router, model| router.with_provider(model.clone()),
        move |inner| {
            Arc::new(Layered(CountReads {
                inner,
                reads: counter,
            }))
        },
    );
    (f, reads)
}

/// Runs one turn with `message`; it must end ok.
async fn turn(f: &Fixture, message: &str) {
    let msg = f.accept(message).await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
}

/// The texts of the last model request's messages.
fn last_request(f: &Fixture) -> Vec<String> {
    let requests = f.model.requests();
    let request = requests.last().expect("a model request");
    request
        .messages
        .iter()
        .map(|m| match m.message() {
            Message::User { content } => format!("user: {content}"),
            Message::Assistant { content, .. } => format!("assistant: {content}"),
            Message::Tool { content, .. } => format!("tool: {content}"),
            Message::Compaction { summary, .. } => format!("summary: {summary}"),
        })
        .collect()
}

/// Encodes the last model request in every wire format, as a provider would: the messages
/// keep their encodings for the turns that send them again.
fn encode_last_request(f: &Fixture) {
    let requests = f.model.requests();
    let request = requests.last().expect("a model request");
    for format in [WireFormat::OpenAiChat, WireFormat::Anthropic] {
        request_body(format, request);
    }
}

/// The last request's bodies, assembled from the encodings its messages kept (some made in
/// earlier turns), are byte for byte those of the same messages encoded afresh: no kept
/// encoding is stale.
fn assert_encodings_fresh(f: &Fixture) {
    let requests = f.model.requests();
    let request = requests.last().expect("a model request");
    let afresh = ModelRequest {
        messages: request
            .messages
            .iter()
            .map(|m| SharedMessage::new(m.message().clone()))
            .collect(),
        ..request.clone()
    };
    for format in [WireFormat::OpenAiChat, WireFormat::Anthropic] {
        assert_eq!(
            request_body(format, request),
            request_body_whole(format, &afresh),
            "{format:?}"
        );
    }
}

/// Writes `message` to the session's transcript as another process would: under its own lock.
async fn write_behind_the_runners_back(f: &Fixture, message: Message) {
    let now = SystemClock.now_ms();
    let attempt = f
        .store
        .acquire_lock(&f.tenant, &f.key, "another-process", 10_000, now)
        .await
        .unwrap();
    let LockAttempt::Acquired(fence, _) = attempt else {
        panic!("the lane is free between turns");
    };
    let next = f.transcript().await.last().map_or(0, |e| e.seq + 1);
    let entry = TranscriptEntry {
        seq: next,
        run_id: RunId::new("run-of-another-process"),
        ts: now,
        message,
    };
    let commit = Commit {
        run_id: None,
        transcript: vec![entry],
        events: Vec::new(),
        run: None,
        session: None,
        release_lock: true,
    };
    f.store.commit(&fence, commit).await.unwrap();
}

#[tokio::test]
async fn a_sessions_next_turn_is_built_from_the_kept_transcript_without_reading_it() {
    let script = vec![
        Script::Text("one"),
        Script::Text("two"),
        Script::Text("three"),
    ];
    let (f, reads) = counted(script, 64);
    turn(&f, "first").await;
    assert_eq!(reads.load(Ordering::SeqCst), 1, "the first turn reads");
    turn(&f, "second").await;
    turn(&f, "third").await;
    assert_eq!(reads.load(Ordering::SeqCst), 1, "later turns read nothing");
    assert_eq!(
        last_request(&f),
        [
            "user: first",
            "assistant: one",
            "user: second",
            "assistant: two",
            "user: third"
        ],
        "the whole history, in order"
    );
    assert!(f.runner.transcript_cache().bytes() > 0);
}

#[tokio::test]
async fn with_the_cache_off_every_turn_reads_the_transcript() {
    let (f, reads) = counted(vec![Script::Text("one"), Script::Text("two")], 0);
    turn(&f, "first").await;
    turn(&f, "second").await;
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert_eq!(
        last_request(&f),
        ["user: first", "assistant: one", "user: second"]
    );
}

#[tokio::test]
async fn an_entry_appended_by_another_process_is_in_the_next_turn() {
    let (f, reads) = counted(vec![Script::Text("one"), Script::Text("two")], 64);
    turn(&f, "first").await;
    encode_last_request(&f);
    write_behind_the_runners_back(&f, Message::user("written elsewhere")).await;
    let before = reads.load(Ordering::SeqCst);
    turn(&f, "second").await;
    assert_eq!(reads.load(Ordering::SeqCst) - before, 1, "read again");
    assert_encodings_fresh(&f);
    assert_eq!(
        last_request(&f),
        [
            "user: first",
            "assistant: one",
            "user: written elsewhere",
            "user: second"
        ]
    );
}

#[tokio::test]
async fn a_compaction_written_elsewhere_replaces_what_it_covers_in_the_next_turn() {
    let (f, _) = counted(vec![Script::Text("one"), Script::Text("two")], 64);
    turn(&f, "first").await;
    encode_last_request(&f);
    let through = f.transcript().await.last().unwrap().seq;
    let summary = Message::Compaction {
        summary: "they said hello".into(),
        through_seq: through,
        tokens_before: 10,
        tokens_after: 3,
    };
    write_behind_the_runners_back(&f, summary).await;
    turn(&f, "second").await;
    let request = last_request(&f);
    assert!(
        !request.iter().any(|m| m == "user: first"),
        "the summarized turn is not sent again: {request:?}"
    );
    assert!(
        request.iter().any(|m| m.contains("they said hello")),
        "{request:?}"
    );
    assert_eq!(request.last().map(String::as_str), Some("user: second"));
    assert_encodings_fresh(&f);
}

#[tokio::test]
async fn after_a_reset_the_next_turn_starts_a_fresh_history() {
    let (f, _) = counted(vec![Script::Text("one"), Script::Text("two")], 64);
    turn(&f, "first").await;
    encode_last_request(&f);
    f.store
        .reset_session(
            &f.tenant,
            &f.key,
            SessionId::new("after-reset"),
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
    turn(&f, "second").await;
    assert_eq!(last_request(&f), ["user: second"]);
    assert_encodings_fresh(&f);
}

#[tokio::test]
async fn a_turn_that_only_reads_the_lane_leaves_the_kept_transcript_stale() {
    // A lock taken and released without a write still moves the fence: the next turn reads
    // (it cannot tell an empty hold from a write).
    let (f, reads) = counted(vec![Script::Text("one"), Script::Text("two")], 64);
    turn(&f, "first").await;
    let now = SystemClock.now_ms();
    let LockAttempt::Acquired(fence, _) = f
        .store
        .acquire_lock(&f.tenant, &f.key, "someone", 10_000, now)
        .await
        .unwrap()
    else {
        panic!("free lane");
    };
    f.store.release_lock(&fence).await.unwrap();
    turn(&f, "second").await;
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert_eq!(
        last_request(&f),
        ["user: first", "assistant: one", "user: second"]
    );
}

#[tokio::test]
async fn kept_entries_are_sent_as_the_same_shared_messages_with_their_encodings() {
    // GIVEN a session whose turns run on the kept transcript
    let script = vec![
        Script::Text("one"),
        Script::Text("two"),
        Script::Text("three"),
    ];
    let (f, _) = counted(script, 64);
    turn(&f, "first").await;
    turn(&f, "second").await;
    encode_last_request(&f);
    // WHEN the next turn runs
    turn(&f, "third").await;
    // THEN the entries of earlier turns are the very messages the previous request sent: not
    // copied, and not encoded again
    let requests = f.model.requests();
    let (before, after) = (&requests[1].messages, &requests[2].messages);
    assert_eq!(after.len(), 5);
    assert!(
        before[..2]
            .iter()
            .zip(&after[..2])
            .all(|(a, b)| a.ptr_eq(b)),
        "shared, not copied"
    );
    // AND the body assembled from them is the one encoded whole
    assert_encodings_fresh(&f);
}
