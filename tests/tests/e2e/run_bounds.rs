//! Bounds a tenant cannot slip past (issue 49): prices are the operator's, every model call
//! sends the output cap its budget reservation holds, a budget refusal on the OpenAI routes is
//! a spent quota, and an agent's MCP servers are reached inside the run's bounds. Both backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::Scenario;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A server charging $1 per million input tokens and $2 per million output tokens for the test
/// model, with `more` of the config file.
fn priced_with(more: &str) -> anyhow::Result<(Scenario, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        format!(
            "[prices.\"{}\"]\ninput = 1.0\noutput = 2.0\n\n{more}",
            agentlane_tests::MODEL
        ),
    )?;
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_CONFIG", config.display().to_string())
            .env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1")
    })?;
    Ok((scn, dir))
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_priced_below_the_deployment_is_refused_naming_the_field() -> anyhow::Result<()> {
    // GIVEN a deployment charging $1/$2 per million tokens for the test model
    let (scn, _dir) = priced_with("")?;
    let a = scn.a();

    // WHEN a tenant defines an agent that prices the model at 0, or a model the deployment
    // has no price for
    for (prices, field) in [
        (
            json!({(agentlane_tests::MODEL): {"input": 0.0, "output": 0.0}}),
            format!("prices.{}.input", agentlane_tests::MODEL),
        ),
        (
            json!({(agentlane_tests::MODEL): {"input": 1.0, "output": 0.5}}),
            format!("prices.{}.output", agentlane_tests::MODEL),
        ),
        (
            json!({"openai/my-finetune": {"input": 0.0, "output": 0.0}}),
            "prices.openai/my-finetune".to_owned(),
        ),
    ] {
        let (status, body) = a
            .json(
                Method::POST,
                "/v1/agents",
                Some(json!({"agentId": "cheapskate", "prices": prices})),
            )
            .await?;
        // THEN it is refused, 400 naming the field
        assert_eq!(status, 400, "{prices}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&field), "{field}: {body}");
    }
    // AND an agent that raises a price is kept
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "premium", "prices": {
                (agentlane_tests::MODEL): {"input": 10.0, "output": 20.0}}})),
        )
        .await?;
    assert_eq!(status, 201, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_of_sixteen_thousand_tokens_never_pass_a_small_day() -> anyhow::Result<()> {
    // GIVEN tenant A may spend $0.05 a day, and a model that writes 16,000 tokens whenever it
    // may ($0.033 an answer at $1/$2 per million)
    let (scn, _dir) = priced_with(&format!(
        "[limits.tenants.{}]\ndaily_usd = 0.05\n",
        agentlane_tests::TENANT_A.name
    ))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "write a lot"},
               "response": {"content": "a very long answer", "usage": usage(500, 16_000)}}),
        json!({"match": {"userMessage": "write a little"},
               "response": {"content": "short", "usage": usage(500, 100)}}),
    ])?;
    let a = scn.a();

    // WHEN 20 sessions at once each ask for answers of up to 16,000 tokens
    let turns = (0..20).map(|i| {
        let a = a.clone();
        async move {
            a.agent_with(
                json!({"sessionKey": format!("long-{i}"), "message": "write a lot",
                                "maxOutputTokens": 16_000}),
            )
            .await
        }
    });
    let accepted: Vec<_> = futures::future::join_all(turns).await;
    let mut ok = 0;
    let mut spent = 0.0;
    for turn in accepted.iter().flatten() {
        let run = a.wait_done(&turn.run_id, LONG).await?;
        if run.status == RunStatus::Ok {
            ok += 1;
        }
        let (_, view) = a
            .json(Method::GET, &format!("/v1/runs/{}", turn.run_id), None)
            .await?;
        spent += view["costUsd"].as_f64().unwrap_or(0.0);
    }

    // THEN every model call was sent the cap its reservation held
    let requests = scn.mock.model_requests()?;
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request.body["max_tokens"], 16_000, "{:?}", request.body);
    }
    // AND what the tenant spent never passed its day
    eprintln!("16k answers: {ok} ok of 20, ${spent:.6} spent of $0.05");
    assert!(ok >= 1, "one answer fits the day");
    assert!(spent <= 0.05 + 1e-9, "spent {spent}");
    let (_, counted) = a.json(Method::GET, "/v1/usage", None).await?;
    let day = counted["day"]["costUsd"].as_f64().unwrap_or(1.0);
    assert!(day <= 0.05 + 1e-9, "{counted}");

    // AND a turn that names no cap is sent the model's usual answer size
    let before = requests.len();
    let b = scn.b();
    let short = b.agent("short", "write a little").await?;
    assert_eq!(
        b.wait_done(&short.run_id, LONG).await?.status,
        RunStatus::Ok
    );
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), before + 1);
    assert_eq!(
        requests[before].body["max_tokens"], 2_048,
        "{:?}",
        requests[before].body
    );
    // AND a cap out of bounds is refused naming the field
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agent",
            Some(json!({"sessionKey": "x", "message": "m", "maxOutputTokens": 0})),
        )
        .await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("maxOutputTokens"), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_refusal_on_the_openai_routes_is_a_spent_quota() -> anyhow::Result<()> {
    // GIVEN tenant A may spend $0.001 a day: less than one call's worst case (its prompt plus
    // 2,048 tokens out at $2 per million), though nothing is spent yet
    let (scn, _dir) = priced_with(&format!(
        "[limits.tenants.{}]\ndaily_usd = 0.001\n",
        agentlane_tests::TENANT_A.name
    ))?;
    let a = scn.a();

    // WHEN it asks through the OpenAI-compatible route
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "agentlane", "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await?;

    // THEN the answer is OpenAI's spent quota: 429 insufficient_quota, and no model call
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    assert_eq!(scn.mock.model_requests()?.len(), 0);
    Ok(())
}

