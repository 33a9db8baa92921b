//! Queue mode `interrupt` (SPEC §4): the active run ends `aborted` (`interrupted`) with every
//! tool call answered, then the interrupting message runs next, ahead of the followups queued
//! behind the interrupted run, which still run afterwards, in order.

use crate::support::*;
use agentlane_agent::TurnExit;
use agentlane_core::{AbortReason, QueueMode, QueueOutcome, RunStatus};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn an_interrupt_aborts_the_running_turn_and_runs_before_the_queued_followups() {
    // GIVEN a turn busy in a slow tool
    let f = Arc::new(fixture(
        vec![
            Script::Tools(vec![("c1", "slow", "{}")]),
            Script::Text("interrupt answered"),
            Script::Text("followup one answered"),
            Script::Text("followup two answered"),
            Script::Text("later answered"),
        ],
        quick(),
    ));
    let busy = f.accept("long job").await;
    let running = {
        let (f, busy) = (f.clone(), busy.clone());
        tokio::spawn(async move { f.execute(&busy).await })
    };
    for _ in 0..200 {
        if f.tool_results().await.is_empty() && f.roles().await.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // AND two followups queued behind it
    let one = f.accept("followup one").await;
    let two = f.accept("followup two").await;

    // WHEN an interrupt arrives (the API asks the active run to abort)
    let interrupt = f.accept_as("stop, do this", QueueMode::Interrupt).await;
    f.store
        .request_abort_for(&f.tenant, &busy.run_id, AbortReason::Interrupted)
        .await
        .unwrap();

    // THEN the busy turn ends aborted (interrupted), its tool call answered
    assert_eq!(
        running.await.unwrap(),
        TurnExit::Finished(RunStatus::Aborted)
    );
    let aborted = f.run(&busy.run_id).await;
    assert_eq!(aborted.error.unwrap().code, "interrupted");
    assert_eq!(aborted.queue_outcome, QueueOutcome::Interrupted);
    let results = f.tool_results().await;
    assert_eq!(results.len(), 1, "the slow call has its result");

    // AND the next delivery (the first followup's) runs the interrupt, and hands its own back
    assert_eq!(f.execute(&one).await, TurnExit::HandBack);
    let ran = f.run(&interrupt.run_id).await;
    assert_eq!(ran.status, RunStatus::Ok);
    assert_eq!(ran.payloads[0].text, "interrupt answered");
    assert_eq!(f.run(&one.run_id).await.status, RunStatus::Queued);
    // AND the followups still run afterwards, in order
    assert_eq!(
        f.execute(&two).await,
        TurnExit::HandBack,
        "not its turn yet"
    );
    assert_eq!(f.execute(&one).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&two).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.run(&one.run_id).await.payloads[0].text,
        "followup one answered"
    );
    assert_eq!(
        f.run(&two.run_id).await.payloads[0].text,
        "followup two answered"
    );
    // AND the interrupt's own message, in its turn, only counts it
    assert_eq!(f.execute(&interrupt).await, TurnExit::AlreadyDone);
    let session = f
        .store
        .get_session(&f.tenant, &f.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((session.runs_accepted, session.runs_finished), (4, 4));
    let later = f.accept("later").await;
    assert_eq!(f.execute(&later).await, TurnExit::Finished(RunStatus::Ok));
    // AND the transcript is in the order the turns ran
    let users: Vec<String> = f
        .transcript()
        .await
        .into_iter()
        .filter_map(|e| match e.message {
            agentlane_core::Message::User { content } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(
        users,
        [
            "long job",
            "stop, do this",
            "followup one",
            "followup two",
            "later"
        ]
    );
}

#[tokio::test]
async fn an_interrupt_on_an_idle_session_is_an_ordinary_turn() {
    let f = fixture(vec![Script::Text("hello")], quick());
    let interrupt = f.accept_as("hi", QueueMode::Interrupt).await;
    assert_eq!(
        f.execute(&interrupt).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    let session = f
        .store
        .get_session(&f.tenant, &f.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.interrupt, None);
}
