//! Tool rounds: parallel calls keep their order; malformed and text tool calls are normalized;
//! unrepairable arguments get an error result.

use crate::support::*;
use agentlane_agent::TurnExit;
use agentlane_core::{Message, RunStatus};

#[tokio::test]
async fn parallel_tool_calls_run_and_results_keep_call_order() {
    let f = fixture(
        vec![
            Script::Tools(vec![
                ("c1", "echo", r#"{"n":1}"#),
                ("c2", "echo", r#"{"n":2}"#),
                ("c3", "nope", "{}"),
            ]),
            Script::Text("done"),
        ],
        config(),
    );
    let msg = f.accept("use tools").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "tool", "tool", "assistant"]
    );
    let results: Vec<(String, bool)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.id, r.is_error))
        .collect();
    assert_eq!(
        results,
        vec![
            ("c1".into(), false),
            ("c2".into(), false),
            ("c3".into(), true)
        ]
    );
    let second = &f.model.requests()[1];
    assert!(
        matches!(&*second.messages[2], Message::Tool { content, .. } if content == r#"echo:{"n":1}"#)
    );
}

#[tokio::test]
async fn malformed_and_text_tool_calls_are_normalized_before_they_run() {
    let f = fixture(
        vec![
            // a structured call with broken JSON, and a name with a `functions.` prefix
            Script::Tools(vec![
                ("c1", "echo", r#"{"a": 1,"#),
                ("c2", "functions.echo", r#"{"b":2}"#),
            ]),
            // a tool call written as text
            Script::Text(r#"<tool_call>{"name": "echo", "arguments": {"c": 3}}</tool_call>"#),
            Script::Text("all done"),
        ],
        config(),
    );
    let run = turn(&f, "use the tools").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    let results: Vec<(String, bool, String)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.name, r.is_error, r.content))
        .collect();
    // the truncated JSON was repaired and ran; the prefixed name was trimmed; the text call was promoted
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], ("echo".into(), false, r#"echo:{"a":1}"#.into()));
    assert_eq!(results[1], ("echo".into(), false, r#"echo:{"b":2}"#.into()));
    assert_eq!(results[2], ("echo".into(), false, r#"echo:{"c":3}"#.into()));
}

#[tokio::test]
async fn arguments_that_cannot_be_repaired_get_an_error_result_and_do_not_run() {
    let f = fixture(
        vec![
            Script::Tools(vec![
                ("c1", "echo", "not json at all"),
                ("c2", "echo", r#"{"ok":true}"#),
            ]),
            Script::Text("handled"),
        ],
        config(),
    );
    let run = turn(&f, "go").await;
    assert_eq!(run.status, RunStatus::Ok);
    let results: Vec<(String, bool)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.id, r.is_error))
        .collect();
    assert_eq!(results, [("c1".into(), true), ("c2".into(), false)]);
    let second = &f.model.requests()[1];
    assert!(second.messages.iter().any(|m| matches!(m.message(), Message::Tool { content, is_error: true, .. } if content.contains("invalid JSON"))));
}
