//! Tenant secrets (issue 42): a tenant's secret reaches only its own tools, never another
//! tenant's; the server's environment is out of a tenant's reach unless the operator granted a
//! variable; a receiver that echoes its `Authorization` header does not put the token into the
//! transcript, the model's context, the events or the logs; the store holds no value in clear;
//! a replaced value is used by the next run and a deleted one is never sent again. Both
//! backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{Client, Scenario, backend_is_aws, check_pairing, transcript_items};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// A granted variable and its value, in the server's environment.
const GRANTED_VAR: &str = "E2E_GRANTED_TOKEN";
const GRANTED_VALUE: &str = "granted-value-5f1d2c3b4a";
/// A variable in the server's environment that is not granted.
const CANARY_VAR: &str = "E2E_CANARY_SECRET";
const CANARY_VALUE: &str = "canary-value-9e8d7c6b5a";

/// Every request the receiver got: its headers, lower-case names.
#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<Vec<(String, String)>>>,
}

impl Receiver {
    fn seen(&self) -> Vec<Vec<(String, String)>> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn authorizations(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|headers| header(headers, "authorization"))
            .collect()
    }
}

fn header(headers: &[(String, String)], name: &str) -> String {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// Records the headers and answers with the `Authorization` header echoed back.
async fn echo(State(seen): State<Arc<Receiver>>, headers: HeaderMap) -> (StatusCode, String) {
    let all: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let auth = header(&all, "authorization");
    seen.requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(all);
    (
        StatusCode::OK,
        json!({"youSent": auth, "note": format!("Authorization was {auth}")}).to_string(),
    )
}

async fn receiver() -> anyhow::Result<(Arc<Receiver>, String)> {
    let seen = Arc::new(Receiver::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/echo", listener.local_addr()?);
    let app = Router::new()
        .route("/echo", post(echo))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Ok((seen, url))
}

fn start() -> anyhow::Result<Scenario> {
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1")
            .env("AGENTLANE_AGENT_ENV_ALLOW", GRANTED_VAR)
            .env(GRANTED_VAR, GRANTED_VALUE)
            .env(CANARY_VAR, CANARY_VALUE)
    })?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "check my token", "hasToolResult": true},
               "response": {"content": "The endpoint answered."}}),
        json!({"match": {"userMessage": "check my token", "hasToolResult": false},
               "response": {"content": "Calling it.", "toolCalls": [
                   {"id": "call_echo", "name": "echo_headers", "arguments": {}}]}}),
    ])?;
    Ok(scn)
}

/// An agent whose one HTTP tool sends `authorization` as its `Authorization` header.
fn agent(id: &str, url: &str, authorization: Value) -> Value {
    json!({
        "agentId": id,
        "tools": {"http": [{
            "name": "echo_headers",
            "description": "Shows what the endpoint received.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
            "url": url,
            "headers": {"Authorization": authorization}
        }]}
    })
}

async fn put_secret(
    client: &Client,
    name: &str,
    value: &str,
) -> anyhow::Result<(StatusCode, Value)> {
    Ok(client
        .json(
            Method::PUT,
            &format!("/v1/secrets/{name}"),
            Some(json!({"value": value})),
        )
        .await?)
}

/// One turn of agent `agent_id` on session `session`, waited for.
async fn turn(
    client: &Client,
    agent_id: &str,
    session: &str,
) -> anyhow::Result<agentlane_tests::RunView> {
    let accepted = client
        .agent_with(
            json!({"sessionKey": session, "agentId": agent_id, "message": "check my token"}),
        )
        .await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    Ok(run)
}

