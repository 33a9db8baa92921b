//! Durable pauses (issue 20): a client tool's call pauses the run (`requires_action`) until the
//! caller posts its output; a gated tool's call until someone approves or denies it; an abort or
//! an expiry answers the pending calls for everyone. Every transcript stays paired. Both
//! backends.

use crate::support::{LONG, scenario, scenario_with};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{check_pairing, transcript_items};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// `agent.wait` as JSON (it returns at once for a paused run).
async fn wait_json(
    a: &agentlane_tests::Client,
    run_id: &str,
    timeout_ms: u64,
) -> anyhow::Result<Value> {
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agent.wait",
            Some(json!({"runId": run_id, "timeoutMs": timeout_ms})),
        )
        .await?;
    anyhow::ensure!(status.is_success(), "agent.wait: {status} {body}");
    Ok(body)
}

/// The results in a transcript, by call id: `(call id, content, is_error)`.
fn results(entries: &[agentlane_core::TranscriptEntry]) -> Vec<(String, String, bool)> {
    entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => Some((tool_call_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// `agent.wait` on a run that must pause: its answer (`status: requires_action`).
async fn paused_now(a: &agentlane_tests::Client, run_id: &str) -> anyhow::Result<Value> {
    let waited = wait_json(a, run_id, 30_000).await?;
    anyhow::ensure!(
        waited["status"] == "requires_action",
        "not paused: {waited}"
    );
    Ok(waited)
}

async fn answer(
    a: &agentlane_tests::Client,
    run_id: &str,
    body: Value,
) -> anyhow::Result<(reqwest::StatusCode, Value)> {
    Ok(a.json(
        Method::POST,
        &format!("/v1/runs/{run_id}/actions"),
        Some(body),
    )
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_pauses_the_run_until_its_output_is_posted() -> anyhow::Result<()> {
    // GIVEN a model that calls the turn's client tool, then answers from its output
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "where is my order", "hasToolResult": true},
               "response": {"content": "Your order has shipped."}}),
        json!({"match": {"userMessage": "where is my order", "hasToolResult": false},
               "response": {"content": "Looking it up.", "toolCalls": [
                   {"id": "call_lookup", "name": "lookup_order", "arguments": {"orderId": "42"}}]}}),
    ])?;
    let a = scn.a();
    let tools = json!([{"name": "lookup_order", "description": "Finds an order in the shop",
        "parameters": {"type": "object", "properties": {"orderId": {"type": "string"}}}}]);

    // WHEN a turn brings the client tool and the model calls it
    let accepted = a
        .agent_with(json!({"sessionKey": "shop", "message": "where is my order", "tools": tools}))
        .await?;
    let waited = wait_json(&a, &accepted.run_id, 30_000).await?;

    // THEN agent.wait returns at once with the required action, which is not a timeout
    assert_eq!(waited["status"], "requires_action", "{waited}");
    assert_eq!(waited["runStatus"], "requires_action", "{waited}");
    let calls = &waited["requiredAction"]["toolCalls"];
    assert_eq!(
        calls,
        &json!([{"id": "call_lookup", "name": "lookup_order",
                 "arguments": {"orderId": "42"}, "kind": "client"}]),
        "{waited}"
    );
    assert!(waited["requiredAction"]["expiresAt"].as_u64().unwrap_or(0) > accepted.accepted_at);
    let (_, run) = a
        .json(Method::GET, &format!("/v1/runs/{}", accepted.run_id), None)
        .await?;
    assert_eq!(run["livenessState"], "paused", "{run}");
    assert_eq!(run["requiredAction"]["toolCalls"][0]["id"], "call_lookup");
    assert!(run.get("actionAnswer").is_none(), "{run}");
    let events = a.events(&accepted.run_id).await?;
    assert!(
        events
            .iter()
            .any(|e| e.data.get("phase").and_then(Value::as_str) == Some("requires_action")),
        "a lifecycle requires_action event: {events:?}"
    );
    // The model was offered the client tool.
    let requests = scn.mock.model_requests()?;
    assert!(
        requests[0]
            .tool_names()
            .contains(&"lookup_order".to_owned()),
        "{:?}",
        requests[0].tool_names()
    );

    // AND a followup sent meanwhile waits behind the paused run
    let followup = a.agent("shop", "and the invoice?").await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(a.run(&followup.run_id).await?.status, RunStatus::Queued);

    // AND an answer that leaves a call out, or names an unknown one, is refused naming them
    let (status, body) = answer(&a, &accepted.run_id, json!({})).await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("call_lookup"), "{body}");
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_lookup", "output": "x"},
                               {"toolCallId": "call_nope", "output": "y"}]}),
    )
    .await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("call_nope"), "{body}");
    assert_eq!(
        a.run(&accepted.run_id).await?.status,
        RunStatus::RequiresAction,
        "a refused answer changes nothing"
    );

    // WHEN the caller posts the output (twice: the same body is the same answer)
    let output = json!({"toolOutputs": [{"toolCallId": "call_lookup",
                                         "output": "order 42: shipped on Monday"}]});
    let (status, first) = answer(&a, &accepted.run_id, output.clone()).await?;
    assert_eq!(status, 202, "{first}");
    let (status, again) = answer(&a, &accepted.run_id, output).await?;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["answeredAt"], first["answeredAt"]);
    let (status, other) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_lookup", "output": "something else"}]}),
    )
    .await?;
    assert_eq!(
        status, 409,
        "a different answer after one was accepted: {other}"
    );

    // THEN the run resumes with the output as the tool result and ends with the answer
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Your order has shipped.");
    let requests = scn.mock.model_requests()?;
    let resumed = requests
        .iter()
        .find(|r| r.body.to_string().contains("order 42: shipped on Monday"))
        .expect("the resumed model call carries the client's output");
    assert_eq!(
        resumed.last_user_text().as_deref(),
        Some("where is my order")
    );

    // AND the followup runs after it, and the transcript pairs every call with one result
    let next = a.wait_done(&followup.run_id, LONG).await?;
    assert_eq!(next.status, RunStatus::Ok, "{next:?}");
    let transcript = a.transcript("shop").await?;
    assert_eq!(
        results(&transcript.entries),
        vec![(
            "call_lookup".to_owned(),
            "order 42: shipped on Monday".to_owned(),
            false
        )]
    );
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let order: Vec<&str> = transcript
        .entries
        .iter()
        .map(|e| e.run_id.as_str())
        .collect();
    let last_of_first = order
        .iter()
        .rposition(|r| *r == accepted.run_id)
        .unwrap_or(0);
    let first_of_next = order
        .iter()
        .position(|r| *r == followup.run_id)
        .unwrap_or(0);
    assert!(last_of_first < first_of_next, "{order:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_runs_once_approved_and_a_denied_one_never_runs() -> anyhow::Result<()> {
    // GIVEN an agent whose current_time calls need approval, and a model that calls it twice
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "two clocks please", "hasToolResult": true},
               "response": {"content": "One clock, one refusal."}}),
        json!({"match": {"userMessage": "two clocks please", "hasToolResult": false},
               "response": {"content": "Asking for both.", "toolCalls": [
                   {"id": "call_utc", "name": "current_time", "arguments": {"timezone": "UTC"}},
                   {"id": "call_tokyo", "name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}]}}),
    ])?;
    let a = scn.a();
    let (status, agent) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "careful", "approval": {"tools": ["current_*"]}})),
        )
        .await?;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["approval"], json!({"tools": ["current_*"]}));

    // WHEN a turn of the agent pauses for both calls
    let accepted = a
        .agent_with(
            json!({"sessionKey": "clocks", "message": "two clocks please",
                           "agentId": "careful"}),
        )
        .await?;
    let waited = paused_now(&a, &accepted.run_id).await?;
    let kinds: Vec<(&str, &str)> = waited["requiredAction"]["toolCalls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap_or(""),
                        c["kind"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        kinds,
        [("call_utc", "approval"), ("call_tokyo", "approval")]
    );
    // Nothing ran yet.
    assert!(results(&a.transcript("clocks").await?.entries).is_empty());

    // AND an output where an approval is due is refused
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_utc", "output": "12:00"}],
               "approvals": [{"toolCallId": "call_tokyo", "approve": true}]}),
    )
    .await?;
    assert_eq!(status, 400, "{body}");

    // WHEN one is approved and the other denied
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"approvals": [{"toolCallId": "call_utc", "approve": true},
                             {"toolCallId": "call_tokyo", "approve": false, "reason": "not today"}]}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");

    // THEN the approved call ran once, the denied one answered "Denied: not today"
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "One clock, one refusal.");
    let transcript = a.transcript("clocks").await?;
    let mut got = results(&transcript.entries);
    got.sort();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        (
            "call_tokyo".to_owned(),
            "Denied: not today".to_owned(),
            true
        )
    );
    assert_eq!(got[1].0, "call_utc");
    assert!(
        !got[1].2 && !got[1].1.trim().is_empty(),
        "the approved call ran: {got:?}"
    );
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let events = a.events(&accepted.run_id).await?;
    let ends = events
        .iter()
        .filter(|e| {
            e.data.get("phase").and_then(Value::as_str) == Some("end")
                && e.data.get("toolCallId").and_then(Value::as_str) == Some("call_utc")
        })
        .count();
    assert_eq!(ends, 1, "the approved call ran exactly once: {events:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_while_paused_ends_the_run_with_every_call_paired() -> anyhow::Result<()> {
    // GIVEN a run paused on a client tool
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![json!({"match": {"userMessage": "open the page"},
        "response": {"toolCalls": [
            {"id": "call_open", "name": "open_page", "arguments": {"url": "https://example.com"}}]}})])?;
    let a = scn.a();
    let accepted = a
        .agent_with(json!({"sessionKey": "browser", "message": "open the page",
                           "tools": [{"name": "open_page"}]}))
        .await?;
    paused_now(&a, &accepted.run_id).await?;

    // WHEN it is aborted
    assert_eq!(a.abort(&accepted.run_id).await?, 202);

    // THEN it ends aborted, its pending call answered, and a late answer is refused
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    let transcript = a.transcript("browser").await?;
    let got = results(&transcript.entries);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].1.starts_with("Aborted") && got[0].2, "{got:?}");
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_open", "output": "opened"}]}),
    )
    .await?;
    assert_eq!(status, 409, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_aborts_a_paused_run_and_runs_before_the_followup_queued_behind_it()
-> anyhow::Result<()> {
    // GIVEN a run paused on a client tool, and a followup queued behind it
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "fill the form"},
               "response": {"toolCalls": [
                   {"id": "call_form", "name": "fill_form", "arguments": {"field": "name"}}]}}),
        json!({"match": {"userMessage": "stop, do this instead"},
               "response": {"content": "Doing it instead."}}),
        json!({"match": {"userMessage": "and then this"},
               "response": {"content": "Then this, done."}}),
    ])?;
    let a = scn.a();
    let paused = a
        .agent_with(json!({"sessionKey": "form", "message": "fill the form",
                           "tools": [{"name": "fill_form"}]}))
        .await?;
    paused_now(&a, &paused.run_id).await?;
    let followup = a.agent("form", "and then this").await?;

    // WHEN an interrupt arrives for the session
    let interrupt = a
        .agent_with(
            json!({"sessionKey": "form", "message": "stop, do this instead",
                           "queueMode": "interrupt"}),
        )
        .await?;

    // THEN the paused run ends aborted (interrupted), its pending call paired
    let run = a.wait_done(&paused.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    assert_eq!(
        run.error.as_ref().map(|e| e.code.as_str()),
        Some("interrupted"),
        "{run:?}"
    );
    // AND the interrupt runs, then the followup, in that order
    let interrupted = a.wait_done(&interrupt.run_id, LONG).await?;
    assert_eq!(interrupted.status, RunStatus::Ok, "{interrupted:?}");
    assert_eq!(interrupted.reply_text(), "Doing it instead.");
    let after = a.wait_done(&followup.run_id, LONG).await?;
    assert_eq!(after.status, RunStatus::Ok, "{after:?}");
    assert!(
        after.started_at >= interrupted.ended_at,
        "the followup ran after the interrupt: {after:?} {interrupted:?}"
    );
    let transcript = a.transcript("form").await?;
    let got = results(&transcript.entries);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].1.starts_with("Aborted") && got[0].2, "{got:?}");
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_pause_expires_and_the_run_goes_on() -> anyhow::Result<()> {
    // GIVEN an agent whose pauses last one second, and the supervisor sweeping often
    let scn = scenario_with(|o| o.env("AGENTLANE_SWEEP_INTERVAL_MS", "200"))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "send the mail", "hasToolResult": true},
               "response": {"content": "Nobody approved, so I did not send it."}}),
        json!({"match": {"userMessage": "send the mail", "hasToolResult": false},
               "response": {"toolCalls": [
                   {"id": "call_time", "name": "current_time", "arguments": {}}]}}),
    ])?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "mailer",
                        "approval": {"tools": ["current_time"], "timeoutSeconds": 1}})),
        )
        .await?;
    assert_eq!(status, 201, "{body}");

    // WHEN a run pauses and nobody answers
    let accepted = a
        .agent_with(json!({"sessionKey": "mail", "message": "send the mail", "agentId": "mailer"}))
        .await?;

    // THEN after its expiry the call is answered "Expired" and the model says so
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Nobody approved, so I did not send it.");
    let transcript = a.transcript("mail").await?;
    let got = results(&transcript.entries);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].1.starts_with("Expired") && got[0].2, "{got:?}");
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"approvals": [{"toolCallId": "call_time", "approve": true}]}),
    )
    .await?;
    assert_eq!(status, 409, "too late: {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_tools_and_policies_are_refused_naming_the_field() -> anyhow::Result<()> {
    let scn = scenario()?;
    let a = scn.a();
    let cases = [
        (
            "/v1/agent",
            json!({"sessionKey": "s", "message": "m", "tools": [{"name": "bad name"}]}),
            "tools[0].name",
        ),
        (
            "/v1/agent",
            json!({"sessionKey": "s", "message": "m", "tools": [{"name": "current_time"}]}),
            "tools[0].name",
        ),
        (
            "/v1/agent",
            json!({"sessionKey": "s", "message": "m",
                   "tools": [{"name": "x", "parameters": {"type": "string"}}]}),
            "tools[0].parameters",
        ),
        (
            "/v1/agents",
            json!({"agentId": "a1", "tools": {"client": [{"name": "x"}, {"name": "x"}]}}),
            "tools.client[1].name",
        ),
        (
            "/v1/agents",
            json!({"agentId": "a2", "approval": {"tools": ["a*b"]}}),
            "approval.tools",
        ),
        (
            "/v1/agents",
            json!({"agentId": "a3", "approval": {"tools": ["x"], "timeoutSeconds": 0}}),
            "approval.timeoutSeconds",
        ),
    ];
    for (path, body, field) in cases {
        let (status, answer) = a.json(Method::POST, path, Some(body.clone())).await?;
        assert_eq!(status, 400, "{body} → {answer}");
        assert!(answer.to_string().contains(field), "{body} → {answer}");
    }
    // A run that never paused takes no answer; an unknown run is 404.
    let accepted = a.agent("plain", "hello").await?;
    a.wait_done(&accepted.run_id, LONG).await?;
    let (status, _) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "c", "output": "o"}]}),
    )
    .await?;
    assert_eq!(status, 409);
    let (status, _) = answer(
        &a,
        "run_00000000000000000000000000000000",
        json!({"toolOutputs": []}),
    )
    .await?;
    assert_eq!(status, 404);
    Ok(())
}

