//! A turn where the model calls two tools at once, then answers from their results.

use crate::support::{LONG, TOOL_ANSWER, TOOL_PREAMBLE, assert_dense, assert_run_frame, scenario};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{check_pairing, is, message_text, transcript_items};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_tool_calls_are_run_recorded_in_order_and_answered() -> anyhow::Result<()> {
    // GIVEN a model that asks for the time in UTC and in Paris in one reply, then answers
    let scn = scenario()?;
    let a = scn.a();

    // WHEN the user asks for the time
    let accepted = a
        .agent("clocks", "what time is it in UTC and in Paris?")
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ends ok with the answer the model gave after seeing the tool results
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    let last = run.payloads.last().expect("a reply");
    assert_eq!(last.text, TOOL_ANSWER);
    assert!(run.payloads.iter().all(|p| !p.is_error), "{run:?}");
    assert_eq!(
        run.attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect::<Vec<_>>(),
        ["tool_calls", "ok"],
        "two model calls: {:?}",
        run.attempts
    );

    // AND the transcript reads user, assistant (2 calls), the 2 results in call order, answer
    let transcript = a.transcript("clocks").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "tool", "tool", "assistant"],
        "{transcript:#?}"
    );
    assert_dense(&transcript.seqs(), "transcript");
    assert!(
        transcript
            .entries
            .iter()
            .all(|e| e.run_id.as_str() == run.run_id)
    );
    let Message::Assistant {
        content,
        tool_calls,
        ..
    } = &transcript.entries[1].message
    else {
        unreachable!("checked by roles")
    };
    assert_eq!(content, TOOL_PREAMBLE);
    let calls: Vec<(&str, &str, Value)> = tool_calls
        .iter()
        .map(|c| {
            let args = serde_json::from_str(&c.arguments).expect("arguments are JSON");
            (c.id.as_str(), c.name.as_str(), args)
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("call_utc", "current_time", json!({"timezone": "UTC"})),
            (
                "call_paris",
                "current_time",
                json!({"timezone": "Europe/Paris"})
            ),
        ]
    );
    let mut results = Vec::new();
    for (entry, id) in transcript.entries[2..4]
        .iter()
        .zip(["call_utc", "call_paris"])
    {
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
            (tool_call_id.as_str(), name.as_str(), *is_error),
            (id, "current_time", false)
        );
        assert!(!content.trim().is_empty(), "a time was returned for {id}");
        results.push(content.clone());
    }
    match &transcript.entries[4].message {
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            assert_eq!(content, TOOL_ANSWER);
            assert!(tool_calls.is_empty());
        }
        other => panic!("the last entry is the answer: {other:?}"),
    }
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );

    // AND the events show each tool starting then ending, inside the run's lifecycle
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    for id in ["call_utc", "call_paris"] {
        let position = |wanted: &str| {
            events.iter().position(|e| {
                is(e, EventStream::Tool, wanted)
                    && e.data.get("toolCallId").and_then(Value::as_str) == Some(id)
            })
        };
        let start = position("start").unwrap_or_else(|| panic!("tool start for {id}: {events:?}"));
        let end = position("end").unwrap_or_else(|| panic!("tool end for {id}: {events:?}"));
        assert!(start < end, "{id} starts before it ends");
        assert_eq!(events[start].data["name"], "current_time");
        assert_ne!(events[end].data.get("isError"), Some(&Value::Bool(true)));
    }

    // AND the model was called exactly twice; the second call carried both results, in order
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(
        requests[0]
            .messages()
            .last()
            .and_then(|m| m["role"].as_str()),
        Some("user")
    );
    let second = requests[1].messages();
    assert!(second.len() >= 4, "{second:#?}");
    let tail = &second[second.len() - 4..];
    assert_eq!(tail[0]["role"], "user");
    assert_eq!(tail[1]["role"], "assistant");
    let ids: Vec<&str> = tail[1]["tool_calls"]
        .as_array()
        .expect("the assistant's tool calls are replayed")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["call_utc", "call_paris"]);
    for (message, (id, result)) in tail[2..]
        .iter()
        .zip(["call_utc", "call_paris"].iter().zip(&results))
    {
        assert_eq!(message["role"], "tool");
        assert_eq!(message["tool_call_id"], *id);
        assert_eq!(message_text(message).as_deref(), Some(result.as_str()));
    }
    Ok(())
}
