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

/// A local HTTP tool endpoint that answers only after `delay`.
async fn slow_endpoint(delay: std::time::Duration) -> anyhow::Result<String> {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/slow", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/slow",
        post(move || async move {
            tokio::time::sleep(delay).await;
            axum::Json(json!({"status": "finally"}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Ok(url)
}

/// An agent `agent_id` with one HTTP tool `slow_lookup` at `url`, its timeout `timeout_ms`.
fn slow_agent(agent_id: &str, url: &str, timeout_ms: u64) -> Value {
    json!({
        "agentId": agent_id,
        "tools": {"http": [{
            "name": "slow_lookup",
            "description": "Looks something up, slowly.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
            "url": url,
            "timeoutMs": timeout_ms
        }]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_round_trip_a_tools_own_timeout_ends_its_call_and_the_run_deadline_caps_it()
-> anyhow::Result<()> {
    use reqwest::{Method, StatusCode};
    use std::time::{Duration, Instant};
    // GIVEN an HTTP tool endpoint that answers after 20 s, and a model that calls it once and
    // then answers from the result, whatever it is
    let url = slow_endpoint(Duration::from_secs(20)).await?;
    let scn = crate::support::scenario_with(|o| o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1"))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "ask the slow service", "hasToolResult": true},
               "response": {"content": "The slow service did not answer in time."}}),
        json!({"match": {"userMessage": "ask the slow service", "hasToolResult": false},
               "response": {"toolCalls": [{"id": "call_slow", "name": "slow_lookup", "arguments": {}}]}}),
    ])?;
    let a = scn.a();
    for (agent, timeout_ms) in [("quick", 1_000), ("patient", 60_000)] {
        let (status, body) = a
            .json(
                Method::POST,
                "/v1/agents",
                Some(slow_agent(agent, &url, timeout_ms)),
            )
            .await?;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    // WHEN a turn calls the tool whose definition says 1 s
    let started = Instant::now();
    let accepted = a
        .agent_with(
            json!({"sessionKey": "quick", "agentId": "quick", "message": "ask the slow service"}),
        )
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    let took = started.elapsed();

    // THEN the call ends as an error result after about a second, paired with its call, and
    // the loop goes on to the model's answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "The slow service did not answer in time.");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(8),
        "the call was cut at its own 1 s timeout, not the endpoint's 20 s: {took:?}"
    );
    let transcript = a.transcript("quick").await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let result = transcript
        .entries
        .iter()
        .find_map(|e| match &e.message {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool result");
    assert!(result.1, "{result:?}");
    assert!(result.0.contains("timed out"), "{result:?}");

    // WHEN a turn with a 3 s timeout calls the tool whose definition allows 60 s
    let started = Instant::now();
    let accepted = a
        .agent_with(json!({"sessionKey": "patient", "agentId": "patient",
                           "message": "ask the slow service", "timeoutSeconds": 3}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    let took = started.elapsed();

    // THEN the call is cut at the run's deadline, and the run ends `timeout` with every call
    // answered
    assert_eq!(run.status, RunStatus::Timeout, "{run:?}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(12),
        "cut at the run's 3 s deadline, not the tool's 60 s nor the endpoint's 20 s: {took:?}"
    );
    let transcript = a.transcript("patient").await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    Ok(())
}
