//! What the model is sent: compaction on overflow, the post-compaction loop guard, tool-result
//! caps, bootstrap context and the history limit.

use crate::support::*;
use agentlane_agent::RunnerConfig;
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_providers::FailoverReason;

#[tokio::test]
async fn a_context_overflow_compacts_the_earlier_history_and_the_run_continues() {
    let f = fixture(
        vec![
            Script::Text("first answer"),
            Script::Text("second answer"),
            Script::Fail(FailoverReason::ContextOverflow),
            Script::Text("The user asked two things; both were answered."),
            Script::Text("third answer, after compaction"),
            Script::Text("fourth answer"),
        ],
        config(),
    );
    turn(&f, "first question").await;
    turn(&f, "second question").await;
    let run = turn(&f, "third question").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    assert_eq!(run.payloads[0].text, "third answer, after compaction");
    assert_eq!(
        run.checkpoint.as_ref().unwrap()["retry"]["budgets"]["overflowCompactions"],
        1
    );

    let requests = f.model.requests();
    assert_eq!(requests.len(), 5, "2 turns + overflow + compaction + retry");
    let summarizing = &requests[3];
    assert_eq!(
        summarizing.system,
        agentlane_agent::context::compaction::COMPACTION_PROMPT
    );
    assert!(summarizing.tools.is_empty());
    assert!(
        matches!(&summarizing.messages[0], Message::User { content } if content.contains("first question") && content.contains("second answer"))
    );
    let retried = &requests[4].messages;
    assert!(
        matches!(&retried[0], Message::Compaction { summary, .. } if summary.starts_with("The user asked"))
    );
    assert_eq!(retried[1], Message::user("third question"));
    assert_eq!(
        retried[2],
        Message::user(agentlane_agent::retry::Continuation::AfterCompaction.instruction())
    );
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "compaction",
            "assistant"
        ]
    );
    let events = f
        .store
        .read_events(&f.tenant, &run.run_id, None, 100)
        .await
        .unwrap();
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .filter_map(|e| e.data["phase"].as_str())
        .collect();
    assert_eq!(phases, ["start", "end"]);

    // The next turn sees the summary instead of the compacted entries.
    turn(&f, "fourth question").await;
    let next = &f.model.requests()[5].messages;
    assert!(matches!(&next[0], Message::Compaction { .. }));
    assert_eq!(
        next.len(),
        4,
        "summary, third question + answer, fourth question: {next:?}"
    );
}

#[tokio::test]
async fn an_overflow_on_a_first_turn_cannot_compact_and_ends_the_run_clearly() {
    let f = fixture(
        vec![Script::Fail(FailoverReason::ContextOverflow)],
        config(),
    );
    let run = turn(&f, "a huge first message").await;
    assert_eq!(run.status, RunStatus::Error);
    assert_eq!(run.error.unwrap().code, "context_overflow");
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
    assert_eq!(
        f.model.requests().len(),
        1,
        "no compaction call without earlier history"
    );
}

#[tokio::test]
async fn the_same_tool_call_three_times_right_after_compaction_stops_the_run() {
    let same_call = |id| Script::Tools(vec![(id, "echo", r#"{"q":"same"}"#)]);
    let f = fixture(
        vec![
            Script::Text("earlier answer"),
            Script::Fail(FailoverReason::ContextOverflow),
            Script::Text("summary"),
            same_call("c1"),
            same_call("c2"),
            same_call("c3"),
            Script::Text("never reached"),
        ],
        config(),
    );
    turn(&f, "earlier question").await;
    let run = turn(&f, "loop please").await;
    assert_eq!(run.status, RunStatus::Error);
    let err = run.error.unwrap();
    assert_eq!(err.code, "tool_loop");
    assert!(err.message.contains("echo"), "{}", err.message);
    assert_eq!(
        f.model.requests().len(),
        6,
        "stopped before a fourth call of the loop"
    );
}

#[tokio::test]
async fn oversized_tool_results_are_capped_and_cut_to_fit_before_the_next_call() {
    let f = fixture_with(
        vec![
            Script::Tools(vec![
                ("c1", "echo", r#"{"huge":1}"#),
                ("c2", "echo", r#"{"huge":2}"#),
            ]),
            Script::Text("done"),
        ],
        config(),
        |router, model| {
            router
                .with_provider(model.clone())
                .with_context_window("scripted/m1", 8_000)
        },
    );
    let run = turn(&f, "fetch two big things").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    // persisted results are capped at 30 % of an 8 000-token window (9 600 characters)
    let persisted: Vec<usize> = f
        .tool_results()
        .await
        .iter()
        .map(|r| r.content.chars().count())
        .collect();
    assert_eq!(persisted.len(), 2);
    assert!(
        persisted.iter().all(|n| *n < 9_800 && *n > 9_600),
        "{persisted:?}"
    );
    // and the next call's prompt was cut further so it fits the budget
    let second = &f.model.requests()[1];
    let sent: usize = second
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.chars().count()),
            _ => None,
        })
        .sum();
    assert!(
        sent < 16_000,
        "the tool results sent were {sent} characters"
    );
    let events = f
        .store
        .read_events(&f.tenant, &run.run_id, None, 100)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.stream == EventStream::Compaction && e.data["phase"] == "truncate")
    );
}

#[tokio::test]
async fn bootstrap_context_is_in_the_system_prompt_and_history_is_limited_by_turns() {
    let f = fixture(
        vec![Script::Text("one"), Script::Text("two")],
        RunnerConfig {
            bootstrap_context: vec![("AGENTS.md".into(), "Answer in French.".into())],
            history_max_turns: Some(1),
            ..config()
        },
    );
    turn(&f, "first").await;
    let run = turn(&f, "second").await;
    assert_eq!(run.status, RunStatus::Ok);
    let second = &f.model.requests()[1];
    assert!(
        second
            .system
            .contains("# Context: AGENTS.md\nAnswer in French."),
        "{}",
        second.system
    );
    assert_eq!(
        second.messages,
        vec![Message::user("second")],
        "only the last turn is sent"
    );
    assert_eq!(f.roles().await.len(), 4, "the transcript keeps everything");
}
