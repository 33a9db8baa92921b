//! Agents a tenant defines (issue 19): their own instructions and models, versions that a run
//! keeps, MCP servers (the reference server, `@modelcontextprotocol/server-everything`) and
//! HTTP tools (a local receiver that checks the signature) as tool sources; tenant isolation
//! and the 400s of bad definitions. Both backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{check_pairing, transcript_items};
use agentlane_tools::testing::McpEverything;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;
use std::sync::{Arc, Mutex};

/// The HTTP tool's signing secret and API key, given to the server in its environment.
const SIGNING_SECRET: &str = "whsec-e2e-0123456789abcdef";
const ORDERS_KEY: &str = "orders-key-e2e-fedcba9876543210";

/// Tool results of a transcript, by call id: `(name, content, is_error)`.
fn tool_results(
    entries: &[agentlane_core::TranscriptEntry],
) -> Vec<(String, String, String, bool)> {
    entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                tool_call_id,
                name,
                content,
                is_error,
            } => Some((
                tool_call_id.clone(),
                name.clone(),
                content.clone(),
                *is_error,
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_mcp_tools_are_called_on_the_reference_server_and_land_paired()
-> anyhow::Result<()> {
    // GIVEN the reference MCP server, and an agent whose only tools are its echo and get-sum
    let everything = McpEverything::start().await.map_err(anyhow::Error::msg)?;
    let scn = scenario_with(|o| o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1"))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "mcp please", "hasToolResult": true},
               "response": {"content": "Echoed and summed."}}),
        json!({"match": {"userMessage": "mcp please", "hasToolResult": false},
        "response": {"content": "Calling the MCP tools.", "toolCalls": [
            {"id": "call_echo", "name": "everything__echo", "arguments": {"message": "ping"}},
            {"id": "call_sum", "name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}
        ]}}),
    ])?;
    let a = scn.a();
    let (status, agent) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({
                "agentId": "mcp-bot",
                "instructions": "You use MCP tools.",
                "tools": {"builtin": [], "mcpServers": [{
                    "name": "everything",
                    "url": everything.config("everything").url,
                    "allowedTools": ["echo", "get-sum"]
                }]}
            })),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(agent["version"], 1);

    // WHEN a turn of the agent asks for them
    let accepted = a
        .agent_with(json!({"sessionKey": "mcp", "agentId": "mcp-bot", "message": "mcp please"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ends ok, having run both calls on the server
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        run.payloads.last().map(|p| p.text.as_str()),
        Some("Echoed and summed.")
    );
    let transcript = a.transcript("mcp").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "tool", "tool", "assistant"],
        "{transcript:#?}"
    );
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let results = tool_results(&transcript.entries);
    assert_eq!(results[0].0, "call_echo");
    assert_eq!(results[0].1, "everything__echo");
    assert!(results[0].2.contains("ping"), "{results:?}");
    assert!(!results[0].3);
    assert_eq!(results[1].0, "call_sum");
    assert!(results[1].2.contains('5'), "2 + 3: {results:?}");
    assert!(!results[1].3);

    // AND the model was offered exactly the server's allowed tools, with their schemas
    let requests = scn.mock.model_requests_for("mcp please")?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let mut offered = requests[0].tool_names();
    offered.sort();
    assert_eq!(offered, ["everything__echo", "everything__get-sum"]);
    let echo = requests[0].body["tools"]
        .as_array()
        .and_then(|t| {
            t.iter()
                .find(|t| t.pointer("/function/name") == Some(&json!("everything__echo")))
        })
        .cloned()
        .unwrap_or_default();
    assert!(
        echo.pointer("/function/parameters/properties/message")
            .is_some(),
        "the server's input schema is offered: {echo}"
    );
    let system = requests[0].messages()[0].clone();
    assert_eq!(system["role"], "system");
    assert!(
        agentlane_tests::message_text(&system)
            .unwrap_or_default()
            .starts_with("You use MCP tools."),
        "{system}"
    );

    // AND the run records the agent and its version
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    assert_eq!(
        (view["agentId"].clone(), view["agentVersion"].clone()),
        (json!("mcp-bot"), json!(1))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_mcp_server_leaves_a_warning_and_the_run_goes_on() -> anyhow::Result<()> {
    // GIVEN an agent whose MCP server listens nowhere
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let scn = scenario_with(|o| o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1"))?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "lonely", "tools": {"mcpServers": [
                {"name": "gone", "url": format!("http://127.0.0.1:{closed}/mcp"), "timeoutMs": 2000}
            ]}})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // WHEN it takes a turn
    let accepted = a
        .agent_with(json!({"sessionKey": "lonely", "agentId": "lonely", "message": "hello"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN it answers with the built-ins, and its record names the server it went without
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    let warnings = view["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{view}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap_or_default()
            .contains("\"gone\""),
        "{warnings:?}"
    );
    let offered = scn.mock.model_requests_for("hello")?[0].tool_names();
    assert!(offered.contains(&"current_time".to_owned()), "{offered:?}");
    Ok(())
}

/// One request the receiver got: `(body, signature ok, X-Agentlane-Run,
/// X-Agentlane-Tool-Call, X-Api-Key)`.
type Received = (Value, bool, String, String, String);

/// What the HTTP tool's receiver saw.
#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<Received>>,
}

async fn receive(
    State(seen): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let signature = header("x-agentlane-signature");
    let valid = signature
        .split_once(',')
        .and_then(|(t, v1)| Some((t.strip_prefix("t=")?, v1.strip_prefix("v1=")?)))
        .is_some_and(|(t, v1)| {
            let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(SIGNING_SECRET.as_bytes())
            else {
                return false;
            };
            mac.update(t.as_bytes());
            mac.update(b".");
            mac.update(&body);
            hex::encode(mac.finalize().into_bytes()) == v1
        });
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let order = json["orderId"].as_str().unwrap_or("?").to_owned();
    seen.requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((
            json,
            valid,
            header("x-agentlane-run"),
            header("x-agentlane-tool-call"),
            header("x-api-key"),
        ));
    if !valid {
        return (StatusCode::UNAUTHORIZED, "bad signature".into());
    }
    (
        StatusCode::OK,
        json!({"orderId": order, "status": "shipped"}).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_tool_is_signed_validated_and_its_secrets_stay_out_of_sight() -> anyhow::Result<()>
{
    // GIVEN a receiver that checks the signature, and an agent with an HTTP tool whose secrets
    // are references to the server's environment
    let seen = Arc::new(Receiver::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/orders", listener.local_addr()?);
    let app = Router::new()
        .route("/orders", post(receive))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1")
            .env("AGENTLANE_AGENT_ENV_ALLOW", "ORDERS_SIGNING,ORDERS_KEY")
            .env("ORDERS_SIGNING", SIGNING_SECRET)
            .env("ORDERS_KEY", ORDERS_KEY)
    })?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "where is my order", "hasToolResult": true},
               "response": {"content": "Order A-1 has shipped."}}),
        json!({"match": {"userMessage": "where is my order", "hasToolResult": false},
        "response": {"content": "Looking it up.", "toolCalls": [
            {"id": "call_ok", "name": "lookup_order", "arguments": {"orderId": "A-1"}},
            {"id": "call_bad", "name": "lookup_order", "arguments": {"orderId": 5}}
        ]}}),
    ])?;
    let a = scn.a();
    let definition = json!({
        "agentId": "orders",
        "tools": {"http": [{
            "name": "lookup_order",
            "description": "Looks up an order by id.",
            "parameters": {"type": "object", "properties": {"orderId": {"type": "string"}},
                           "required": ["orderId"], "additionalProperties": false},
            "url": url,
            "headers": {"X-Api-Key": {"env": "ORDERS_KEY"}},
            "signingSecret": {"env": "ORDERS_SIGNING"}
        }]}
    });
    let (status, created) = a.json(Method::POST, "/v1/agents", Some(definition)).await?;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        created.pointer("/tools/http/0/signingSecret"),
        Some(&json!({"env": "ORDERS_SIGNING"})),
        "the agent shows references, never values"
    );

    // WHEN a turn calls the tool once well and once against its schema
    let accepted = a
        .agent_with(
            json!({"sessionKey": "orders", "agentId": "orders", "message": "where is my order?"}),
        )
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");

    // THEN only the valid call reached the receiver, signed, with the run's headers and the key
    let requests = seen
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(
        requests.len(),
        1,
        "the invalid call is never sent: {requests:?}"
    );
    let (body, valid, run_header, call_header, key) = &requests[0];
    assert_eq!(body, &json!({"orderId": "A-1"}));
    assert!(valid, "the signature verifies with the secret");
    assert_eq!(run_header, &run.run_id);
    assert_eq!(call_header, "call_ok");
    assert_eq!(key, ORDERS_KEY);

    // AND the receiver's answer is the first result; the second is an error naming the violation
    let transcript = a.transcript("orders").await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let results = tool_results(&transcript.entries);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "call_ok");
    let answer: Value = serde_json::from_str(&results[0].2)?;
    assert_eq!(answer, json!({"orderId": "A-1", "status": "shipped"}));
    assert!(!results[0].3);
    assert_eq!(results[1].0, "call_bad");
    assert!(results[1].3, "{results:?}");
    assert!(results[1].2.contains("orderId"), "{results:?}");

    // AND no secret value appears in any answer, event or log
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    let events = a.events(&run.run_id).await?;
    let (_, listed) = a.json(Method::GET, "/v1/agents", None).await?;
    let everything = format!(
        "{view}{}{}{listed}{}",
        serde_json::to_string(&events)?,
        serde_json::to_string(&transcript.entries)?,
        scn.server.stderr_tail(1 << 20)
    );
    for secret in [SIGNING_SECRET, ORDERS_KEY] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_between_two_turns_changes_the_second_turns_prompt_and_model() -> anyhow::Result<()>
{
    // GIVEN an agent with its own instructions and model
    let scn = scenario_with(|o| {
        o.env(
            "AGENTLANE_ALLOWED_MODELS",
            "openai/gpt-4o-mini,openai/gpt-4o",
        )
    })?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "persona", "name": "Persona",
                        "instructions": "You are Ada.", "model": "openai/gpt-4o-mini"})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let first = a
        .agent_with(json!({"sessionKey": "p", "agentId": "persona", "message": "hello one"}))
        .await?;
    let first = a.wait_done(&first.run_id, LONG).await?;

    // WHEN it is changed between two turns
    let (status, patched) = a
        .json(
            Method::PATCH,
            "/v1/agents/persona",
            Some(json!({"instructions": "You are Grace.", "model": "openai/gpt-4o", "name": null})),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["version"], 2);
    assert!(
        patched.get("name").is_none(),
        "null clears a field: {patched}"
    );
    let second = a
        .agent_with(json!({"sessionKey": "p", "agentId": "persona", "message": "hello two"}))
        .await?;
    let second = a.wait_done(&second.run_id, LONG).await?;

    // THEN each turn ran with its own version's prompt and model
    assert_eq!(
        (first.status, second.status),
        (RunStatus::Ok, RunStatus::Ok)
    );
    let system = |needle: &str| -> anyhow::Result<(String, String)> {
        let request = scn.mock.model_requests_for(needle)?.remove(0);
        let text = agentlane_tests::message_text(&request.messages()[0]).unwrap_or_default();
        Ok((request.model().unwrap_or_default().to_owned(), text))
    };
    let (model, prompt) = system("hello one")?;
    assert_eq!(model, "gpt-4o-mini");
    assert!(prompt.starts_with("You are Ada."), "{prompt}");
    let (model, prompt) = system("hello two")?;
    assert_eq!(model, "gpt-4o");
    assert!(prompt.starts_with("You are Grace."), "{prompt}");
    for (run, version) in [(&first, 1), (&second, 2)] {
        let (_, view) = a
            .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
            .await?;
        assert_eq!(view["agentVersion"], version, "{view}");
    }
    // AND the older version stays readable
    let (status, old) = a
        .json(Method::GET, "/v1/agents/persona?version=1", None)
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(old["instructions"], "You are Ada.");

    // AND the session keeps its agent; a deleted agent takes no more turns
    let (status, body) = a
        .post_agent(json!({"sessionKey": "p", "message": "hello main"}))
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("persona") && message.contains("main"),
        "{message}"
    );
    let (status, _) = a.json(Method::DELETE, "/v1/agents/persona", None).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = a
        .post_agent(json!({"sessionKey": "p2", "agentId": "persona", "message": "hello"}))
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("persona")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_per_tenant_and_bad_definitions_name_the_field() -> anyhow::Result<()> {
    let scn = scenario_with(|o| o)?;
    let (a, b) = (scn.a(), scn.b());
    let (status, body) = a
        .json(Method::POST, "/v1/agents", Some(json!({"agentId": "mine"})))
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // Another tenant sees nothing of it, and cannot change, delete or run it.
    let (_, list) = b.json(Method::GET, "/v1/agents", None).await?;
    assert_eq!(list["agents"], json!([]));
    for (method, body) in [
        (Method::GET, None),
        (Method::PATCH, Some(json!({"name": "x"}))),
        (Method::DELETE, None),
    ] {
        let (status, answer) = b.json(method.clone(), "/v1/agents/mine", body).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {answer}");
    }
    let (status, _) = b
        .post_agent(json!({"sessionKey": "s", "agentId": "mine", "message": "hello"}))
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = a.json(Method::GET, "/v1/agents", None).await?;
    assert_eq!(list["agents"].as_array().map(Vec::len), Some(1));

    // Each bad definition is a 400 naming what to fix.
    let cases = [
        (json!({"agentId": "Bad_Id"}), "agentId"),
        (json!({"agentId": "x", "colour": "red"}), "colour"),
        (
            json!({"agentId": "x", "model": "openai/not-allowed"}),
            "model",
        ),
        (
            json!({"agentId": "x", "instructions": "a".repeat(70_000)}),
            "instructions",
        ),
        (
            json!({"agentId": "x", "tools": {"builtin": ["shell"]}}),
            "tools.builtin",
        ),
        (
            json!({"agentId": "x", "tools": {"mcpServers": [{"name": "m", "url": "http://h/mcp",
                "headers": {"Authorization": "Bearer sk-plain"}}]}}),
            "tools.mcpServers[0].headers.Authorization",
        ),
        (
            json!({"agentId": "x", "tools": {"http": [{"name": "t", "description": "d",
                "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}},
                "url": "https://h/t"}]}}),
            "tools.http[0].parameters",
        ),
        (
            json!({"agentId": "x", "tools": {"http": [{"name": "t", "description": "d",
                "parameters": {"type": "object"}, "url": "ftp://h/t"}]}}),
            "tools.http[0].url",
        ),
    ];
    for (definition, field) in cases {
        let (status, body) = a
            .json(Method::POST, "/v1/agents", Some(definition.clone()))
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{definition}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{field} not named in {message:?}");
        assert!(!message.contains("sk-plain"), "{message}");
    }
    let (status, body) = a
        .json(Method::POST, "/v1/agents", Some(json!({"agentId": "mine"})))
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_runs_the_agent_it_names() -> anyhow::Result<()> {
    // GIVEN an agent, and a cron job that names it
    let scn = scenario_with(|o| o)?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "reporter", "instructions": "You write the daily report."})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, job) = a
        .json(
            Method::POST,
            "/v1/cron/jobs",
            Some(json!({"name": "daily", "schedule": {"everySeconds": 3600},
                        "message": "hello report", "agentId": "reporter"})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["agentId"], "reporter");
    let id = job["jobId"].as_str().unwrap_or_default().to_owned();

    // WHEN it fires
    let (status, fired) = a
        .json(Method::POST, &format!("/v1/cron/jobs/{id}/run"), None)
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
    let run_id = fired["runId"].as_str().unwrap_or_default().to_owned();
    let run = a
        .poll_run(&run_id, LONG, "end", |r| r.status.is_terminal())
        .await?;

    // THEN the fire ran with the agent's instructions and recorded its version
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await?;
    assert_eq!(
        (view["agentId"].clone(), view["agentVersion"].clone()),
        (json!("reporter"), json!(1))
    );
    let request = scn.mock.model_requests_for("hello report")?.remove(0);
    let system = agentlane_tests::message_text(&request.messages()[0]).unwrap_or_default();
    assert!(
        system.starts_with("You write the daily report."),
        "{system}"
    );
    Ok(())
}
