//! Queue mode `collect` (SPEC §4): messages accepted while the session is busy fold into one
//! follow-up turn after a quiet window; each message keeps its run, which ends `collected`
//! into the turn that answered it, without a model call of its own.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_core::{Message, QueueMode, QueueOutcome, RunStatus};
use std::sync::Arc;
use std::time::Duration;

fn quick(window_ms: u64) -> RunnerConfig {
    RunnerConfig {
        collect_window: Duration::from_millis(window_ms),
        ..crate::support::quick()
    }
}

#[tokio::test]
async fn five_collects_behind_a_busy_turn_become_one_turn_with_all_five() {
    // GIVEN a turn, then five collect messages accepted behind it
    let f = fixture(
        vec![
            Script::Text("first answer"),
            Script::Text("one answer for all five"),
        ],
        quick(20),
    );
    let busy = f.accept("hello").await;
    let mut collects = Vec::new();
    for i in 1..=5 {
        collects.push(f.accept_as(&format!("c{i}"), QueueMode::Collect).await);
    }

    // WHEN the turn runs, then the first collect's turn comes
    assert_eq!(f.execute(&busy).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.execute(&collects[0]).await,
        TurnExit::Finished(RunStatus::Ok)
    );

    // THEN one model call saw all five messages, in acceptance order
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    let tail: Vec<_> = requests[1]
        .messages
        .iter()
        .rev()
        .take(5)
        .rev()
        .cloned()
        .collect();
    let expected: Vec<_> = (1..=5).map(|i| Message::user(format!("c{i}"))).collect();
    assert_eq!(tail, expected);
    // AND the transcript keeps every message, then the one answer
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "user",
            "user",
            "user",
            "user",
            "user",
            "assistant"
        ]
    );
    // AND the other four are collected into the first and end as it did, with no model call
    for msg in &collects[1..] {
        let r = f.run(&msg.run_id).await;
        assert_eq!(
            (r.queue_outcome, r.into_run_id.as_ref()),
            (QueueOutcome::Collected, Some(&collects[0].run_id))
        );
        assert_eq!(f.execute(msg).await, TurnExit::Finished(RunStatus::Ok));
        let r = f.run(&msg.run_id).await;
        assert_eq!(r.status, RunStatus::Ok);
        assert_eq!(r.payloads[0].text, "one answer for all five");
    }
    assert_eq!(f.model.requests().len(), 2);
    let carrier = f.run(&collects[0].run_id).await;
    assert_eq!(
        (carrier.queue_outcome, carrier.into_run_id),
        (QueueOutcome::Ran, None)
    );
    let session = f.session().await;
    assert_eq!((session.runs_accepted, session.runs_finished), (6, 6));
}

#[tokio::test]
async fn a_collect_accepted_during_the_quiet_window_joins_the_turn() {
    // GIVEN a lone collect message (the session is idle)
    let f = Arc::new(fixture(vec![Script::Text("both answered")], quick(150)));
    let first = f.accept_as("first", QueueMode::Collect).await;

    // WHEN its turn starts and another collect arrives during the quiet window
    let late = {
        let f = f.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            f.accept_as("second", QueueMode::Collect).await
        })
    };
    assert_eq!(f.execute(&first).await, TurnExit::Finished(RunStatus::Ok));
    let late = late.await.unwrap();

    // THEN the one turn answered both
    let requests = f.model.requests();
    assert_eq!(requests.len(), 1);
    let tail: Vec<_> = requests[0]
        .messages
        .iter()
        .rev()
        .take(2)
        .rev()
        .cloned()
        .collect();
    assert_eq!(tail, [Message::user("first"), Message::user("second")]);
    assert_eq!(
        f.run(&late.run_id).await.queue_outcome,
        QueueOutcome::Collected
    );
    assert_eq!(f.execute(&late).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.run(&late.run_id).await.payloads[0].text, "both answered");
}

#[tokio::test]
async fn a_followup_between_collects_keeps_its_place() {
    // GIVEN collect, followup, collect
    let f = fixture(
        vec![
            Script::Text("collect one"),
            Script::Text("followup"),
            Script::Text("collect two"),
        ],
        quick(10),
    );
    let a = f.accept_as("a", QueueMode::Collect).await;
    let b = f.accept("b").await;
    let c = f.accept_as("c", QueueMode::Collect).await;

    // WHEN they run in order
    for msg in [&a, &b, &c] {
        assert_eq!(f.execute(msg).await, TurnExit::Finished(RunStatus::Ok));
    }

    // THEN the first collect took the later one (collects fold across the followup), and
    // the followup still ran as its own turn after it
    assert_eq!(
        f.run(&c.run_id).await.queue_outcome,
        QueueOutcome::Collected
    );
    assert_eq!(f.run(&b.run_id).await.payloads[0].text, "followup");
    assert_eq!(f.run(&c.run_id).await.payloads[0].text, "collect one");
    assert_eq!(f.model.requests().len(), 2);
}