fn tool_contents(entries: &[agentlane_core::TranscriptEntry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_sends_its_own_secret_and_an_echo_of_it_is_redacted() -> anyhow::Result<()> {
    // GIVEN two tenants with a secret of the same name, each an agent whose tool sends it
    let (seen, url) = receiver().await?;
    let scn = start()?;
    let (a, b) = (scn.a(), scn.b());
    let a_value = format!("Bearer a-{}", uuid::Uuid::new_v4().simple());
    let b_value = format!("Bearer b-{}", uuid::Uuid::new_v4().simple());
    let (status, created) = put_secret(&a, "api-token", &a_value).await?;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "api-token");
    assert_eq!(created["version"], 1);
    assert!(created.get("value").is_none(), "{created}");
    let (status, _) = put_secret(&b, "api-token", &b_value).await?;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the other tenant's name is its own"
    );
    let reference = json!({"secret": "api-token"});
    for client in [&a, &b] {
        let (status, body) = client
            .json(
                Method::POST,
                "/v1/agents",
                Some(agent("echo", &url, reference.clone())),
            )
            .await?;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    // WHEN each tenant runs a turn that calls the tool
    let run_a = turn(&a, "echo", "sec-a").await?;
    let run_b = turn(&b, "echo", "sec-b").await?;

    // THEN the receiver got each tenant's own value, and never the other's
    assert_eq!(seen.authorizations(), [a_value.clone(), b_value.clone()]);

    // AND the echoed token is redacted in the transcript, the model's context, the events, the
    // run and the logs
    for (client, run, session, value) in [
        (&a, &run_a, "sec-a", &a_value),
        (&b, &run_b, "sec-b", &b_value),
    ] {
        let transcript = client.transcript(session).await?;
        assert_eq!(
            check_pairing(&transcript_items(&transcript.entries)),
            Ok(())
        );
        let results = tool_contents(&transcript.entries);
        assert_eq!(results.len(), 1, "{results:?}");
        let answer: Value = serde_json::from_str(&results[0])?;
        assert_eq!(answer["youSent"], "[redacted:api-token]", "{answer}");
        let events = client.events(&run.run_id).await?;
        let (_, view) = client
            .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
            .await?;
        let (_, listed) = client.json(Method::GET, "/v1/secrets", None).await?;
        assert_eq!(listed["secrets"][0]["name"], "api-token", "{listed}");
        let everything = format!(
            "{view}{listed}{}{}",
            serde_json::to_string(&events)?,
            serde_json::to_string(&transcript.entries)?,
        );
        let token = value.trim_start_matches("Bearer ");
        assert!(
            !everything.contains(token),
            "the value leaked: {everything}"
        );
    }
    let model_context = serde_json::to_string(
        &scn.mock
            .model_requests()?
            .iter()
            .map(|r| r.body.clone())
            .collect::<Vec<_>>(),
    )?;
    let logs = scn.server.stderr_tail(1 << 22);
    for value in [&a_value, &b_value] {
        let token = value.trim_start_matches("Bearer ");
        assert!(!model_context.contains(token), "the model saw {token}");
        assert!(!logs.contains(token), "the logs hold {token}");
    }
    assert!(model_context.contains("[redacted:api-token]"));

    // AND the store holds no value in clear
    let stored = stored_bytes(&scn).await?;
    for value in [&a_value, &b_value] {
        let token = value.trim_start_matches("Bearer ");
        assert!(
            !stored.windows(token.len()).any(|w| w == token.as_bytes()),
            "the store holds {token} in clear"
        );
    }
    Ok(())
}

/// Every byte the store holds: the data directory's files but the key file (embedded), or
/// every item of the table, attributes as the SDK decodes them (AWS).
async fn stored_bytes(scn: &Scenario) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    if backend_is_aws() {
        let sdk = crate::support::emulator_sdk_config(&scn.server).await;
        let table = scn
            .server
            .backend_env()
            .into_iter()
            .find(|(n, _)| n == "AGENTLANE_TABLE")
            .map(|(_, v)| v)
            .ok_or_else(|| anyhow::anyhow!("no table"))?;
        let dynamo = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
        let mut start = None;
        loop {
            let page = dynamo
                .scan()
                .table_name(&table)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in page.items() {
                out.extend_from_slice(format!("{item:?}").as_bytes());
                for value in item.values() {
                    if let Ok(b) = value.as_b() {
                        out.extend_from_slice(b.as_ref());
                    }
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
    } else {
        for entry in std::fs::read_dir(scn.server.data_dir())? {
            let path = entry?.path();
            if path.is_file() && path.file_name().is_some_and(|n| n != "secrets.key") {
                out.extend(std::fs::read(&path)?);
            }
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_environment_is_out_of_reach_unless_granted() -> anyhow::Result<()> {
    let (seen, url) = receiver().await?;
    let scn = start()?;
    let a = scn.a();
    // GIVEN references to variables of the server's environment the operator did not grant:
    // a canary, the cloud credentials, the provider key, agentlane's own keys
    for var in [
        CANARY_VAR,
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "OPENAI_API_KEY",
        "AGENTLANE_API_KEYS",
    ] {
        let (status, body) = a
            .json(
                Method::POST,
                "/v1/agents",
                Some(agent("leaky", &url, json!({"env": var}))),
            )
            .await?;
        // THEN each is refused, naming the field and the variable
        assert_eq!(status, StatusCode::BAD_REQUEST, "{var}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("tools.http[0].headers.Authorization") && message.contains(var),
            "{message}"
        );
    }
    // AND a signing secret or a PATCH cannot slip one in either
    let mut signed = agent("signed", &url, json!({"secret": "missing"}));
    signed["tools"]["http"][0]["headers"] = json!({});
    signed["tools"]["http"][0]["signingSecret"] = json!({"env": CANARY_VAR});
    let (status, body) = a.json(Method::POST, "/v1/agents", Some(signed)).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("signingSecret")
    );

    // AND a granted variable works
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(agent("granted", &url, json!({"env": GRANTED_VAR}))),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = a
        .json(
            Method::PATCH,
            "/v1/agents/granted",
            Some(json!({"tools": agent("x", &url, json!({"env": CANARY_VAR}))["tools"]})),
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    turn(&a, "granted", "granted").await?;
    assert_eq!(seen.authorizations(), [GRANTED_VALUE]);
    let transcript = a.transcript("granted").await?;
    let results = tool_contents(&transcript.entries);
    assert!(
        results[0].contains(&format!("[redacted:{GRANTED_VAR}]")),
        "{results:?}"
    );

    // AND no refused value ever reached the receiver, nor the logs
    let logs = scn.server.stderr_tail(1 << 22);
    assert!(!logs.contains(CANARY_VALUE) && !logs.contains(GRANTED_VALUE));
    for headers in seen.seen() {
        for (_, value) in headers {
            assert!(!value.contains(CANARY_VALUE), "{value}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secrets_and_references_are_clear_400s() -> anyhow::Result<()> {
    let (_, url) = receiver().await?;
    let scn = start()?;
    let a = scn.a();
    let long_name = "n".repeat(65);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("bad%2Fname", json!({"value": "v"}), "name"),
        (&long_name, json!({"value": "v"}), "name"),
        ("ok", json!({"value": ""}), "value"),
        ("ok", json!({"value": "v".repeat(16 * 1024 + 1)}), "16384"),
        ("ok", json!({"value": 5}), "value"),
        ("ok", json!({"value": "v", "extra": 1}), "extra"),
        ("ok", json!({}), "value"),
    ];
    for (name, body, names) in cases {
        let (status, answer) = a
            .json(
                Method::PUT,
                &format!("/v1/secrets/{name}"),
                Some(body.clone()),
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name} {body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{name}: {message}");
    }
    let (_, listed) = a.json(Method::GET, "/v1/secrets", None).await?;
    assert_eq!(listed["secrets"], json!([]), "nothing was stored: {listed}");

    // A reference to a secret the tenant does not have (or another tenant's) is a 400.
    let (status, _) = put_secret(&scn.b(), "b-only", "b-value-1234").await?;
    assert_eq!(status, StatusCode::CREATED);
    for name in ["missing", "b-only", "prod/db"] {
        let (status, body) = a
            .json(
                Method::POST,
                "/v1/agents",
                Some(agent("refs", &url, json!({"secret": name}))),
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("tools.http[0].headers.Authorization"),
            "{message}"
        );
    }
    // Another tenant's secret does not exist for this one.
    let (status, _) = a.json(Method::GET, "/v1/secrets/b-only", None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = a.json(Method::DELETE, "/v1/secrets/b-only", None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = scn
        .b()
        .json(Method::GET, "/v1/secrets/b-only", None)
        .await?;
    assert_eq!(status, StatusCode::OK);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_value_is_used_by_the_next_run_and_a_deleted_one_is_never_sent()
-> anyhow::Result<()> {
    let (seen, url) = receiver().await?;
    let scn = start()?;
    let a = scn.a();
    put_secret(&a, "rotating", "first-value-0a1b2c").await?;
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(agent("rot", &url, json!({"secret": "rotating"}))),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    turn(&a, "rot", "rot-1").await?;

    // WHEN the value is replaced
    let (status, replaced) = put_secret(&a, "rotating", "second-value-3d4e5f").await?;
    assert_eq!(status, StatusCode::OK, "a replacement: {replaced}");
    assert_eq!(replaced["version"], 2);
    assert!(replaced["updatedAt"].as_u64() >= replaced["createdAt"].as_u64());
    // THEN the next run sends the new one
    turn(&a, "rot", "rot-2").await?;
    assert_eq!(
        seen.authorizations(),
        ["first-value-0a1b2c", "second-value-3d4e5f"]
    );

    // WHEN it is deleted
    let (status, _) = a.json(Method::DELETE, "/v1/secrets/rotating", None).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = a.json(Method::DELETE, "/v1/secrets/rotating", None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // THEN later runs leave the tool out with a warning, and nothing more is sent
    let accepted = a
        .agent_with(json!({"sessionKey": "rot-3", "agentId": "rot", "message": "check my token"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    let (_, view) = a
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    let warnings = view["warnings"].to_string();
    assert!(warnings.contains("rotating"), "{view}");
    assert_eq!(
        seen.authorizations().len(),
        2,
        "a deleted value is never sent"
    );
    Ok(())
}
