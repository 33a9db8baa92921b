//! `agentlane agents …` and `agentlane agent --agent` as a user runs them: the binary against
//! a small server on loopback that records what it received and answers as the agents API
//! contract says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

const KEY: &str = "test-key-0123456789";
const UPDATED_AT: u64 = 1_764_480_000_000;

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    /// Path and query.
    path: String,
    /// The body as JSON (`Null` when empty).
    body: Value,
    authorization: Option<String>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn stored(id: &str, version: u64) -> Value {
    json!({
        "agentId": id, "version": version, "name": "Support bot",
        "model": "openai/gpt-4o-mini",
        "tools": {"mcpServers": [{"name": "everything", "url": "http://127.0.0.1:3917/mcp"}]},
        "metadata": {"team": "cx"},
        "createdAt": UPDATED_AT, "updatedAt": UPDATED_AT
    })
}

fn not_found(id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": {"code": "not_found", "message": format!("no agent {id}")}})),
    )
        .into_response()
}

async fn handle(
    State(log): State<Log>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.path_and_query().unwrap().to_string(),
        body: body.clone(),
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned()),
    });
    let path = uri.path();
    let query = uri.query().unwrap_or("");
    if path == "/v1/agent" && method == Method::POST {
        return (
            StatusCode::ACCEPTED,
            axum::Json(json!({"runId": "run_1", "status": "accepted"})),
        )
            .into_response();
    }
    if path == "/v1/agents" {
        return match method {
            Method::POST => {
                let mut agent = body;
                agent["version"] = json!(1);
                agent["createdAt"] = json!(UPDATED_AT);
                agent["updatedAt"] = json!(UPDATED_AT);
                (StatusCode::CREATED, axum::Json(agent)).into_response()
            }
            _ => axum::Json(json!({
                "agents": [stored("support-bot", 3), {"agentId": "b", "version": 1,
                                                      "updatedAt": UPDATED_AT}],
                "nextCursor": if query.contains("cursor") { Value::Null } else { json!("c2") }
            }))
            .into_response(),
        };
    }
    let Some(id) = path.strip_prefix("/v1/agents/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if id == "missing" {
        return not_found(id);
    }
    match method {
        Method::GET => {
            let version = query
                .strip_prefix("version=")
                .map_or(3, |v| v.parse().unwrap());
            axum::Json(stored(id, version)).into_response()
        }
        Method::PATCH => {
            let mut agent = stored(id, 4);
            for (key, value) in body.as_object().unwrap() {
                if value.is_null() {
                    agent.as_object_mut().unwrap().remove(key);
                } else {
                    agent[key] = value.clone();
                }
            }
            axum::Json(agent).into_response()
        }
        Method::DELETE => StatusCode::NO_CONTENT.into_response(),
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

/// The recording server, on a free loopback port.
struct Server {
    base: String,
    log: Log,
}

impl Server {
    async fn start() -> Self {
        let log = Log::default();
        let app = axum::Router::new().fallback(handle).with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base, log }
    }

    /// The requests received since the last call.
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// (method, path, body) of the requests received since the last call.
    fn requests(&self) -> Vec<(String, String, Value)> {
        self.take()
            .into_iter()
            .map(|s| (s.method, s.path, s.body))
            .collect()
    }
}

struct Run {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the binary with `args`, the server and key given by the environment (as a user with
/// `AGENTLANE_URL` and `AGENTLANE_API_KEY` set), in `cwd` (a directory without `.agentlane`).
async fn agentlane_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentlane"));
    command
        .args(args)
        .current_dir(cwd)
        .env_remove("AGENTLANE_URL")
        .env_remove("AGENTLANE_API_KEY")
        .env_remove("AGENTLANE_DATA_DIR")
        .env("NO_PROXY", "127.0.0.1")
        // Times are shown in local time: fix the zone so the expected text holds anywhere.
        .env("TZ", "UTC");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().await.unwrap();
    Run {
        ok: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

async fn agentlane(server: &Server, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AGENTLANE_URL", server.base.as_str()),
        ("AGENTLANE_API_KEY", KEY),
    ];
    let run = agentlane_in(dir.path(), &env, args).await;
    assert!(
        run.ok,
        "agentlane {args:?} failed:\n{}{}",
        run.stdout, run.stderr
    );
    run
}

fn post(path: &str, body: Value) -> (String, String, Value) {
    ("POST".to_owned(), path.to_owned(), body)
}

fn request(method: &str, path: &str, body: Value) -> (String, String, Value) {
    (method.to_owned(), path.to_owned(), body)
}

#[tokio::test]
async fn agents_commands_send_the_contract_requests_and_print_the_answers() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        r#"
name = "Support bot"
[[tools.mcpServers]]
name = "everything"
url = "http://127.0.0.1:3917/mcp"
headers = { Authorization = { env = "MCP_TOKEN" } }
"#,
    )
    .unwrap();
    let file = file.display().to_string();

