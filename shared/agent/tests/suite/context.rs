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
        matches!(&*summarizing.messages[0], Message::User { content } if content.contains("first question") && content.contains("second answer"))
    );
    let retried = &requests[4].messages;
    assert!(
        matches!(&*retried[0], Message::Compaction { summary, .. } if summary.starts_with("The user asked"))
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
    assert!(matches!(&*next[0], Message::Compaction { .. }));
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
        .filter_map(|m| match m.message() {
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

/// 40 rounds of `echo` reading a page of 2 400 characters each, then a final answer.
fn forty_pages() -> Vec<Script> {
    let mut script: Vec<Script> = (1..=40)
        .map(|k| {
            Script::Calls(vec![agentlane_core::ToolCall {
                id: format!("call_{k}"),
                name: "echo".into(),
                arguments: format!(r#"{{"page":{k}}}"#),
            }])
        })
        .collect();
    script.push(Script::Final("read all 40 pages"));
    script
}

#[tokio::test]
async fn a_tool_loop_that_fills_the_window_compacts_its_own_rounds_and_goes_on() {
    // GIVEN a 16 000-token window and a model that reads 40 pages of 2 400 characters
    let mut script = vec![Script::Text("an earlier answer")];
    script.extend(forty_pages());
    let f = fixture_with(script, config(), |router, model| {
        router
            .with_provider(model.clone())
            .with_context_window("scripted/m1", 16_000)
    });
    turn(&f, "an earlier question").await;

    // WHEN the loop runs
    let run = turn(&f, "read the 40 pages").await;

    // THEN it ends ok with the answer, within the overflow-compaction budget
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    assert_eq!(run.payloads[0].text, "read all 40 pages");
    let budgets = &run.checkpoint.as_ref().unwrap()["retry"]["budgets"];
    let summaries = budgets["overflowCompactions"].as_u64().unwrap();
    assert!((1..=3).contains(&summaries), "{budgets}");
    assert!(
        budgets["earlierRoundCuts"].as_u64().unwrap() >= 1,
        "{budgets}"
    );

    // AND every request fitted the window's prompt budget, ended with the latest result whole,
    // and kept every call paired (the scripted model checks the pairing)
    let requests = f.model.requests();
    let summarizing = |r: &&agentlane_providers::ModelRequest| {
        r.system == agentlane_agent::context::compaction::COMPACTION_PROMPT
    };
    assert_eq!(
        requests.iter().filter(summarizing).count() as u64,
        summaries
    );
    let attempts: Vec<_> = requests
        .iter()
        .skip(1)
        .filter(|r| !summarizing(r))
        .collect();
    assert_eq!(attempts.len(), 41);
    for (k, request) in attempts.iter().enumerate().skip(1) {
        let tokens = agentlane_agent::context::tokens::estimate_tokens(request);
        assert!(tokens < 8_000, "request {k}: {tokens} tokens");
        let Some(Message::Tool {
            tool_call_id,
            content,
            ..
        }) = request.messages.last().map(|m| m.message())
        else {
            panic!("request {k} ends with a tool result")
        };
        assert_eq!(tool_call_id, &format!("call_{k}"));
        assert!(content.len() > 2_400, "the latest result is whole");
    }
    let last = attempts[40];
    assert!(
        matches!(&*last.messages[0], Message::Compaction { summary, .. }
            if summary.contains(AUTO_SUMMARY) && summary.contains("read the 40 pages")),
        "the summary carries the run's prompt verbatim: {:?}",
        last.messages[0]
    );

    // AND the transcript keeps every round whole, with the summaries written in the run
    let transcript = f.transcript().await;
    let ours: Vec<&Message> = transcript
        .iter()
        .filter(|e| e.run_id == run.run_id)
        .map(|e| &e.message)
        .collect();
    let whole = ours
        .iter()
        .filter(|m| matches!(m, Message::Tool { content, .. } if content.len() > 2_400))
        .count();
    assert_eq!(whole, 40);
    let written = ours
        .iter()
        .filter(|m| matches!(m, Message::Compaction { .. }))
        .count() as u64;
    assert_eq!(written, summaries);

    // AND the events show the cuts and the summaries
    let events = f
        .store
        .read_events(&f.tenant, &run.run_id, None, 1_000)
        .await
        .unwrap();
    let compaction: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .filter_map(|e| Some((e.data["phase"].as_str()?, e.data["scope"].as_str()?)))
        .collect();
    assert!(compaction.contains(&("truncate", "run")), "{compaction:?}");
    assert!(compaction.contains(&("end", "run")), "{compaction:?}");

    // AND the next turn starts from the latest summary, its rounds still paired
    f.model
        .script
        .lock()
        .unwrap()
        .push_back(Script::Final("next answer"));
    let next = turn(&f, "what did page 40 say?").await;
    assert_eq!(next.status, RunStatus::Ok, "{:?}", next.error);
    let requests = f.model.requests();
    let sent = &requests.last().unwrap().messages;
    assert!(
        matches!(&*sent[0], Message::Compaction { .. }),
        "{:?}",
        sent[0]
    );
    assert_eq!(
        sent.last().map(|m| m.message()),
        Some(&Message::user("what did page 40 say?"))
    );
}

#[tokio::test]
async fn a_tool_loop_that_outgrows_the_compaction_budget_ends_context_overflow_saying_what_was_tried()
 {
    // GIVEN a 4 000-token window, soon full again after each summary, and a model that refuses
    // a prompt over its window
    let f = fixture_with(forty_pages(), config(), |router, model| {
        router
            .with_provider(model.clone())
            .with_context_window("scripted/m1", 4_000)
    });
    *f.model.window.lock().unwrap() = Some(4_000);

    // WHEN the loop runs
    let run = turn(&f, "read the pages").await;

    // THEN it ends context_overflow once its three summaries are spent, saying what was tried
    assert_eq!(run.status, RunStatus::Error);
    let error = run.error.unwrap();
    assert_eq!(error.code, "context_overflow");
    assert!(
        error.message.contains(
            "after 3 compactions of the earlier history and of this run's earlier tool rounds"
        ),
        "{}",
        error.message
    );
    assert!(error.message.contains("were cut"), "{}", error.message);
    let summaries = f
        .model
        .requests()
        .iter()
        .filter(|r| r.system == agentlane_agent::context::compaction::COMPACTION_PROMPT)
        .count();
    assert_eq!(summaries, 3);
}

#[tokio::test]
async fn a_pickup_after_a_crash_resumes_from_the_summary_written_inside_the_run() {
    use agentlane_core::{Clock, Commit, LockAttempt, SystemClock, ToolCall, TranscriptEntry};
    let f = fixture(vec![Script::Text("answer after the crash")], config());
    let msg = f.accept("read three pages").await;
    // GIVEN a pickup that ran three rounds, summarised the first two inside the run, asked for
    // a fourth call, and died holding the lock
    let LockAttempt::Acquired(dead, _) = f
        .store
        .acquire_lock(&f.tenant, &f.key, "dead-runner", 300, SystemClock.now_ms())
        .await
        .unwrap()
    else {
        panic!("the lock is free")
    };
    let entry = |seq, message| TranscriptEntry {
        seq,
        run_id: msg.run_id.clone(),
        ts: 1,
        message,
    };
    let call = |id: &str| Message::Assistant {
        content: String::new(),
        reasoning: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: "{}".into(),
        }],
        model: None,
    };
    let result = |id: &str| Message::Tool {
        tool_call_id: id.into(),
        name: "echo".into(),
        content: format!("page {id}"),
        is_error: false,
    };
    let summary = Message::Compaction {
        summary: "pages c1 and c2 were read".into(),
        through_seq: 4,
        tokens_before: 0,
        tokens_after: 0,
    };
    let written = vec![
        Message::user("read three pages"),
        call("c1"),
        result("c1"),
        call("c2"),
        result("c2"),
        call("c3"),
        result("c3"),
        summary.clone(),
        call("c4"),
    ];
    let transcript = written
        .into_iter()
        .enumerate()
        .map(|(seq, m)| entry(seq as u64, m))
        .collect();
    f.store
        .commit(
            &dead,
            Commit {
                transcript,
                ..Commit::default()
            },
        )
        .await
        .unwrap();

    // WHEN the message is redelivered after the lease expired
    assert_eq!(
        f.execute(&msg).await,
        agentlane_agent::TurnExit::Finished(RunStatus::Ok)
    );

    // THEN the model saw the summary, the rounds after it and the dangling call answered;
    // nothing was written twice
    let requests = f.model.requests();
    assert_eq!(requests.len(), 1, "no summary is made again");
    let sent = &requests[0].messages;
    assert_eq!(sent[0], summary);
    assert_eq!(&sent[1..3], &[call("c3"), result("c3")]);
    assert_eq!(sent[3], call("c4"));
    assert!(
        matches!(&*sent[4], Message::Tool { tool_call_id, is_error: true, .. } if tool_call_id == "c4")
    );
    let t = f.transcript().await;
    assert!(t.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "compaction",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}

#[tokio::test]
async fn a_provider_overflow_in_a_tool_loop_compacts_the_runs_rounds_and_the_loop_goes_on() {
    // GIVEN a first turn of 8 page reads on a model whose real window (3 000 tokens) is far
    // smaller than the one configured (so the precheck lets every prompt through)
    let mut script: Vec<Script> = forty_pages().into_iter().take(8).collect();
    script.push(Script::Final("read 8 pages"));
    let f = fixture(script, config());
    *f.model.window.lock().unwrap() = Some(3_000);

    // WHEN the loop runs
    let run = turn(&f, "read 8 pages").await;

    // THEN each overflow compacts the run's own earlier rounds and the loop goes on to the end
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    assert_eq!(run.payloads[0].text, "read 8 pages");
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    let overflows = outcomes
        .iter()
        .filter(|o| **o == "context_overflow")
        .count();
    assert!((1..=3).contains(&overflows), "{outcomes:?}");
    assert_eq!(
        outcomes.iter().filter(|o| **o == "tool_calls").count(),
        8,
        "{outcomes:?}"
    );
    let written = f
        .transcript()
        .await
        .iter()
        .filter(|e| matches!(e.message, Message::Compaction { .. }))
        .count();
    assert!(written >= 1, "a summary was written inside the run");
    // no instruction to give the final answer now was sent into the tool loop
    let instructed = f.model.requests().iter().any(|r| {
        r.messages.iter().any(|m| {
            *m == Message::user(agentlane_agent::retry::Continuation::AfterCompaction.instruction())
        })
    });
    assert!(!instructed);
}