/// The AWS requests in `log` from line `from` on, by operation (`X-Amz-Target` or method+path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_costs_no_aws_request_while_it_waits() -> anyhow::Result<()> {
    // (Always on the emulator; the AWS pass of the suite would only repeat it.)
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN a server on DynamoDB + SQS whose every AWS request goes through a logging proxy
    let log = crate::support::AwsRequestLog::start().await?;
    // How long the run waits (AGENTLANE_PAUSE_PROBE_SECS, 5 by default; 60 for the report).
    let wait_secs = std::env::var("AGENTLANE_PAUSE_PROBE_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(5);
    let result = async {
        let scn = scenario_with(|o| {
            o.aws_backend()
                .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
        })?;
        scn.mock.add_fixtures(vec![
            json!({"match": {"userMessage": "pay the bill", "hasToolResult": true},
                   "response": {"content": "Paid."}}),
            json!({"match": {"userMessage": "pay the bill", "hasToolResult": false},
                   "response": {"toolCalls": [
                       {"id": "call_pay", "name": "pay", "arguments": {"amount": 12}}]}}),
        ])?;
        let a = scn.a();
        let accepted = a
            .agent_with(json!({"sessionKey": "bill", "message": "pay the bill",
                               "tools": [{"name": "pay"}]}))
            .await?;
        let waited = wait_json(&a, &accepted.run_id, 30_000).await?;
        anyhow::ensure!(waited["status"] == "requires_action", "{waited}");

        // WHEN the run waits
        tokio::time::sleep(Duration::from_millis(500)).await;
        let start = log.len();
        tokio::time::sleep(Duration::from_secs(wait_secs)).await;
        let waiting = log.since(start);

        // THEN nothing but the lane worker's receive poll (on Lambda: the event source
        // mapping's, not a function's) and the cron ticker's due-job query reached AWS
        let others: Vec<(&String, &u32)> = waiting
            .iter()
            .filter(|(op, _)| !matches!(op.as_str(), "ReceiveMessage" | "Query"))
            .collect();
        assert!(others.is_empty(), "requests while paused: {waiting:?}");
        eprintln!(
            "AWS requests in {wait_secs} s of pause (serve's own polls included): {waiting:?}"
        );

        // AND the answer and the resume are a handful of requests
        let before = log.len();
        let (status, body) = answer(
            &a,
            &accepted.run_id,
            json!({"toolOutputs": [{"toolCallId": "call_pay", "output": "paid 12"}]}),
        )
        .await?;
        anyhow::ensure!(status == 202, "{body}");
        let after_answer = log.since(before);
        let run = a.wait_done(&accepted.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Ok);
        let resume = log.since(before);
        eprintln!(
            "AWS requests of the answer: {after_answer:?}; answer + resume to the end: {resume:?}"
        );
        assert_eq!(
            after_answer.get("SendMessage"),
            Some(&1),
            "{after_answer:?}"
        );
        anyhow::Ok(())
    }
    .await;
    drop(log);
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_spent_paused_does_not_count_against_the_runs_own_timeout() -> anyhow::Result<()> {
    // GIVEN a turn with a 1 s timeout whose model calls the turn's client tool
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "check the fridge", "hasToolResult": true},
               "response": {"content": "You have milk."}}),
        json!({"match": {"userMessage": "check the fridge", "hasToolResult": false},
               "response": {"toolCalls": [{"id": "call_fridge", "name": "open_fridge", "arguments": {}}]}}),
    ])?;
    let a = scn.a();
    let accepted = a
        .agent_with(
            json!({"sessionKey": "kitchen", "message": "check the fridge",
                           "timeoutSeconds": 1, "tools": [{"name": "open_fridge"}]}),
        )
        .await?;
    paused_now(&a, &accepted.run_id).await?;

    // WHEN the answer comes 2.5 s later (past the timeout, had the wait counted)
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, body) = answer(
        &a,
        &accepted.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_fridge", "output": "milk"}]}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");

    // THEN the run goes on and answers: only the time it ran counts
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "You have milk.");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_sent_while_paused_reaches_the_model_right_after_the_tool_results()
-> anyhow::Result<()> {
    // GIVEN a run paused on a client tool
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "book a table", "hasToolResult": false},
               "response": {"toolCalls": [{"id": "call_book", "name": "book", "arguments": {"seats": 2}}]}}),
        json!({"match": {"userMessage": "make it for four"},
               "response": {"content": "Booked, and noted: four seats."}}),
    ])?;
    let a = scn.a();
    let paused = a
        .agent_with(json!({"sessionKey": "dinner", "message": "book a table",
                           "tools": [{"name": "book"}]}))
        .await?;
    paused_now(&a, &paused.run_id).await?;

    // WHEN a steer arrives while it waits, then the client's output
    let steer = a
        .agent_with(
            json!({"sessionKey": "dinner", "message": "make it for four",
                           "queueMode": "steer"}),
        )
        .await?;
    let (status, body) = answer(
        &a,
        &paused.run_id,
        json!({"toolOutputs": [{"toolCallId": "call_book", "output": "booked for 2"}]}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");

    // THEN the resumed run's next model request has the tool result, then the steer
    let run = a.wait_done(&paused.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Booked, and noted: four seats.");
    let requests = scn.mock.model_requests()?;
    let last = requests
        .last()
        .map(|r| r.roles_and_texts())
        .unwrap_or_default();
    let tail: Vec<&str> = last
        .iter()
        .rev()
        .take(2)
        .map(|(role, _)| role.as_str())
        .collect();
    assert_eq!(
        tail,
        ["user", "tool"],
        "the steer right after the result: {last:?}"
    );
    assert_eq!(
        last.last().map(|(_, t)| t.as_str()),
        Some("make it for four")
    );
    // AND the steer ends with the run that carried it (agent.wait resolves with the carrier)
    let steered = wait_json(&a, &steer.run_id, 30_000).await?;
    assert_eq!(steered["runStatus"], "ok", "{steered}");
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", steer.run_id), None)
        .await?;
    assert_eq!(view["queueOutcome"], "steered", "{view}");
    assert_eq!(view["intoRunId"], json!(paused.run_id), "{view}");
    let transcript = a.transcript("dinner").await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    Ok(())
}