/// `n` TCP listeners that accept connections and never answer (kept open while the returned
/// tasks live), as `http://127.0.0.1:<port>/mcp` URLs.
async fn silent_servers(
    n: usize,
) -> anyhow::Result<(Vec<String>, Vec<tokio::task::JoinHandle<()>>)> {
    let mut urls = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push(format!("http://{}/mcp", listener.local_addr()?));
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        }));
    }
    Ok((urls, tasks))
}

/// An agent `id` whose MCP servers are `urls`, each with a 60 s call timeout.
async fn mcp_agent(a: &agentlane_tests::Client, id: &str, urls: &[String]) -> anyhow::Result<()> {
    let servers: Vec<Value> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| json!({"name": format!("silent{i}"), "url": url, "timeoutMs": 60_000}))
        .collect();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": id, "tools": {"mcpServers": servers}})),
        )
        .await?;
    anyhow::ensure!(status == 201, "POST /v1/agents: {status} {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_silent_mcp_servers_hold_a_run_neither_past_its_bounds_nor_long() -> anyhow::Result<()>
{
    // GIVEN an agent with five MCP servers that accept connections and never answer
    let (scn, _dir) = priced_with("")?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "hello"},
                                      "response": {"content": "hi"}})])?;
    let (urls, _servers) = silent_servers(5).await?;
    let a = scn.a();
    mcp_agent(&a, "silent", &urls).await?;

    // WHEN it takes a turn with a 10 s timeout
    let started = Instant::now();
    let accepted = a
        .agent_with(
            json!({"sessionKey": "silent-1", "agentId": "silent", "message": "hello",
                           "timeoutSeconds": 10}),
        )
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    let took = started.elapsed();

    // THEN the servers were waited for in parallel, 5 s at most, and the run answered without
    // them, each named in its warnings
    eprintln!("five silent MCP servers: the run took {took:?}");
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert!(took < Duration::from_secs(9), "took {took:?}");
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    let warnings = view["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 5, "{view}");
    assert!(
        warnings
            .iter()
            .all(|w| w.as_str().unwrap_or_default().contains("no answer within")),
        "{warnings:?}"
    );

    // WHEN a turn is aborted while its servers are being reached
    let accepted = a
        .agent_with(json!({"sessionKey": "silent-2", "agentId": "silent", "message": "hello"}))
        .await?;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let aborted_at = Instant::now();
    a.abort(&accepted.run_id).await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN it ends aborted without waiting the servers out
    let took = aborted_at.elapsed();
    eprintln!("abort during MCP setup: ended {took:?} after the abort");
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}");

    // AND an agent naming more than 8 MCP servers is refused
    let many: Vec<String> = (0..9).map(|_| urls[0].clone()).collect();
    assert!(mcp_agent(&a, "crowded", &many).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_tool_may_not_take_a_built_ins_name_or_a_reserved_header() -> anyhow::Result<()> {
    // GIVEN a deployment with the built-in current_time
    let (scn, _dir) = priced_with("")?;
    let a = scn.a();
    let tool = |name: &str, headers: Value| {
        json!({"name": name, "description": "d", "url": "https://tools.example.com/x",
               "parameters": {"type": "object"}, "headers": headers})
    };
    for (http, field, why) in [
        (
            tool("current_time", json!({})),
            "tools.http[0].name",
            "built-in",
        ),
        (
            tool("lookup", json!({"Host": {"env": "HOME"}})),
            "tools.http[0].headers",
            "set by agentlane",
        ),
        (
            tool("lookup", json!({"X-Agentlane-Run": {"env": "HOME"}})),
            "tools.http[0].headers",
            "set by agentlane",
        ),
    ] {
        // WHEN an agent defines it
        let (status, body) = a
            .json(
                Method::POST,
                "/v1/agents",
                Some(json!({"agentId": "shadow", "tools": {"http": [http]}})),
            )
            .await?;
        // THEN it is refused at create, naming the field
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(field) && message.contains(why),
            "{field}: {body}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_setup_costs_one_timeout_at_most_whatever_the_number_of_servers() -> anyhow::Result<()>
{
    // GIVEN agents with 0, 1 and 8 MCP servers that never answer (the worst case)
    let (scn, _dir) = priced_with("")?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "hello"},
                                      "response": {"content": "hi"}})])?;
    let (urls, _servers) = silent_servers(8).await?;
    let a = scn.a();
    let mut took = Vec::new();
    for n in [0, 1, 8] {
        let id = format!("mcp-{n}");
        mcp_agent(&a, &id, &urls[..n]).await?;
        // WHEN each takes a turn
        let started = Instant::now();
        let accepted = a
            .agent_with(json!({"sessionKey": id, "agentId": id, "message": "hello"}))
            .await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        took.push(started.elapsed());
    }
    // THEN the servers cost one setup timeout (5 s) at most, reached in parallel
    eprintln!("MCP setup: a turn took {took:?} with 0, 1 and 8 silent servers");
    assert!(took[2] < took[0] + Duration::from_secs(7), "{took:?}");
    assert!(took[2] < took[1] + Duration::from_secs(3), "{took:?}");
    Ok(())
}
