//! A turn from start to end: its reply, events and transcript; redelivery, crash recovery, abort,
//! timeout and hand-back.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_conformance::fixtures;
use agentlane_core::{
    Clock, Commit, EventStream, LockAttempt, Message, RunStatus, SystemClock, ToolCall,
    TranscriptEntry, TurnMessage, TurnRequest,
};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_text_turn_ends_ok_with_the_reply_events_and_transcript() {
    let f = fixture(vec![Script::Text("Hello there, human.")], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));

    let run = f.run(&msg.run_id).await;
    assert_eq!(run.status, RunStatus::Ok);
    assert_eq!(run.payloads.len(), 1);
    assert_eq!(run.payloads[0].text, "Hello there, human.");
    assert_eq!(run.model.as_deref(), Some("scripted/m1"));
    assert_eq!(run.attempts.len(), 1);
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
    let events = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 100)
        .await
        .unwrap();
    assert_eq!(events.first().unwrap().data["phase"], "start");
    assert_eq!(events.last().unwrap().data["phase"], "end");
    assert!(events.iter().any(|e| e.stream == EventStream::Assistant));
    assert!(
        events.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "dense event seqs"
    );
    let session = f.session().await;
    assert_eq!(session.lock_owner, None, "lock released");
    assert_eq!(session.runs_finished, 1);
}

/// The text of every message, with its role, as the transcript or a model request holds it.
fn texts(messages: &[agentlane_providers::SharedMessage]) -> Vec<(&'static str, String)> {
    messages
        .iter()
        .map(|m| match m.message() {
            Message::User { content } => ("user", content.clone()),
            Message::Assistant { content, .. } => ("assistant", content.clone()),
            Message::Tool { content, .. } => ("tool", content.clone()),
            Message::Compaction { summary, .. } => ("compaction", summary.clone()),
        })
        .collect()
}

#[tokio::test]
async fn a_seeded_history_goes_before_the_prompt_of_a_new_session_only() {
    let f = fixture(
        vec![Script::Text("It is Ada."), Script::Text("Still Ada.")],
        config(),
    );
    let seeded = vec![
        Message::user("my name is Ada"),
        Message::Assistant {
            content: "Nice to meet you, Ada.".into(),
            reasoning: None,
            tool_calls: Vec::new(),
            model: None,
        },
    ];
    let with_history = |message: &str| TurnRequest {
        history: seeded.clone(),
        ..fixtures::request(message)
    };
    // GIVEN a turn on a new session carrying the conversation before it
    let first = f.accept_request(with_history("what is my name?")).await;

    // WHEN it runs
    assert_eq!(f.execute(&first).await, TurnExit::Finished(RunStatus::Ok));

    // THEN the model saw the seeded turns, then the prompt; the transcript keeps them in that
    // order, written by the run
    let expected = vec![
        ("user", "my name is Ada".to_owned()),
        ("assistant", "Nice to meet you, Ada.".to_owned()),
        ("user", "what is my name?".to_owned()),
    ];
    assert_eq!(texts(&f.model.requests()[0].messages), expected);
    let transcript = f.transcript().await;
    let written: Vec<Message> = transcript.iter().map(|e| e.message.clone()).collect();
    let mut with_reply = expected.clone();
    with_reply.push(("assistant", "It is Ada.".to_owned()));
    assert_eq!(
        texts(&agentlane_providers::history::shared(written)),
        with_reply
    );
    assert!(transcript.iter().all(|e| e.run_id == first.run_id));
    assert_eq!(f.run(&first.run_id).await.payloads[0].text, "It is Ada.");

    // AND on a session that has a transcript, a request's history is not written again
    let second = f.accept_request(with_history("and now?")).await;
    assert_eq!(f.execute(&second).await, TurnExit::Finished(RunStatus::Ok));
    let sent = texts(&f.model.requests()[1].messages);
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert_eq!(sent[4], ("user", "and now?".to_owned()));
    assert_eq!(f.roles().await.len(), 6);
}

#[tokio::test]
async fn a_redelivered_finished_turn_does_nothing() {
    let f = fixture(vec![Script::Text("once")], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&msg).await, TurnExit::AlreadyDone);
    assert_eq!(f.model.requests().len(), 1);
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
}

