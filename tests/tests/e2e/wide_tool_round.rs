//! One model answer that asks for 60 tools at once: more writes than one store transaction
//! holds, so the runner commits the round in parts — and the run still ends `ok` with every
//! result recorded once, in call order (on SQLite and on DynamoDB + SQS).

use crate::support::{LONG, assert_dense, assert_run_frame, scenario};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{check_pairing, is, transcript_items};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const CALLS: usize = 60;
const ASK: &str = "sixty clocks please";
const PREAMBLE: &str = "Checking sixty clocks at once.";
const ANSWER: &str = "All sixty clocks agree.";
const ZONES: [&str; 4] = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York"];

fn call_id(i: usize) -> String {
    format!("call_{i:02}")
}

/// The model's answers: 60 `current_time` calls for the question, the answer once the results
/// are in.
fn fixtures() -> Vec<Value> {
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| {
            json!({
                "id": call_id(i),
                "name": "current_time",
                "arguments": {"timezone": ZONES[i % ZONES.len()]}
            })
        })
        .collect();
    vec![
        json!({
            "match": {"userMessage": ASK, "hasToolResult": true},
            "response": {"content": ANSWER}
        }),
        json!({
            "match": {"userMessage": ASK, "hasToolResult": false},
            "response": {"content": PREAMBLE, "toolCalls": calls}
        }),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_parallel_tool_calls_in_one_answer_all_land_once_and_the_run_ends_ok()
-> anyhow::Result<()> {
    // GIVEN a model that answers one question with 60 parallel tool calls, then a reply
    let scn = scenario()?;
    scn.mock.add_fixtures(fixtures())?;
    let a = scn.a();

    // WHEN the user asks it
    let accepted = a.agent("wide", ASK).await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ends ok with the model's reply after two model calls
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), ANSWER);
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["tool_calls", "ok"], "{:?}", run.attempts);

    // AND the transcript reads user, the assistant's 60 calls, their 60 results in call
    // order (each once, none an error), then the answer — dense, and paired
    let transcript = a.transcript("wide").await?;
    let mut roles = vec!["user", "assistant"];
    roles.extend(["tool"; CALLS]);
    roles.push("assistant");
    assert_eq!(transcript.roles(), roles);
    assert_dense(&transcript.seqs(), "transcript");
    let Message::Assistant { tool_calls, .. } = &transcript.entries[1].message else {
        unreachable!("checked by roles")
    };
    let asked: Vec<String> = tool_calls.iter().map(|c| c.id.clone()).collect();
    let want: Vec<String> = (0..CALLS).map(call_id).collect();
    assert_eq!(asked, want);
    let mut answered = Vec::new();
    for entry in &transcript.entries[2..2 + CALLS] {
        let Message::Tool {
            tool_call_id,
            name,
            content,
            is_error,
        } = &entry.message
        else {
            unreachable!("checked by roles")
        };
        assert_eq!(
            (name.as_str(), *is_error),
            ("current_time", false),
            "{content}"
        );
        assert!(!content.trim().is_empty(), "{tool_call_id} returned a time");
        answered.push(tool_call_id.clone());
    }
    assert_eq!(answered, want, "every result once, in call order");
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );

    // AND the events frame the run, with one tool start and one tool end per call
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    let mut phases: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for e in &events {
        for phase in ["start", "end"] {
            if is(e, EventStream::Tool, phase) {
                let id = e.data.get("toolCallId").and_then(Value::as_str);
                phases
                    .entry(id.unwrap_or("?").to_owned())
                    .or_default()
                    .push(phase);
            }
        }
    }
    assert_eq!(phases.len(), CALLS, "{phases:?}");
    assert!(
        phases.values().all(|p| p == &["start", "end"]),
        "{phases:?}"
    );

    // AND the model's second call carried all 60 results
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let results = requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(results, CALLS);
    Ok(())
}
