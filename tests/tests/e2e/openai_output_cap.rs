//! The OpenAI-compatible routes pass the client's output cap on (issue 49): `max_tokens`,
//! `max_completion_tokens` (Chat Completions) and `max_output_tokens` (Responses) become the
//! run's cap, never above the agent's own, so the model is sent the smaller and the budget
//! reserves it. Out of range is OpenAI's 400. Both backends.

use crate::support::{LONG, scenario_with};
use agentlane_tests::{Client, Scenario};
use reqwest::Method;
use serde_json::{Value, json};

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
    let scn = scenario_with(|o| o.env("AGENTLANE_CONFIG", config.display().to_string()))?;
    Ok((scn, dir))
}

/// `POST path` with `body`, answered 200 (or the status and body as an error).
async fn ok(a: &Client, path: &str, body: Value) -> anyhow::Result<Value> {
    let (status, answer) =
        tokio::time::timeout(LONG, a.json(Method::POST, path, Some(body))).await??;
    anyhow::ensure!(status == 200, "POST {path}: {status} {answer}");
    Ok(answer)
}

/// The output cap of the newest model request aimock recorded.
fn last_cap(scn: &Scenario) -> anyhow::Result<Value> {
    let requests = scn.mock.model_requests()?;
    let last = requests
        .last()
        .ok_or_else(|| anyhow::anyhow!("no model request"))?;
    Ok(last.body["max_tokens"].clone())
}

fn chat(model: &str, message: &str, caps: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": message}]});
    if let (Some(body), Some(caps)) = (body.as_object_mut(), caps.as_object()) {
        body.extend(caps.clone());
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_max_tokens_is_sent_unless_the_agents_cap_is_smaller() -> anyhow::Result<()> {
    // GIVEN an agent capped at 300 output tokens, and main (the test model's usual 2,048)
    let (scn, _dir) = priced_with("")?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "cap"},
        "response": {"content": "capped",
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5}}})])?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "capped", "maxOutputTokens": 300})),
        )
        .await?;
    assert_eq!(status, 201, "{body}");

    // WHEN a client asks main for at most 100 tokens (max_completion_tokens)
    ok(
        &a,
        "/v1/chat/completions",
        chat("agentlane", "cap 1", json!({"max_completion_tokens": 100})),
    )
    .await?;
    // THEN the model request carries 100
    assert_eq!(last_cap(&scn)?, 100);

    // WHEN it asks the capped agent for 5,000 (max_tokens)
    ok(
        &a,
        "/v1/chat/completions",
        chat("agentlane/capped", "cap 2", json!({"max_tokens": 5_000})),
    )
    .await?;
    // THEN the agent's 300 is sent, not the client's 5,000
    assert_eq!(last_cap(&scn)?, 300);

    // WHEN it asks the capped agent for 120, and main for 16,000
    ok(
        &a,
        "/v1/chat/completions",
        chat("agentlane/capped", "cap 3", json!({"max_tokens": 120})),
    )
    .await?;
    assert_eq!(last_cap(&scn)?, 120);
    ok(
        &a,
        "/v1/chat/completions",
        chat("agentlane", "cap 4", json!({"max_tokens": 16_000})),
    )
    .await?;
    // THEN the smaller each time: 120, then main's usual 2,048
    assert_eq!(last_cap(&scn)?, 2_048);
    // AND with both fields the smaller of the two
    ok(
        &a,
        "/v1/chat/completions",
        chat(
            "agentlane",
            "cap 5",
            json!({"max_tokens": 70, "max_completion_tokens": 90}),
        ),
    )
    .await?;
    assert_eq!(last_cap(&scn)?, 70);

    // AND the Responses API's max_output_tokens is passed on the same way
    ok(
        &a,
        "/v1/responses",
        json!({"model": "agentlane/capped", "input": "cap 6", "max_output_tokens": 40}),
    )
    .await?;
    assert_eq!(last_cap(&scn)?, 40);

    // AND a cap out of range is OpenAI's 400, naming the field, with no model call
    let before = scn.mock.model_requests()?.len();
    for (path, body, param, code) in [
        (
            "/v1/chat/completions",
            chat("agentlane", "cap 7", json!({"max_tokens": 0})),
            "max_tokens",
            "integer_below_min_value",
        ),
        (
            "/v1/chat/completions",
            chat(
                "agentlane",
                "cap 7",
                json!({"max_completion_tokens": 128_001}),
            ),
            "max_completion_tokens",
            "integer_above_max_value",
        ),
        (
            "/v1/responses",
            json!({"model": "agentlane", "input": "cap 7", "max_output_tokens": 1_000_000}),
            "max_output_tokens",
            "integer_above_max_value",
        ),
    ] {
        let (status, answer) = a.json(Method::POST, path, Some(body)).await?;
        assert_eq!(status, 400, "{path} {param}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
    }
    assert_eq!(scn.mock.model_requests()?.len(), before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_max_tokens_fits_a_budget_the_usual_cap_would_not() -> anyhow::Result<()> {
    // GIVEN tenant A may spend $0.001 a day: less than a call's worst case with the usual
    // 2,048 tokens out ($0.0041 at $2 per million), more than one with 100 ($0.0002 + prompt)
    let (scn, _dir) = priced_with(&format!(
        "[limits.tenants.{}]\ndaily_usd = 0.001\n",
        agentlane_tests::TENANT_A.name
    ))?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "frugal"},
        "response": {"content": "brief",
                     "usage": {"prompt_tokens": 50, "completion_tokens": 20}}})])?;
    let a = scn.a();

    // WHEN it asks without a cap
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/chat/completions",
            Some(chat("agentlane", "frugal 1", json!({}))),
        )
        .await?;
    // THEN the reservation of 2,048 tokens does not fit: 429 insufficient_quota, no model call
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    assert_eq!(scn.mock.model_requests()?.len(), 0);

    // WHEN it asks for at most 100 tokens
    let answer = ok(
        &a,
        "/v1/chat/completions",
        chat("agentlane", "frugal 2", json!({"max_tokens": 100})),
    )
    .await?;
    // THEN the call reserved (and was sent) 100, fit, and answered
    assert_eq!(
        answer["choices"][0]["message"]["content"], "brief",
        "{answer}"
    );
    assert_eq!(last_cap(&scn)?, 100);
    // AND the day counts what it spent, within the budget
    let (_, usage) = a.json(Method::GET, "/v1/usage", None).await?;
    let day = usage["day"]["costUsd"].as_f64().unwrap_or(1.0);
    assert!(day > 0.0 && day <= 0.001, "{usage}");
    Ok(())
}
