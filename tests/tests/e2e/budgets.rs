//! Spend control (issue 21): each attempt is priced from the deployment's `[prices]`, the run
//! shows its total, a run's `budget` (`maxCostUsd`, `maxTokens`) stops it before a model call
//! whose worst case would not fit, and a tenant's daily budget (`[limits.tenants.<name>]`)
//! holds across its concurrent runs. Both backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::{Scenario, check_pairing, transcript_items};
use serde_json::{Value, json};

/// A server charging $1 per million input tokens and $2 per million output tokens for the
/// test model (a `[prices]` entry in its config file, over the built-in list price).
fn priced() -> anyhow::Result<(Scenario, tempfile::TempDir)> {
    priced_with("")
}

/// [`priced`], with more of the config file.
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
    let scn = scenario_with(|o| o.env("AGENTLANE_CONFIG", config.display().to_string()))?;
    Ok((scn, dir))
}

/// `GET /v1/runs/{id}` as JSON.
async fn run_view(a: &agentlane_tests::Client, run_id: &str) -> anyhow::Result<Value> {
    let (status, view) = a
        .json(reqwest::Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await?;
    anyhow::ensure!(
        status.is_success(),
        "GET /v1/runs/{run_id}: {status} {view}"
    );
    Ok(view)
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_priced_and_the_run_shows_its_total() -> anyhow::Result<()> {
    // GIVEN a model that calls a tool (1,000 in, 100 out) then answers (2,000 in, 50 out)
    let (scn, _dir) = priced()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "what does the time cost", "hasToolResult": true},
               "response": {"content": "Noon, cheaply.", "usage": usage(2_000, 50)}}),
        json!({"match": {"userMessage": "what does the time cost", "hasToolResult": false},
               "response": {"toolCalls": [{"id": "call_t", "name": "current_time", "arguments": {}}],
                            "usage": usage(1_000, 100)}}),
    ])?;
    let a = scn.a();

    // WHEN the turn runs
    let accepted = a.agent("priced", "what does the time cost?").await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");

    // THEN each attempt's cost is its usage at the configured price, and the run's the sum
    let view = run_view(&a, &accepted.run_id).await?;
    let costs: Vec<f64> = view["attempts"]
        .as_array()
        .map(|attempts| {
            attempts
                .iter()
                .map(|a| a["costUsd"].as_f64().unwrap_or(-1.0))
                .collect()
        })
        .unwrap_or_default();
    // 1,000 × $1/M + 100 × $2/M = $0.0012; 2,000 × $1/M + 50 × $2/M = $0.0021
    assert_eq!(costs, vec![0.0012, 0.0021], "{view}");
    assert_eq!(view["costUsd"].as_f64(), Some(0.0033), "{view}");
    assert_eq!(
        view["usage"],
        json!({"inputTokens": 3_000, "outputTokens": 150})
    );
    // AND the wait and the run's last lifecycle event carry them too
    let (_, waited) = a
        .json(
            reqwest::Method::POST,
            "/v1/agent.wait",
            Some(json!({"runId": accepted.run_id, "timeoutMs": 1000})),
        )
        .await?;
    assert_eq!(waited["costUsd"].as_f64(), Some(0.0033), "{waited}");
    let events = a.events(&accepted.run_id).await?;
    let end = events
        .iter()
        .rev()
        .find(|e| e.data.get("phase").and_then(Value::as_str) == Some("end"))
        .map(|e| e.data.clone())
        .unwrap_or_default();
    assert_eq!(end["costUsd"].as_f64(), Some(0.0033), "{end}");
    assert_eq!(end["usage"]["inputTokens"], 3_000, "{end}");
    // AND /metrics counts them by tenant and model
    let metrics = scn
        .server
        .operator()
        .raw(reqwest::Method::GET, "/metrics", None)
        .await?;
    let text = metrics.body.clone();
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("tenant=\"tenant-a\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let cost = sample("agentlane_cost_usd_total{").unwrap_or(-1.0);
    assert!((cost - 0.0033).abs() < 1e-9, "{text}");
    assert_eq!(sample("agentlane_tokens_total{"), Some(3_150.0), "{text}");

    // AND an agent's own price wins over the deployment's for its runs
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "premium", "prices": {
                (agentlane_tests::MODEL): {"input": 10.0, "output": 20.0}}})),
        )
        .await?;
    assert_eq!(status, 201, "{body}");
    let premium = a
        .agent_with(json!({"sessionKey": "premium", "agentId": "premium",
                           "message": "what does the time cost?"}))
        .await?;
    a.wait_done(&premium.run_id, LONG).await?;
    let view = run_view(&a, &premium.run_id).await?;
    assert_eq!(
        view["costUsd"].as_f64(),
        Some(0.033),
        "ten times the price: {view}"
    );
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agents",
            Some(
                json!({"agentId": "broken", "prices": {"no-slash": {"input": 1.0, "output": 1.0}}}),
            ),
        )
        .await?;
    assert_eq!(status, 400, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_budget_stops_it_before_a_call_that_may_not_fit() -> anyhow::Result<()> {
    // GIVEN a model that calls a tool forever, each answer 1,000 tokens in and 1,000 out
    // ($0.003 at the configured price)
    let (scn, _dir) = priced()?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "count the clocks"},
               "response": {"toolCalls": [{"id": "call_c", "name": "current_time", "arguments": {}}],
                            "usage": usage(1_000, 1_000)}}),
        json!({"match": {"userMessage": "just say hi"},
               "response": {"content": "hi", "usage": usage(1_000, 1_000)}}),
    ])?;
    let a = scn.a();

    // WHEN a turn may spend $0.02 over all its calls
    let accepted = a
        .agent_with(
            json!({"sessionKey": "clocks", "message": "count the clocks",
                           "budget": {"maxCostUsd": 0.02}}),
        )
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN it ends budget_exceeded before the call whose worst case (the prompt's estimate plus
    // the 2,048 tokens of its output cap) would pass the budget, having spent at most the
    // budget
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    let error = run.error.clone().unwrap_or_else(|| panic!("{run:?}"));
    assert_eq!(error.code, "budget_exceeded", "{error:?}");
    assert!(error.message.contains("maxCostUsd"), "{error:?}");
    let view = run_view(&a, &accepted.run_id).await?;
    let spent = view["costUsd"].as_f64().unwrap_or(1.0);
    let calls = view["attempts"].as_array().map_or(0, Vec::len);
    assert!(spent <= 0.02, "spent {spent}: {view}");
    assert!(calls >= 2, "it ran until the budget stopped it: {view}");
    assert_eq!(
        scn.mock.model_requests()?.len(),
        calls,
        "no call past the stop"
    );
    // AND its transcript is paired: every call it made has its result
    let transcript = a.transcript("clocks").await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );

    // WHEN a turn's token budget cannot hold even its first call
    let before = scn.mock.model_requests()?.len();
    let tiny = a
        .agent_with(json!({"sessionKey": "tiny", "message": "just say hi",
                           "budget": {"maxTokens": 100}}))
        .await?;
    let run = a.wait_done(&tiny.run_id, LONG).await?;
    // THEN it ends budget_exceeded with no model call at all
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(
        run.error.as_ref().map(|e| e.code.as_str()),
        Some("budget_exceeded")
    );
    assert_eq!(scn.mock.model_requests()?.len(), before, "no model call");

    // AND an agent's budget applies to its runs, a turn's own fields winning
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "frugal", "budget": {"maxTokens": 100}})),
        )
        .await?;
    assert_eq!(status, 201, "{body}");
    let frugal = a
        .agent_with(
            json!({"sessionKey": "frugal-1", "agentId": "frugal", "message": "just say hi"}),
        )
        .await?;
    let run = a.wait_done(&frugal.run_id, LONG).await?;
    assert_eq!(
        run.error.as_ref().map(|e| e.code.as_str()),
        Some("budget_exceeded"),
        "{run:?}"
    );
    let roomy = a
        .agent_with(
            json!({"sessionKey": "frugal-2", "agentId": "frugal", "message": "just say hi",
                           "budget": {"maxTokens": 100_000}}),
        )
        .await?;
    let run = a.wait_done(&roomy.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");

    // AND a malformed budget is refused naming the field
    for bad in [
        json!({"maxCostUsd": -1}),
        json!({"maxTokens": 0}),
        json!({"maxUsd": 1}),
    ] {
        let (status, body) = a
            .json(
                reqwest::Method::POST,
                "/v1/agent",
                Some(json!({"sessionKey": "bad", "message": "m", "budget": bad})),
            )
            .await?;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.to_string().contains("budget") || body.to_string().contains("max"),
            "{body}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_daily_budget_holds_across_twenty_concurrent_runs() -> anyhow::Result<()> {
    // GIVEN tenant A may spend $0.035 a day; each answer costs $0.003 (1,000 in, 1,000 out)
    // and each call's worst case is about $0.0041 (its prompt plus its 2,048-token output cap)
    let (scn, _dir) = priced_with(&format!(
        "[limits.tenants.{}]\ndaily_usd = 0.035\n",
        agentlane_tests::TENANT_A.name
    ))?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "spend"},
        "response": {"content": "spent", "usage": usage(1_000, 1_000)}})])?;
    let (a, b) = (scn.a(), scn.b());

    // WHEN 20 sessions of tenant A each send a turn at once
    let turns = (0..20).map(|i| {
        let a = a.clone();
        async move { a.agent(&format!("spender-{i}"), "spend a little").await }
    });
    let accepted: Vec<_> = futures::future::join_all(turns)
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let mut ok = 0;
    let mut refused = 0;
    let mut spent = 0.0;
    for turn in &accepted {
        let run = a.wait_done(&turn.run_id, LONG).await?;
        let view = run_view(&a, &turn.run_id).await?;
        match run.status {
            RunStatus::Ok => {
                ok += 1;
                spent += view["costUsd"].as_f64().unwrap_or(0.0);
            }
            _ => {
                // THEN each refused run ends budget_exceeded, having called no model
                assert_eq!(
                    run.error.as_ref().map(|e| e.code.as_str()),
                    Some("budget_exceeded"),
                    "{run:?}"
                );
                assert!(
                    run.error
                        .as_ref()
                        .is_some_and(|e| e.message.contains("the day")),
                    "{run:?}"
                );
                assert_eq!(view["attempts"], json!([]), "no model call: {view}");
                refused += 1;
            }
        }
    }
    // AND what the tenant spent never passes its budget; some runs did get through
    eprintln!("daily budget: {ok} ok, {refused} refused, ${spent:.6} spent of $0.035");
    assert!(spent <= 0.035 + 1e-9, "spent {spent}");
    assert!(ok >= 3, "{ok} runs got through");
    assert!(refused >= 1, "the budget refused some of 20 runs");
    assert_eq!(
        scn.mock.model_requests()?.len(),
        ok,
        "one model call per ok run"
    );

    // AND /v1/usage reads the day's spend by day, agent, model and session
    let usage = |query: &'static str| {
        let a = a.clone();
        async move {
            a.json(reqwest::Method::GET, &format!("/v1/usage?{query}"), None)
                .await
        }
    };
    let (_, by_day) = usage("groupBy=day").await?;
    let rows = by_day["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{by_day}");
    assert!(
        (rows[0]["costUsd"].as_f64().unwrap_or(0.0) - spent).abs() < 1e-9,
        "{by_day}"
    );
    assert_eq!(rows[0]["day"], by_day["day"]["period"], "{by_day}");
    let (_, by_agent) = usage("groupBy=agent").await?;
    assert_eq!(by_agent["rows"][0]["key"], "main", "{by_agent}");
    assert!((by_agent["rows"][0]["costUsd"].as_f64().unwrap_or(0.0) - spent).abs() < 1e-9);
    let (_, by_model) = usage("groupBy=model").await?;
    assert_eq!(
        by_model["rows"][0]["key"],
        agentlane_tests::MODEL,
        "{by_model}"
    );
    let (_, by_session) = usage("groupBy=session").await?;
    let sessions = by_session["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        sessions.len(),
        ok,
        "one row per session that spent: {by_session}"
    );
    assert!(
        sessions
            .iter()
            .all(|r| r["costUsd"].as_f64() == Some(0.003)),
        "{by_session}"
    );
    for bad in [
        "groupBy=team",
        "groupBy=day&from=2026-12-05&to=2026-12-01",
        "groupBy=day&from=yesterday",
    ] {
        let (status, body) = usage(bad).await?;
        assert_eq!(status, 400, "{bad}: {body}");
    }

    // AND another tenant is not affected
    let theirs = b.agent("other-tenant", "spend a little").await?;
    let run = b.wait_done(&theirs.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_day_is_spent_gets_429_at_once() -> anyhow::Result<()> {
    // GIVEN tenant A may use 5,000 tokens a day, and an answer that uses 10,000 (more than
    // its call's worst case was estimated: the overshoot a wrong estimate allows)
    let (scn, _dir) = priced_with(&format!(
        "[limits.tenants.{}]\ndaily_tokens = 5000\n",
        agentlane_tests::TENANT_A.name
    ))?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "big"},
        "response": {"content": "a long answer", "usage": usage(5_000, 5_000)}})])?;
    let a = scn.a();
    let first = a.agent("big-1", "big question").await?;
    assert_eq!(
        a.wait_done(&first.run_id, LONG).await?.status,
        RunStatus::Ok
    );

    // WHEN it sends another turn
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agent",
            Some(json!({"sessionKey": "big-2", "message": "big question"})),
        )
        .await?;

    // THEN it is refused at once, 429 budget_exceeded, until the day ends
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("daily"),
        "{body}"
    );
    assert_eq!(scn.mock.model_requests()?.len(), 1);
    // AND GET /v1/usage (and `agentlane usage`) shows the day spent against its limit
    let (_, usage) = a.json(reqwest::Method::GET, "/v1/usage", None).await?;
    assert_eq!(usage["counted"], true, "{usage}");
    assert_eq!(usage["day"]["tokens"], 10_000, "{usage}");
    assert_eq!(usage["day"]["maxTokens"], 5_000, "{usage}");
    assert_eq!(usage["day"]["heldTokens"], 0, "{usage}");
    let output = scn
        .server
        .cli()
        .args([
            "usage",
            "--url",
            scn.server.url(),
            "--api-key",
            agentlane_tests::TENANT_A.key,
        ])
        .output()?;
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    let day = usage["day"]["period"].as_str().unwrap_or_default();
    let line = table
        .lines()
        .find(|l| l.starts_with(day))
        .unwrap_or_default();
    assert!(line.contains("10000") && line.contains("5000"), "{table}");
    // AND the other tenant still talks
    let theirs = scn.b().agent("big-b", "big question").await?;
    assert_eq!(
        scn.b().wait_done(&theirs.run_id, LONG).await?.status,
        RunStatus::Ok
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgeted_turn_costs_two_more_aws_requests_than_a_plain_one() -> anyhow::Result<()> {
    // (Always on the emulator; the AWS pass of the suite would only repeat it.)
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN two servers on DynamoDB + SQS behind a logging proxy: one where tenant A has a
    // daily budget, one without budgets
    let log = crate::support::AwsRequestLog::start().await?;
    // (Both with the shared request rate off: its claims, one per few requests, would make
    // the UpdateItem counts depend on timing; rate_limits.rs counts them.)
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        format!(
            "[limits.tenants.{}]\nrequests_per_second = 0\ndaily_usd = 5.0\nmonthly_tokens = 10000000\n",
            agentlane_tests::TENANT_A.name
        ),
    )?;
    let plain_dir = tempfile::tempdir()?;
    let plain = plain_dir.path().join("agentlane.toml");
    std::fs::write(
        &plain,
        format!(
            "[limits.tenants.{}]\nrequests_per_second = 0\n",
            agentlane_tests::TENANT_A.name
        ),
    )?;
    let mut counts = Vec::new();
    for budgeted in [false, true] {
        let scn = crate::support::scenario_with(|o| {
            let config = if budgeted { &config } else { &plain };
            o.aws_backend()
                .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
                .env("AGENTLANE_CONFIG", config.display().to_string())
        })?;
        let a = scn.a();
        // A first turn warms the session up; the second is the one counted.
        let first = a.agent("counted", "hello").await?;
        a.wait_done(&first.run_id, LONG).await?;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let before = log.len();
        let turn = a.agent("counted", "hello again").await?;
        let run = a.wait_done(&turn.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let requests = log.since(before);
        let total: u32 = requests
            .iter()
            .filter(|(op, _)| !matches!(op.as_str(), "ReceiveMessage" | "Query"))
            .map(|(_, n)| n)
            .sum();
        eprintln!("budgeted {budgeted}: {total} requests besides polls and queries: {requests:?}");
        counts.push((total, requests));
    }
    // THEN the budgeted turn adds one reservation and one settlement (each one
    // TransactWriteItems over both periods); the accept reads the periods in its own batch
    // (GetItem counts vary with how often agent.wait polled the run: not compared.)
    let (plain, budgeted) = (&counts[0], &counts[1]);
    let op = |counts: &std::collections::BTreeMap<String, u32>, name: &str| {
        counts.get(name).copied().unwrap_or(0)
    };
    for same in ["UpdateItem", "SendMessage", "DeleteMessage", "BatchGetItem"] {
        assert_eq!(
            op(&budgeted.1, same),
            op(&plain.1, same),
            "{same}: {counts:?}"
        );
    }
    assert_eq!(
        op(&budgeted.1, "TransactWriteItems"),
        op(&plain.1, "TransactWriteItems") + 2
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_budget_stops_its_retries_before_a_fallback_it_cannot_afford() -> anyhow::Result<()>
{
    // GIVEN a model that answers 429 every time, and a fallback priced at $1,000 per million
    // output tokens (its worst case, 2,048 tokens out, is over $2)
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        "[prices.\"openai/gpt-4o\"]\ninput = 10.0\noutput = 1000.0\n",
    )?;
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_CONFIG", config.display().to_string())
            .env("AGENTLANE_FALLBACK_MODELS", "openai/gpt-4o")
            .env("AGENTLANE_RETRY_DELAY_SCALE", "0.01")
            .env(
                "AGENTLANE_ALLOWED_MODELS",
                "openai/gpt-4o-mini,openai/gpt-4o,openai/my-finetune",
            )
    })?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "pricey-fallback", "model": "gpt-4o-mini"},
               "response": {"error": {"message": "Rate limited", "type": "rate_limit_error"},
                            "status": 429}}),
        json!({"match": {"userMessage": "pricey-fallback", "model": "gpt-4o"},
               "response": {"content": "the expensive answer"}}),
    ])?;
    let a = scn.a();

    // WHEN a turn that may spend $1 runs into the rate limits
    let accepted = a
        .agent_with(json!({"sessionKey": "pricey", "message": "pricey-fallback",
                           "budget": {"maxCostUsd": 1.0}}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN its retries ran, and it stopped before the fallback call it could not afford
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    let error = run.error.clone().unwrap_or_else(|| panic!("{run:?}"));
    assert_eq!(error.code, "budget_exceeded", "{error:?}");
    assert!(!run.attempts.is_empty(), "{run:?}");
    assert!(
        run.attempts
            .iter()
            .all(|a| a.model == agentlane_tests::MODEL),
        "no attempt on the fallback: {run:?}"
    );
    let requests = scn.mock.model_requests()?;
    assert!(
        requests.iter().all(|r| r.status == 429),
        "the fallback was never called: {:?}",
        requests.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    // AND a USD budget cannot name a model without a price (a token budget can)
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agent",
            Some(
                json!({"sessionKey": "tuned", "message": "m", "model": "openai/my-finetune",
                        "budget": {"maxCostUsd": 1.0}}),
            ),
        )
        .await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("openai/my-finetune"), "{body}");
    let (status, body) = a
        .json(
            reqwest::Method::POST,
            "/v1/agent",
            Some(
                json!({"sessionKey": "tuned", "message": "hello", "model": "openai/my-finetune",
                        "budget": {"maxTokens": 100000}}),
            ),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    Ok(())
}
