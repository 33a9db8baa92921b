//! Context overflow seen from outside: the runner compacts the earlier history with a real model
//! call, writes a compaction entry, and the run continues from the summary.

use crate::support::{LONG, SERVER_BIN};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{Aimock, Fixtures, Scenario, Server, ServerOptions, message_text, phase};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_turn_compacts_the_earlier_history_and_answers() -> anyhow::Result<()> {
    // GIVEN a session with one finished turn, and a model that refuses the next prompt as too long
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/compaction.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let server = Server::start(ServerOptions::new(SERVER_BIN).model_server(&mock))?;
    let scn = Scenario { server, mock };
    let a = scn.a();
    let first = a.agent("long-talk", "cmp-one").await?;
    let first = a.wait_done(&first.run_id, LONG).await?;
    assert_eq!(first.status, RunStatus::Ok, "{first:?}");

    // WHEN the second turn overflows the context window
    let second = a.agent("long-talk", "cmp-two").await?;
    let run = a.wait_done(&second.run_id, LONG).await?;

    // THEN the runner compacts and the turn still ends ok with the answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Second answer, after compaction.");
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["context_overflow", "ok"]);
    // AND the summarizing call is in the run's usage and cost (it is no attempt of the ledger)
    let (_, view) = a
        .json(
            reqwest::Method::GET,
            &format!("/v1/runs/{}", second.run_id),
            None,
        )
        .await?;
    let attempts_cost: f64 = view["attempts"]
        .as_array()
        .map(|all| all.iter().filter_map(|a| a["costUsd"].as_f64()).sum())
        .unwrap_or(0.0);
    let run_cost = view["costUsd"].as_f64().unwrap_or(0.0);
    assert!(
        run_cost > attempts_cost,
        "the summary's cost counts: run {run_cost}, attempts {attempts_cost}: {view}"
    );
    // exactly: turn one, the overflowing request, the summarizing call, the retry
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let summarizing = &requests[2];
    assert!(
        summarizing.body.get("tools").is_none(),
        "the summarizing call offers no tools: {}",
        summarizing.body
    );
    let retried = &requests[3];
    let first_text = message_text(&retried.messages()[1]).unwrap_or_default();
    assert!(
        first_text.contains("Earlier, the user asked about cmp-one"),
        "the retry starts from the summary: {first_text}"
    );
    // AND the transcript keeps every entry plus one compaction entry, in order
    let transcript = a.transcript("long-talk").await?;
    let roles = transcript.roles();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "compaction", "assistant"]
    );
    assert!(matches!(
        &transcript.entries[3].message,
        Message::Compaction { through_seq: 1, .. }
    ));
    // AND the run's events show the compaction
    let events = a.events(&run.run_id).await?;
    let compaction: Vec<&str> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .filter_map(phase)
        .collect();
    assert_eq!(compaction, ["start", "end"]);
    Ok(())
}

/// Serves page `n` of a long document: 2 400 characters that name the page.
async fn page(axum::Json(args): axum::Json<serde_json::Value>) -> String {
    let n = args["page"].as_u64().unwrap_or(0);
    format!("page {n}: {}", "lorem ipsum ".repeat(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_loop_of_forty_rounds_in_a_16k_window_compacts_its_own_rounds_and_ends_ok()
-> anyhow::Result<()> {
    use serde_json::json;
    // GIVEN a model with a 16 000-token window that reads a 40-page document one page a call
    // (2 400 characters a page: together 24 000 tokens, more than the window), an agent whose
    // HTTP tool serves the pages, and a summarizer answer for compaction calls
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/page", listener.local_addr()?);
    let app = axum::Router::new().route("/page", axum::routing::post(page));
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    let call =
        |k: u32| json!({"id": format!("call_{k}"), "name": "read_page", "arguments": {"page": k}});
    let mut fixtures = vec![json!({
        "match": {"systemMessage": "You compact conversations"},
        "response": {"content": "Summary: the pages read so far were lorem ipsum."}
    })];
    for k in 1..40 {
        fixtures.push(json!({"match": {"toolCallId": format!("call_{k}")},
                             "response": {"toolCalls": [call(k + 1)]}}));
    }
    fixtures.push(json!({"match": {"toolCallId": "call_40"},
                         "response": {"content": "I read all 40 pages."}}));
    fixtures.push(json!({"match": {"userMessage": "read the 40 pages"},
                         "response": {"toolCalls": [call(1)]}}));
    let mock = Aimock::start(agentlane_tests::Fixtures::Inline(json!(fixtures)))?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .model_server(&mock)
            .env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1")
            .env("AGENTLANE_CONTEXT_WINDOWS", "openai/gpt-4o-mini=16000"),
    )?;
    let scn = Scenario { server, mock };
    let a = scn.a();
    let reader = json!({"agentId": "reader", "tools": {"http": [{
        "name": "read_page",
        "description": "Reads one page of the document.",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer"}},
                       "required": ["page"]},
        "url": url
    }]}});
    let (status, created) = a
        .json(reqwest::Method::POST, "/v1/agents", Some(reader))
        .await?;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{created}");

    // WHEN the user asks for the whole document
    let accepted = a
        .agent_with(json!({"sessionKey": "pages", "agentId": "reader",
                           "message": "read the 40 pages"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ends ok with the answer after 40 tool rounds
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "I read all 40 pages.");
    let rounds = run
        .attempts
        .iter()
        .filter(|a| a.outcome == "tool_calls")
        .count();
    assert_eq!(rounds, 40);

    // AND the compaction is recorded: cuts of the earlier rounds and a summary inside the run
    let events = a.events(&run.run_id).await?;
    let compaction: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .map(|e| {
            let s = |k: &str| e.data[k].as_str().unwrap_or("").to_owned();
            (s("phase"), s("scope"))
        })
        .collect();
    assert!(
        compaction.contains(&("truncate".into(), "run".into())),
        "{compaction:?}"
    );
    assert!(
        compaction.contains(&("end".into(), "run".into())),
        "{compaction:?}"
    );

    // AND every model call fitted the window and saw the latest page whole
    let requests = scn.mock.model_requests()?;
    let summaries = requests
        .iter()
        .filter(|r| r.body["tools"].is_null())
        .count();
    assert!((1..=3).contains(&summaries), "{summaries} summaries");
    for request in requests.iter().filter(|r| !r.body["tools"].is_null()) {
        let chars = request.body["messages"].to_string().len();
        assert!(chars < 16_000 * 4, "a request of {chars} characters");
        if let Some(last) = request.messages().last().filter(|m| m["role"] == "tool") {
            let text = message_text(last).unwrap_or_default();
            assert!(text.len() > 2_400, "the latest page is whole: {text}");
        }
    }

    // AND the transcript keeps all 40 pages whole, paired, with the summaries in order
    let transcript = a.transcript("pages").await?;
    let pages = transcript
        .entries
        .iter()
        .filter(|e| matches!(&e.message, Message::Tool { content, .. } if content.len() > 2_400))
        .count();
    assert_eq!(pages, 40);
    let written = transcript
        .entries
        .iter()
        .filter(|e| matches!(e.message, Message::Compaction { .. }))
        .count();
    assert_eq!(written, summaries);
    assert_eq!(
        agentlane_tests::check_pairing(&agentlane_tests::transcript_items(&transcript.entries)),
        Ok(())
    );
    Ok(())
}