#[tokio::test]
async fn a_crashed_pickup_is_resumed_without_duplicating_entries() {
    let f = fixture(vec![Script::Text("recovered answer")], config());
    let msg = f.accept("look something up").await;
    // GIVEN a pickup that wrote the user message and a tool call, then died holding the lock.
    let clock = SystemClock;
    let LockAttempt::Acquired(dead, _) = f
        .store
        .acquire_lock(&f.tenant, &f.key, "dead-runner", 300, clock.now_ms())
        .await
        .unwrap()
    else {
        panic!("lock should be free")
    };
    let session = f.session().await;
    let entry = |seq, message| TranscriptEntry {
        seq,
        run_id: msg.run_id.clone(),
        ts: 1,
        message,
    };
    f.store
        .commit(
            &dead,
            Commit {
                transcript: vec![
                    entry(0, Message::user("look something up")),
                    entry(
                        1,
                        Message::Assistant {
                            content: String::new(),
                            reasoning: None,
                            tool_calls: vec![ToolCall {
                                id: "c1".into(),
                                name: "slow".into(),
                                arguments: "{}".into(),
                            }],
                            model: None,
                        },
                    ),
                ],
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let _ = session;
    // WHEN the message is redelivered after the lease expired
    let started = Instant::now();
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert!(started.elapsed() < Duration::from_secs(5));
    // THEN the dangling call got an aborted result, the model continued, nothing was repeated
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "assistant"]
    );
    let t = f.transcript().await;
    assert!(t.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert!(
        matches!(&t[2].message, Message::Tool { is_error: true, tool_call_id, .. } if tool_call_id == "c1")
    );
    let run = f.run(&msg.run_id).await;
    assert_eq!(run.pickups, 1);
    assert_eq!(run.payloads[0].text, "recovered answer");
    // and the dead pickup's fence can write nothing any more
    let late = f
        .store
        .commit(
            &dead,
            Commit {
                transcript: vec![entry(9, Message::user("late"))],
                ..Commit::default()
            },
        )
        .await;
    assert_eq!(late, Err(agentlane_core::StoreError::FenceLost));
}

#[tokio::test]
async fn abort_stops_a_streaming_run_within_a_second() {
    let f = fixture(
        vec![Script::Stall(Duration::from_secs(30))],
        RunnerConfig {
            model_idle_timeout: Duration::from_secs(60),
            ..config()
        },
    );
    let msg = f.accept("talk slowly").await;
    let store = f.store.clone();
    let (tenant, run_id) = (f.tenant.clone(), msg.run_id.clone());
    let aborter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.request_abort(&tenant, &run_id).await.unwrap();
        Instant::now()
    });
    let exit = f.execute(&msg).await;
    let ended = Instant::now();
    let asked = aborter.await.unwrap();
    assert_eq!(exit, TurnExit::Finished(RunStatus::Aborted));
    assert!(
        ended - asked < Duration::from_secs(1),
        "took {:?}",
        ended - asked
    );
    assert_eq!(f.roles().await, vec!["user"], "no partial assistant entry");
}

#[tokio::test]
async fn a_run_past_its_timeout_ends_with_status_timeout() {
    let f = fixture(vec![Script::Tools(vec![("c1", "slow", "{}")])], config());
    let msg = TurnMessage {
        session_key: None,
        ..f.accept_request(TurnRequest {
            queue_mode: None,
            timeout_seconds: Some(1),
            ..fixtures::request("slow")
        })
        .await
    };
    assert_eq!(
        f.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    // the interrupted tool call still has its result: the transcript stays paired
    assert_eq!(f.roles().await, vec!["user", "assistant", "tool"]);
}

#[tokio::test]
async fn a_shutdown_hands_the_run_back_and_a_later_pickup_finishes_it() {
    let f = fixture(
        vec![
            Script::Tools(vec![("c1", "slow", "{}")]),
            Script::Text("finished later"),
        ],
        config(),
    );
    let msg = f.accept("long job").await;
    let shutdown = CancellationToken::new();
    let s = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.cancel();
    });
    assert_eq!(
        f.runner.execute(&msg, &shutdown).await.unwrap(),
        TurnExit::HandBack
    );
    let run = f.run(&msg.run_id).await;
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "assistant"]
    );
}
