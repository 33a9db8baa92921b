//! Provider errors never carry the provider key (issue 25 §3): an upstream that echoes the
//! request's `Authorization`/`x-api-key` headers and the bare key in its error bodies (some
//! proxies do) answers 401, 429, 500 and a mid-stream error event, for the OpenAI and the
//! Anthropic providers. After the runs the keys appear nowhere: not in any API answer (run with
//! its attempt ledger, events, transcript), not in the database (the SQLite files' bytes, or a
//! Scan of the DynamoDB table), not in the server's log output.

use crate::support::{LONG, SERVER_BIN};
use agentlane_core::RunStatus;
use agentlane_tests::{MODEL, Server, ServerOptions, TENANT_A};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The OpenAI key: not key-shaped, so only the configured-secret redaction can catch it.
const OPENAI_KEY: &str = "opaque-provider-key-7Q2wX9mP";
/// The Anthropic key, in the `sk-ant-…` shape.
const ANTHROPIC_KEY: &str = "sk-ant-api03-Redact_Me-4f9c2b7e";
const CLAUDE: &str = "anthropic/claude-test";

/// What the echoing upstream writes into each error: the credential headers as received, and
/// the bare key again (with its `Bearer ` prefix removed).
fn echo(headers: &HeaderMap) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let auth = header("authorization");
    let x_api_key = header("x-api-key");
    let bare = auth
        .strip_prefix("Bearer ")
        .unwrap_or(&x_api_key)
        .to_owned();
    format!(
        "request had Authorization: {auth}, x-api-key: {x_api_key}; token {bare} is not accepted"
    )
}

/// The answer to one model request, picked by the words of its last user message.
fn answer(anthropic: bool, headers: &HeaderMap, body: &Value) -> Response {
    let text = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let echoed = echo(headers);
    let error_json = |kind: &str| {
        if anthropic {
            json!({"type": "error", "error": {"type": kind, "message": echoed}})
        } else {
            json!({"error": {"message": echoed, "type": kind, "code": null}})
        }
    };
    if text.contains("r401") {
        let kind = if anthropic {
            "authentication_error"
        } else {
            "invalid_request_error"
        };
        return (StatusCode::UNAUTHORIZED, axum::Json(error_json(kind))).into_response();
    }
    if text.contains("r429") {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "0")],
            axum::Json(error_json("rate_limit_error")),
        )
            .into_response();
    }
    if text.contains("r500") {
        // A plain-text body, as a proxy's own error page would be.
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("proxy failure: {echoed}"),
        )
            .into_response();
    }
    // Mid-stream: the answer starts, then an error event echoing the headers.
    let sse = if anthropic {
        let start = json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}});
        let error = json!({"type": "error", "error": {"type": "api_error", "message": echoed}});
        format!("event: message_start\ndata: {start}\n\nevent: error\ndata: {error}\n\n")
    } else {
        let first = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
        let error = json!({"error": {"message": echoed, "type": "server_error"}});
        format!("data: {first}\n\ndata: {error}\n\n")
    };
    ([("content-type", "text/event-stream")], sse).into_response()
}

