//! Keys and secrets on the AWS deployment (always on the emulator, whatever
//! `AGENTLANE_E2E_BACKEND` says): API keys created with `agentlane keys create` authenticate
//! against a server on DynamoDB + SQS, a revoked key is refused within the key cache TTL, and a
//! provider key kept in Secrets Manager reaches the model server. Neither kind of secret shows
//! in the server's logs, the CLI's listing or a run's events.

use crate::support::{GREETING, LONG, SERVER_BIN};
use agentlane_core::RunStatus;
use agentlane_tests::{Aimock, Client, Fixtures, Server, ServerOptions, TENANT_A};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The key cache TTL of these servers.
const KEY_TTL: Duration = Duration::from_millis(1_000);

fn emulator() -> String {
    std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// `agentlane <args>` with the server's backend settings; fails the test unless it succeeds.
fn cli(server: &Server, args: &[&str]) -> anyhow::Result<Output> {
    let output = server.cli().args(args).output()?;
    anyhow::ensure!(
        output.status.success(),
        "agentlane {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

fn stdout_json(output: &Output) -> anyhow::Result<Value> {
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// `agentlane keys create --tenant <tenant>`: (key id, key).
fn create_key(server: &Server, tenant: &str) -> anyhow::Result<(String, String)> {
    let created = stdout_json(&cli(server, &["keys", "create", "--tenant", tenant])?)?;
    let id = created["keyId"].as_str().unwrap_or_default().to_owned();
    let key = created["key"].as_str().unwrap_or_default().to_owned();
    assert!(key.starts_with("al_") && key.contains(&id), "{created}");
    Ok((id, key))
}

async fn status_of(client: &Client) -> anyhow::Result<StatusCode> {
    Ok(client
        .raw(Method::GET, "/v1/sessions/keys/transcript", None)
        .await?
        .status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_created_with_the_cli_authenticate_and_a_revoked_key_stops_within_the_ttl()
-> anyhow::Result<()> {
    // GIVEN a server on DynamoDB + SQS whose key cache keeps answers for 1 s
    cli_keys_scenario(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_users_manage_keys_the_same_way_on_the_embedded_store() -> anyhow::Result<()> {
    // GIVEN a server on the embedded store (on the emulator under AGENTLANE_E2E_BACKEND=aws)
    cli_keys_scenario(false).await
}

/// The key life cycle through the CLI against a server whose key cache TTL is [`KEY_TTL`].
async fn cli_keys_scenario(aws: bool) -> anyhow::Result<()> {
    let mock = Aimock::start(Fixtures::scenarios())?;
    let mut options = ServerOptions::new(SERVER_BIN).model_server(&mock).env(
        "AGENTLANE_API_KEY_CACHE_TTL_MS",
        KEY_TTL.as_millis().to_string(),
    );
    if aws {
        options = options.aws_backend();
    }
    let server = Server::start(options)?;

    // WHEN an operator creates two keys for tenant `keyed` with the CLI
    let (first_id, first) = create_key(&server, "keyed")?;
    let (second_id, second) = create_key(&server, "keyed")?;

    // THEN the first key sends a turn that the model answers
    let client = Client::new(server.url(), &first);
    let accepted = client.agent("keys", "hello").await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    // AND the run belongs to that tenant alone
    let (status, _) = server
        .client(TENANT_A)
        .json(Method::GET, &format!("/v1/runs/{}", accepted.run_id), None)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // AND the right id with a wrong secret is refused
    let forged = format!("{}{}", &first[..first.len() - 4], "ZZZZ");
    assert_eq!(
        status_of(&Client::new(server.url(), &forged)).await?,
        StatusCode::UNAUTHORIZED
    );

    // WHEN the keys are listed
    let listing = cli(&server, &["keys", "list", "--tenant", "keyed"])?;
    let text = String::from_utf8_lossy(&listing.stdout).into_owned();
    // THEN both ids show, and no key
    let ids: Vec<String> = stdout_json(&listing)?["keys"]
        .as_array()
        .map(|keys| {
            keys.iter()
                .filter_map(|k| k["keyId"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(ids, [first_id.clone(), second_id.clone()]);
    for key in [&first, &second] {
        assert!(
            !text.contains(&key[key.len() - 43..]),
            "listing shows a secret: {text}"
        );
    }

    // WHEN the first key is revoked
    cli(&server, &["keys", "revoke", &first_id, "--tenant", "keyed"])?;
    let revoked_at = Instant::now();

    // THEN the server refuses it within the TTL (plus a little for the request itself)
    loop {
        let status = status_of(&client).await?;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(
            revoked_at.elapsed() < KEY_TTL + Duration::from_secs(2),
            "the revoked key still works after {:?}",
            revoked_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // AND the tenant's other key still works
    assert_eq!(
        status_of(&Client::new(server.url(), &second)).await?,
        StatusCode::OK
    );
    // AND another tenant cannot revoke the second key
    let other = server
        .cli()
        .args(["keys", "revoke", &second_id, "--tenant", "intruder"])
        .output()?;
    assert!(!other.status.success());
    assert_eq!(
        status_of(&Client::new(server.url(), &second)).await?,
        StatusCode::OK
    );

    // AND no key ever showed in the server's logs or the run's events
    let logs = server.stderr_tail(1_000_000);
    let events = serde_json::to_string(&client_events(&server, &second, &accepted.run_id).await?)?;
    for key in [&first, &second] {
        let secret = &key[key.len() - 43..];
        assert!(!logs.contains(secret), "a key in the server log");
        assert!(!events.contains(secret), "a key in the events");
    }
    Ok(())
}

async fn client_events(server: &Server, key: &str, run_id: &str) -> anyhow::Result<Value> {
    let (status, body) = Client::new(server.url(), key)
        .json(Method::GET, &format!("/v1/runs/{run_id}/events"), None)
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    Ok(body)
}

/// An OpenAI-compatible model server that records each request's `Authorization` header and
/// streams one short reply, or answers 401 to any other key than `expected`.
struct ScriptedModel {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    /// The only `Authorization` it accepts (`Bearer <key>`).
    expected: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

const SCRIPTED_REPLY: &str = "Hello from the scripted model.";

#[derive(Clone)]
struct ModelState {
    expected: Arc<Mutex<String>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ScriptedModel {
    async fn start(expected_key: &str) -> anyhow::Result<Self> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let expected = Arc::new(Mutex::new(format!("Bearer {expected_key}")));
        let state = ModelState {
            expected: expected.clone(),
            seen: seen.clone(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url,
            seen,
            expected,
            task,
        })
    }

    /// From now on only `key` is accepted (the provider rotated it).
    fn accept_only(&self, key: &str) {
        *self.expected.lock().unwrap() = format!("Bearer {key}");
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn complete(
    State(state): State<ModelState>,
    headers: HeaderMap,
    Json(_body): Json<Value>,
) -> axum::response::Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    state.seen.lock().unwrap().push(auth.clone());
    let expected = state.expected.lock().unwrap().clone();
    if auth != expected {
        let error = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}});
        return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
               "model": "gpt-4o-mini",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let body = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(
            json!({"role": "assistant", "content": SCRIPTED_REPLY}),
            Value::Null
        ),
        chunk(json!({}), json!("stop")),
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        body,
    )
        .into_response()
}

/// A Secrets Manager client of the emulator.
async fn secrets_client() -> agentlane_aws::aws_sdk_secretsmanager::Client {
    use agentlane_aws::aws_config::{BehaviorVersion, Region};
    use agentlane_aws::aws_sdk_secretsmanager::config::Credentials;
    let sdk = agentlane_aws::aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(emulator())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "e2e"))
        .load()
        .await;
    agentlane_aws::aws_sdk_secretsmanager::Client::new(&sdk)
}

/// Creates a Secrets Manager secret on the emulator; its ARN.
async fn create_secret(name: &str, value: &str) -> anyhow::Result<String> {
    let out = secrets_client()
        .await
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await?;
    Ok(out.arn.unwrap_or_else(|| name.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_key_from_secrets_manager_reaches_the_model_server() -> anyhow::Result<()> {
    // GIVEN a provider key kept in a Secrets Manager secret, and a model server that only
    // accepts that key
    let provider_key = format!("sk-from-secrets-manager-{}", uuid_like());
    let model = ScriptedModel::start(&provider_key).await?;
    let secret_name = format!("agentlane-e2e/provider-keys/{}", uuid_like());
    let arn = create_secret(&secret_name, &json!({ "openai": provider_key }).to_string()).await?;

    // AND a server on DynamoDB + SQS naming the secret, with no provider key in its environment
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .aws_backend()
            .env("OPENAI_BASE_URL", model.url.clone())
            .env("AGENTLANE_PROVIDER_KEYS_SECRET_ARN", arn),
    )?;

    // WHEN a tenant sends a turn
    let client = server.client(TENANT_A);
    let accepted = client.agent("secret-key", "hello").await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;

    // THEN the model server saw the key from the secret, and the turn succeeded
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), SCRIPTED_REPLY);
    let seen = model.seen.lock().unwrap().clone();
    assert_eq!(seen, [format!("Bearer {provider_key}")]);

    // AND the key shows nowhere: not in the server's logs, not in the run's events
    let logs = server.stderr_tail(1_000_000);
    assert!(
        !logs.contains(&provider_key),
        "the provider key in the server log"
    );
    assert!(
        logs.contains("OPENAI_API_KEY"),
        "the log names the variable read: {logs}"
    );
    let events = client_events(&server, TENANT_A.key, &accepted.run_id).await?;
    assert!(!events.to_string().contains(&provider_key));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_key_rotated_in_secrets_manager_is_used_once_the_cache_ttl_has_passed()
-> anyhow::Result<()> {
    // GIVEN a provider key in Secrets Manager, and a server whose secret cache TTL is 1 s
    let first_key = format!("sk-first-{}", uuid_like());
    let model = ScriptedModel::start(&first_key).await?;
    let secret_name = format!("agentlane-e2e/provider-keys/{}", uuid_like());
    let arn = create_secret(&secret_name, &json!({ "openai": first_key }).to_string()).await?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .aws_backend()
            .env("OPENAI_BASE_URL", model.url.clone())
            .env("AGENTLANE_SECRET_CACHE_TTL_MS", "1000")
            .env("AGENTLANE_PROVIDER_KEYS_SECRET_ARN", arn.clone()),
    )?;
    let client = server.client(TENANT_A);
    let run = client
        .wait_done(&client.agent("rotate", "hello").await?.run_id, LONG)
        .await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");

    // WHEN the key is rotated: the secret holds a new one, and the provider accepts only that
    let second_key = format!("sk-second-{}", uuid_like());
    secrets_client()
        .await
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(json!({ "openai": second_key }).to_string())
        .send()
        .await?;
    model.accept_only(&second_key);
    tokio::time::sleep(Duration::from_millis(1_300)).await;

    // THEN the next turn, started after the TTL, sends the new key and succeeds, without a restart
    let run = client
        .wait_done(&client.agent("rotate", "again").await?.run_id, LONG)
        .await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    let seen = model.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            format!("Bearer {first_key}"),
            format!("Bearer {second_key}")
        ]
    );
    // AND neither key shows in the server's logs
    let logs = server.stderr_tail(1_000_000);
    assert!(!logs.contains(&first_key) && !logs.contains(&second_key));
    assert!(logs.contains("provider key rotated"), "{logs}");
    Ok(())
}

/// A fresh suffix (the emulator is shared by every run).
fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    )
}