    let run = agentlane(
        &server,
        &[
            "agents",
            "create",
            "support-bot",
            "--file",
            &file,
            "--model",
            "openai/gpt-4o-mini",
        ],
    )
    .await;
    assert_eq!(
        server.requests(),
        [post(
            "/v1/agents",
            json!({"agentId": "support-bot", "name": "Support bot", "model": "openai/gpt-4o-mini",
                   "tools": {"mcpServers": [{"name": "everything", "url": "http://127.0.0.1:3917/mcp",
                                             "headers": {"Authorization": {"env": "MCP_TOKEN"}}}]}})
        )]
    );
    assert!(
        run.stdout.starts_with("agent support-bot (version 1)\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("MCP server       everything"),
        "{}",
        run.stdout
    );

    let run = agentlane(&server, &["agents", "list"]).await;
    assert_eq!(
        server.requests(),
        [request("GET", "/v1/agents", Value::Null)]
    );
    assert!(
        run.stdout.starts_with("ID           VERSION  NAME"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(
        "support-bot  3        Support bot  openai/gpt-4o-mini  2025-11-30T05:20:00+00:00\n"
    ));
    assert!(
        run.stdout
            .ends_with("(more: agentlane agents list --cursor c2)\n")
    );

    agentlane(
        &server,
        &["agents", "list", "--limit", "2", "--cursor", "c2/+="],
    )
    .await;
    assert_eq!(
        server.requests(),
        [request(
            "GET",
            "/v1/agents?limit=2&cursor=c2%2F%2B%3D",
            Value::Null
        )]
    );

    let run = agentlane(
        &server,
        &["agents", "show", "support-bot", "--version", "2"],
    )
    .await;
    assert_eq!(
        server.requests(),
        [request(
            "GET",
            "/v1/agents/support-bot?version=2",
            Value::Null
        )]
    );
    assert!(
        run.stdout.starts_with("agent support-bot (version 2)\n"),
        "{}",
        run.stdout
    );

    // A field set whole: one PATCH of only that field.
    let run = agentlane(
        &server,
        &[
            "agents",
            "edit",
            "support-bot",
            "--name",
            "Bot",
            "--clear",
            "model",
        ],
    )
    .await;
    assert_eq!(
        server.requests(),
        [request(
            "PATCH",
            "/v1/agents/support-bot",
            json!({"name": "Bot", "model": null})
        )]
    );
    assert!(
        run.stdout.starts_with("agent support-bot (version 4)\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("(deployment default)"),
        "{}",
        run.stdout
    );

    // Part of a field: the agent is read, and the field sent whole.
    agentlane(
        &server,
        &[
            "agents",
            "edit",
            "support-bot",
            "--no-builtin",
            "--metadata",
            "tier=2",
        ],
    )
    .await;
    assert_eq!(
        server.requests(),
        [
            request("GET", "/v1/agents/support-bot", Value::Null),
            request(
                "PATCH",
                "/v1/agents/support-bot",
                json!({"tools": {"builtin": [],
                                 "mcpServers": [{"name": "everything",
                                                 "url": "http://127.0.0.1:3917/mcp"}]},
                       "metadata": {"team": "cx", "tier": "2"}})
            )
        ]
    );

    let run = agentlane(&server, &["agents", "rm", "support-bot"]).await;
    assert_eq!(
        server.requests(),
        [request("DELETE", "/v1/agents/support-bot", Value::Null)]
    );
    assert_eq!(run.stdout, "deleted agent support-bot\n");
}

#[tokio::test]
async fn json_prints_the_api_answer() {
    let server = Server::start().await;
    let run = agentlane(&server, &["agents", "show", "support-bot", "--json"]).await;
    let shown: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(shown, stored("support-bot", 3));

    let run = agentlane(&server, &["agents", "--json", "list"]).await;
    let page: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(page["nextCursor"], "c2");
    assert_eq!(page["agents"][0], stored("support-bot", 3));

    let run = agentlane(
        &server,
        &["agents", "create", "bot", "--name", "B", "--json"],
    )
    .await;
    let created: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        created,
        json!({"agentId": "bot", "name": "B", "version": 1,
               "createdAt": UPDATED_AT, "updatedAt": UPDATED_AT})
    );

    let run = agentlane(&server, &["agents", "rm", "bot", "--json"]).await;
    let deleted: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(deleted, json!({"deleted": "bot"}));
}

#[tokio::test]
async fn an_api_error_prints_its_code_and_message_and_exits_non_zero() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AGENTLANE_URL", server.base.as_str()),
        ("AGENTLANE_API_KEY", KEY),
    ];
    for args in [
        &["agents", "show", "missing"][..],
        &["agents", "edit", "missing", "--name", "x"],
        &["agents", "rm", "missing", "--json"],
    ] {
        let run = agentlane_in(dir.path(), &env, args).await;
        assert_eq!(run.code, Some(1), "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
        assert!(
            run.stderr.contains("404") && run.stderr.contains("not_found: no agent missing"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // A body the CLI refuses is never sent.
    let run = agentlane_in(dir.path(), &env, &["agents", "edit", "support-bot"]).await;
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("nothing to change"), "{}", run.stderr);
    assert_eq!(server.take().len(), 3);
}

#[tokio::test]
async fn agent_with_agent_sends_the_agent_id_in_the_turn() {
    let server = Server::start().await;
    agentlane(
        &server,
        &[
            "agent",
            "--session",
            "s1",
            "--message",
            "hi",
            "--agent",
            "support-bot",
        ],
    )
    .await;
    agentlane(&server, &["agent", "--session", "s1", "--message", "hi"]).await;
    assert_eq!(
        server.requests(),
        [
            post(
                "/v1/agent",
                json!({"sessionKey": "s1", "message": "hi", "agentId": "support-bot"})
            ),
            post("/v1/agent", json!({"sessionKey": "s1", "message": "hi"})),
        ]
    );
}

#[tokio::test]
async fn the_connection_comes_from_flags_the_environment_or_the_data_dir() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("api-key"), "key-from-data-dir\n").unwrap();
    let data = data.display().to_string();

    let flags = [
        "agents",
        "--url",
        &server.base,
        "--api-key",
        "key-from-flag",
        "show",
        "support-bot",
    ];
    assert!(agentlane_in(dir.path(), &[], &flags).await.ok);
    let env = [
        ("AGENTLANE_URL", server.base.as_str()),
        ("AGENTLANE_API_KEY", "key-from-env"),
    ];
    assert!(agentlane_in(dir.path(), &env, &["agents", "list"]).await.ok);
    let env = [
        ("AGENTLANE_URL", server.base.as_str()),
        ("AGENTLANE_DATA_DIR", data.as_str()),
    ];
    assert!(agentlane_in(dir.path(), &env, &["agents", "list"]).await.ok);
    let flags = [
        "agents",
        "--url",
        &server.base,
        "--data-dir",
        &data,
        "rm",
        "b",
    ];
    assert!(agentlane_in(dir.path(), &[], &flags).await.ok);
    let keys: Vec<_> = server
        .take()
        .into_iter()
        .map(|s| s.authorization.unwrap_or_default())
        .collect();
    assert_eq!(
        keys,
        [
            "Bearer key-from-flag",
            "Bearer key-from-env",
            "Bearer key-from-data-dir",
            "Bearer key-from-data-dir"
        ]
    );

    // No key anywhere: refused before any request.
    let env = [("AGENTLANE_URL", server.base.as_str())];
    let run = agentlane_in(dir.path(), &env, &["agents", "list"]).await;
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("no API key"), "{}", run.stderr);
    assert!(server.take().is_empty());
}