/// The echoing upstream (OpenAI and Anthropic paths); returns its base URL.
async fn echoing_upstream() -> anyhow::Result<String> {
    let route = |anthropic: bool| {
        axum::routing::post(
            move |headers: HeaderMap, body: axum::Json<Value>| async move {
                answer(anthropic, &headers, &body.0)
            },
        )
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", route(false))
        .route("/v1/messages", route(true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// `GET path` as tenant A: the raw answer text.
async fn get_text(server: &Server, path: &str) -> anyhow::Result<String> {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("{}{path}", server.url()))
        .bearer_auth(TENANT_A.key)
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    Ok(response.text().await?)
}

/// Every byte the store holds, as text: the SQLite files of the data directory, or on AWS every
/// item of the table (a Scan).
async fn store_contents(server: &Server) -> anyhow::Result<String> {
    let env: std::collections::HashMap<_, _> = server.backend_env().into_iter().collect();
    if let Some(table) = env.get("AGENTLANE_TABLE") {
        let sdk = crate::support::emulator_sdk_config(server).await;
        let dynamo = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
        let mut text = String::new();
        let mut start = None;
        loop {
            let page = dynamo
                .scan()
                .table_name(table)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in page.items() {
                text.push_str(&format!("{item:?}\n"));
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        anyhow::ensure!(!text.is_empty(), "the table scan found nothing");
        return Ok(text);
    }
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(server.data_dir())? {
        let path = entry?.path();
        if path.is_file() {
            bytes.extend(std::fs::read(&path)?);
        }
    }
    anyhow::ensure!(!bytes.is_empty(), "no database files found");
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn assert_no_key(what: &str, text: &str) {
    for key in [OPENAI_KEY, ANTHROPIC_KEY] {
        assert!(
            !text.contains(key),
            "{what} contains the key {key}:\n{text}"
        );
        // Not even the part a careless cut would leave.
        assert!(!text.contains(&key[..16]), "{what} contains part of {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redaction_an_echoing_upstream_never_puts_the_provider_key_anywhere() -> anyhow::Result<()>
{
    // GIVEN an upstream that echoes the request's credentials in every error, and a server
    // whose OpenAI and Anthropic providers use it with a configured key each (debug logs on)
    let upstream = echoing_upstream().await?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .env("OPENAI_BASE_URL", format!("{upstream}/v1"))
            .env("OPENAI_API_KEY", OPENAI_KEY)
            .env("ANTHROPIC_BASE_URL", &upstream)
            .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .env("AGENTLANE_ALLOWED_MODELS", format!("{MODEL},{CLAUDE}"))
            .env("AGENTLANE_RETRY_DELAY_SCALE", "0.01")
            .env("AGENTLANE_LOG", "info,agentlane=debug"),
    )?;
    let a = server.client(TENANT_A);

    // WHEN turns meet a 401, a 429, a 500 and a mid-stream error on each provider
    let cases = [
        (None, "r401", "auth"),
        (None, "r429", "rate_limit"),
        (None, "r500", "server"),
        (None, "mid", "server"),
        (Some(CLAUDE), "r401", "auth"),
        (Some(CLAUDE), "r429", "rate_limit"),
        (Some(CLAUDE), "r500", "server"),
        (Some(CLAUDE), "mid", "server"),
    ];
    let mut runs = Vec::new();
    for (i, (model, word, code)) in cases.into_iter().enumerate() {
        let session = format!("echo-{i}");
        let mut body = json!({"sessionKey": session, "message": format!("please {word}")});
        if let Some(model) = model {
            body["model"] = json!(model);
        }
        let accepted = a.agent_with(body).await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;

        // THEN each run ends `error` with the failure's class, and its error shows the echo
        // arrived, redacted
        assert_eq!(run.status, RunStatus::Error, "{word} {model:?}: {run:?}");
        let error = run.error.clone().expect("an error says why");
        assert_eq!(error.code, code, "{word} {model:?}: {error:?}");
        if code != "rate_limit" {
            // (a spent rate-limit budget says so in its own words)
            assert!(
                error.message.contains("[redacted]"),
                "{word} {model:?}: the echo should show, redacted: {error:?}"
            );
        }
        assert!(!run.attempts.is_empty(), "{run:?}");
        for attempt in &run.attempts {
            let shown = attempt.error.as_deref().unwrap_or_default();
            assert!(shown.contains("[redacted]"), "{attempt:?}");
            assert!(
                !shown.contains(&upstream),
                "the provider URL shows: {attempt:?}"
            );
        }
        runs.push((session, accepted.run_id, code));
    }

    // AND the key is in no API answer: runs (with the ledger), events, transcripts
    for (session, run_id, code) in &runs {
        let run = get_text(&server, &format!("/v1/runs/{run_id}")).await?;
        assert_no_key("the run", &run);
        let events = get_text(&server, &format!("/v1/runs/{run_id}/events")).await?;
        if *code != "rate_limit" {
            assert!(events.contains("[redacted]"), "{events}");
        }
        assert_no_key("the events", &events);
        let transcript = get_text(&server, &format!("/v1/sessions/{session}/transcript")).await?;
        assert_no_key("the transcript", &transcript);
    }
    // AND not in the database
    let stored = store_contents(&server).await?;
    assert!(stored.contains("[redacted]"), "the errors are stored");
    assert_no_key("the store", &stored);
    // AND not in the server's log output
    let log = server.stderr_tail(usize::MAX);
    assert!(!log.is_empty(), "the server logs");
    assert_no_key("the server log", &log);
    Ok(())
}
