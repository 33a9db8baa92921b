//! Queue mode `steer` (SPEC §4): a message accepted while a run of its session is active joins
//! that run at its next model boundary (after the current tool batch), the model sees it, and
//! the answer comes after it; its own run ends as the carrier did. With no boundary left, or
//! nothing running, it runs as a followup.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_core::{Message, QueueMode, QueueOutcome, RunStatus};

#[tokio::test]
async fn a_steer_joins_the_running_turn_after_its_tool_batch_and_the_answer_follows_it() {
    // GIVEN a turn that calls a tool, a followup and two steers accepted behind it
    let f = fixture(
        vec![
            Script::Tools(vec![("c1", "echo", r#"{"x":1}"#)]),
            Script::Text("turned left, then right"),
            Script::Text("followup answer"),
        ],
        quick(),
    );
    let carrier = f.accept("drive somewhere").await;
    let followup = f.accept("and then?").await;
    let left = f.accept_as("turn left", QueueMode::Steer).await;
    let right = f.accept_as("then right", QueueMode::Steer).await;

    // WHEN the turn runs
    assert_eq!(f.execute(&carrier).await, TurnExit::Finished(RunStatus::Ok));

    // THEN the model's second call saw both steers, in acceptance order, after the tool result
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    let tail: Vec<_> = requests[1]
        .messages
        .iter()
        .rev()
        .take(3)
        .rev()
        .cloned()
        .collect();
    assert!(matches!(*tail[0], Message::Tool { .. }), "{tail:?}");
    assert_eq!(
        tail[1..],
        [Message::user("turn left"), Message::user("then right")]
    );
    // AND the answer comes after them in the transcript
    assert_eq!(
        f.roles().await,
        ["user", "assistant", "tool", "user", "user", "assistant"]
    );
    // AND each steer's run says where it went
    for steer in [&left, &right] {
        let r = f.run(&steer.run_id).await;
        assert_eq!(r.queue_outcome, QueueOutcome::Steered);
        assert_eq!(r.into_run_id.as_ref(), Some(&carrier.run_id));
    }

    // AND the followup still runs next; a steer delivered before it waits its turn
    assert_eq!(f.execute(&left).await, TurnExit::HandBack);
    assert_eq!(
        f.execute(&followup).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    // AND then each steer ends as its carrier did, without a model call
    for steer in [&left, &right] {
        assert_eq!(f.execute(steer).await, TurnExit::Finished(RunStatus::Ok));
        let r = f.run(&steer.run_id).await;
        assert_eq!(r.status, RunStatus::Ok);
        assert_eq!(r.payloads[0].text, "turned left, then right");
        assert_eq!(r.queue_outcome, QueueOutcome::Steered);
    }
    assert_eq!(f.model.requests().len(), 3);
    // AND a redelivery changes nothing
    assert_eq!(f.execute(&left).await, TurnExit::AlreadyDone);
    let session = f.session().await;
    assert_eq!((session.runs_accepted, session.runs_finished), (4, 4));
}

#[tokio::test]
async fn a_steer_runs_as_a_followup_when_the_turn_ends_before_a_boundary_or_nothing_runs() {
    let f = fixture(
        vec![
            Script::Text("first answer"),
            Script::Text("steer answered on its own"),
            Script::Text("idle steer answered"),
        ],
        quick(),
    );
    // GIVEN a turn without tools and a steer behind it
    let first = f.accept("hello").await;
    let steer = f.accept_as("also this", QueueMode::Steer).await;

    // WHEN the turn ends (no model boundary came) and the steer's message comes
    assert_eq!(f.execute(&first).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&steer).await, TurnExit::Finished(RunStatus::Ok));

    // THEN the steer ran as its own turn
    let r = f.run(&steer.run_id).await;
    assert_eq!((r.queue_outcome, r.into_run_id), (QueueOutcome::Ran, None));
    assert_eq!(r.payloads[0].text, "steer answered on its own");

    // AND a steer on an idle session runs at once, as its own turn
    let idle = f.accept_as("anyone there?", QueueMode::Steer).await;
    assert_eq!(f.execute(&idle).await, TurnExit::Finished(RunStatus::Ok));
    let r = f.run(&idle.run_id).await;
    assert_eq!(r.queue_outcome, QueueOutcome::Ran);
    assert_eq!(r.payloads[0].text, "idle steer answered");
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
}

/// The first call of the batch sends a steer (as a user would while it runs); the two after it
/// are plain echoes.
fn steering_batch(tool: &'static str) -> Vec<Script> {
    vec![
        Script::Tools(vec![
            ("c1", tool, r#"{"message":"go left instead"}"#),
            ("c2", "echo", r#"{"x":2}"#),
            ("c3", "echo", r#"{"x":3}"#),
        ]),
        Script::Text("going left"),
    ]
}

/// Accepts and runs the carrier turn of `f` (it must end `ok`); answers its tool results as
/// (call id, content, is error), in transcript order.
async fn run_carrier(f: &Fixture) -> Vec<(String, String, bool)> {
    let carrier = f.accept("drive").await;
    assert_eq!(f.execute(&carrier).await, TurnExit::Finished(RunStatus::Ok));
    f.tool_results()
        .await
        .into_iter()
        .map(|r| (r.id, r.content, r.is_error))
        .collect()
}

fn result(id: &str, content: &str, is_error: bool) -> (String, String, bool) {
    (id.to_owned(), content.to_owned(), is_error)
}

/// Runs the carrier of `f` and checks what every sequential case shares: the calls after the
/// steer got the skipped result, each paired in order, the steer joined after the results
/// and the answer after it.
async fn assert_later_calls_skipped(f: &Fixture) {
    let skipped = agentlane_agent::SKIPPED_FOR_STEER;
    assert_eq!(
        run_carrier(f).await,
        [
            result("c1", "steer sent", false),
            result("c2", skipped, true),
            result("c3", skipped, true),
        ]
    );
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "tool",
            "user",
            "assistant"
        ]
    );
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages.last().map(|m| m.message()),
        Some(&Message::user("go left instead"))
    );
}

#[tokio::test]
async fn with_sequential_tools_a_steer_waiting_before_a_launch_skips_the_calls_not_started() {
    // GIVEN a deployment that runs tools one at a time
    let f = fixture(
        steering_batch("steer_now"),
        RunnerConfig {
            sequential_tools: true,
            ..quick()
        },
    );
    // WHEN the first call sends a steer; THEN the two after it are skipped, not run
    assert_later_calls_skipped(&f).await;
}

#[tokio::test]
async fn a_batch_calling_a_sequential_tool_runs_one_call_at_a_time() {
    // GIVEN the default (concurrent) execution, and a tool that declares itself sequential
    let f = fixture(steering_batch("steer_now_seq"), quick());
    // WHEN it sends a steer; THEN the calls after it are skipped as in a sequential deployment
    assert_later_calls_skipped(&f).await;
}

#[tokio::test]
async fn in_a_concurrent_batch_every_call_runs_and_the_steer_joins_after_the_batch() {
    // GIVEN the default execution: the batch's calls launch together
    let f = fixture(steering_batch("steer_now"), quick());
    // WHEN the first call sends a steer; THEN nothing is skipped
    assert_eq!(
        run_carrier(&f).await,
        [
            result("c1", "steer sent", false),
            result("c2", r#"echo:{"x":2}"#, false),
            result("c3", r#"echo:{"x":3}"#, false),
        ]
    );
    // AND the steer still joins before the next model call
    assert_eq!(
        f.model.requests()[1].messages.last().map(|m| m.message()),
        Some(&Message::user("go left instead"))
    );
}
