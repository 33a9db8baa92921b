//! OAuth 2.0 client credentials for an agent's tools (issue 42 §6): a local authorization
//! server that checks the client's id and secret (HTTP Basic, as the runner sends them), counts
//! its requests and issues short-lived tokens; a resource server (the HTTP tool's URL) that
//! accepts only the current, unexpired, unrevoked token and echoes the `Authorization` it got.
//! The token is fetched once for the tenant's runs and again shortly before it expires; a `401`
//! is refreshed exactly once; a wrong client secret is a clear tool error; no secret or token
//! reaches the transcript, the events, the run, the model or the logs; the token endpoint is
//! behind the SSRF guard. An MCP server (the reference server behind a token-checking proxy)
//! gets the token too. Both backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{Client, RunView, Scenario, check_pairing, transcript_items};
use agentlane_tools::testing::McpEverything;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The client the authorization server knows.
const CLIENT_ID: &str = "orders-app";
/// Its secret, stored by the tenants with `PUT /v1/secrets/orders-client`.
const CLIENT_SECRET: &str = "cs-orders-7d1f0a9b3c5e";
const SECRET_NAME: &str = "orders-client";
const SCOPE: &str = "orders:read";
/// The model's prompt that makes it call the tool.
const PROMPT: &str = "list my orders";
const TOOL: &str = "list_orders";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A token the authorization server issued.
#[derive(Clone)]
struct Issued {
    token: String,
    at: Instant,
    lifetime: Duration,
}

/// One request to the token endpoint.
#[derive(Clone)]
struct TokenRequest {
    authorization: String,
    /// The form fields.
    form: Vec<(String, String)>,
    /// Whether it got a token.
    granted: bool,
}

/// The authorization server: one client, tokens that live `expires_in` seconds.
struct TokenServer {
    expires_in: AtomicU64,
    requests: Mutex<Vec<TokenRequest>>,
    issued: Mutex<Vec<Issued>>,
}

impl TokenServer {
    fn requests(&self) -> Vec<TokenRequest> {
        lock(&self.requests).clone()
    }

    fn issued(&self) -> Vec<Issued> {
        lock(&self.issued).clone()
    }

    fn tokens(&self) -> Vec<String> {
        self.issued().into_iter().map(|i| i.token).collect()
    }

    /// The latest token, if it has not expired.
    fn current(&self) -> Option<Issued> {
        lock(&self.issued)
            .last()
            .filter(|i| i.at.elapsed() < i.lifetime)
            .cloned()
    }
}

/// `Basic base64(id:secret)`, as RFC 6749 §2.3.1 has the client send it (id and secret are
/// form-urlencoded first; ours need no escaping).
fn basic(id: &str, secret: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
    )
}

fn form_fields(body: &str) -> Vec<(String, String)> {
    let mut url = reqwest::Url::parse("http://form.invalid/").expect("a URL");
    url.set_query(Some(body));
    url.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn authorization(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `POST /token`: a client credentials grant for [`CLIENT_ID`] with [`CLIENT_SECRET`] gets a
/// new token; wrong credentials get `401 invalid_client`, whose description echoes the
/// `Authorization` header (a careless server: the runner must not pass the secret on).
async fn token_endpoint(
    State(server): State<Arc<TokenServer>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let auth = authorization(&headers);
    let form = form_fields(&body);
    let granted = auth == basic(CLIENT_ID, CLIENT_SECRET)
        && field(&form, "grant_type") == Some("client_credentials");
    lock(&server.requests).push(TokenRequest {
        authorization: auth.clone(),
        form,
        granted,
    });
    if !granted {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"orders\"")],
            axum::Json(json!({"error": "invalid_client",
                              "error_description": format!("bad client credentials: {auth}")})),
        )
            .into_response();
    }
    let expires_in = server.expires_in.load(Ordering::SeqCst);
    let token = format!("at-{}", uuid::Uuid::new_v4().simple());
    lock(&server.issued).push(Issued {
        token: token.clone(),
        at: Instant::now(),
        lifetime: Duration::from_secs(expires_in),
    });
    axum::Json(json!({"access_token": token, "token_type": "Bearer",
                      "expires_in": expires_in, "scope": SCOPE}))
    .into_response()
}

/// Starts an authorization server issuing tokens that live `expires_in` seconds; its token
/// URL.
async fn token_server(expires_in: u64) -> anyhow::Result<(Arc<TokenServer>, String)> {
    let server = Arc::new(TokenServer {
        expires_in: AtomicU64::new(expires_in),
        requests: Mutex::new(Vec::new()),
        issued: Mutex::new(Vec::new()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/token", listener.local_addr()?);
    let app = Router::new()
        .route("/token", post(token_endpoint))
        .with_state(server.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Ok((server, url))
}

/// Whether a resource server accepts `authorization`: the current token of `tokens`, not
/// revoked, and nothing refused wholesale.
struct Gate {
    tokens: Arc<TokenServer>,
    revoked: Mutex<HashSet<String>>,
    refuse_all: AtomicBool,
    /// Every `Authorization` received, and whether it was accepted.
    seen: Mutex<Vec<(String, bool)>>,
}

impl Gate {
    fn new(tokens: Arc<TokenServer>) -> Arc<Self> {
        Arc::new(Self {
            tokens,
            revoked: Mutex::new(HashSet::new()),
            refuse_all: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
        })
    }

    fn admits(&self, authorization: &str) -> bool {
        let accepted = !self.refuse_all.load(Ordering::SeqCst)
            && self.tokens.current().is_some_and(|current| {
                authorization == format!("Bearer {}", current.token)
                    && !lock(&self.revoked).contains(&current.token)
            });
        lock(&self.seen).push((authorization.to_owned(), accepted));
        accepted
    }

    fn revoke(&self, token: &str) {
        lock(&self.revoked).insert(token.to_owned());
    }

    fn seen(&self) -> Vec<(String, bool)> {
        lock(&self.seen).clone()
    }
}

/// `401` as RFC 6750 has it; the body echoes what was sent (the runner must redact it).
fn invalid_token(authorization: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")],
        axum::Json(json!({"error": "invalid_token", "youSent": authorization})),
    )
        .into_response()
}

/// `POST /orders`, the HTTP tool's endpoint: orders for the current token, echoing the
/// `Authorization` it got; `401` for any other.
async fn orders(State(gate): State<Arc<Gate>>, headers: HeaderMap) -> Response {
    let auth = authorization(&headers);
    if !gate.admits(&auth) {
        return invalid_token(&auth);
    }
    axum::Json(json!({"orders": ["o-1", "o-2"], "youSent": auth})).into_response()
}

async fn resource_server(tokens: Arc<TokenServer>) -> anyhow::Result<(Arc<Gate>, String)> {
    let gate = Gate::new(tokens);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/orders", listener.local_addr()?);
    let app = Router::new()
        .route("/orders", post(orders))
        .with_state(gate.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Ok((gate, url))
}

/// `host:port` of a URL, for the allow list.
fn authority(url: &str) -> String {
    let url = reqwest::Url::parse(url).expect("a URL");
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port().unwrap_or(80)
    )
}

/// A server whose SSRF allow list admits exactly `urls`' host and port, and aimock told to
/// call [`TOOL`] on [`PROMPT`].
fn start(urls: &[&str]) -> anyhow::Result<Scenario> {
    let allow = urls
        .iter()
        .map(|u| authority(u))
        .collect::<Vec<_>>()
        .join(",");
    let scn = scenario_with(|o| o.env("AGENTLANE_HTTP_FETCH_ALLOW", allow))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": PROMPT, "hasToolResult": true},
               "response": {"content": "Here is what the orders service said."}}),
        json!({"match": {"userMessage": PROMPT, "hasToolResult": false},
               "response": {"content": "Looking them up.", "toolCalls": [
                   {"id": "call_orders", "name": TOOL, "arguments": {}}]}}),
    ])?;
    Ok(scn)
}

fn auth(token_url: &str) -> Value {
    json!({"type": "oauth2_client_credentials", "tokenUrl": token_url, "clientId": CLIENT_ID,
           "clientSecret": {"secret": SECRET_NAME}, "scopes": [SCOPE]})
}

/// An agent whose one HTTP tool, [`TOOL`], reaches `url` with a token from `token_url`.
fn agent(id: &str, url: &str, token_url: &str) -> Value {
    json!({
        "agentId": id,
        "tools": {"builtin": [], "http": [{
            "name": TOOL,
            "description": "Lists the caller's orders.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
            "url": url,
            "auth": auth(token_url)
        }]}
    })
}

/// Stores `secret` as the tenant's client secret and defines `agent`.
async fn define(client: &Client, secret: &str, agent: Value) -> anyhow::Result<()> {
    let (status, body) = client
        .json(
            Method::PUT,
            &format!("/v1/secrets/{SECRET_NAME}"),
            Some(json!({"value": secret})),
        )
        .await?;
    assert!(status.is_success(), "{body}");
    let (status, body) = client.json(Method::POST, "/v1/agents", Some(agent)).await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    Ok(())
}

/// One turn of `agent_id` on `session`, waited for: the run ends ok whatever the tool did.
async fn turn(client: &Client, agent_id: &str, session: &str) -> anyhow::Result<RunView> {
    let accepted = client
        .agent_with(json!({"sessionKey": session, "agentId": agent_id, "message": PROMPT}))
        .await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    Ok(run)
}

/// The session's one tool result: `(content, is_error)`.
async fn tool_result(client: &Client, session: &str) -> anyhow::Result<(String, bool)> {
    let transcript = client.transcript(session).await?;
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let results: Vec<(String, bool)> = transcript
        .entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    Ok(results[0].clone())
}

/// What the resource server was told it was sent, as the tool's result shows it.
fn echoed(content: &str) -> String {
    serde_json::from_str::<Value>(content).map_or_else(
        |_| String::new(),
        |v| v["youSent"].as_str().unwrap_or_default().to_owned(),
    )
}

/// None of `needles` is in anything the tenant or the operator can read about `runs`
/// (`(run id, session)`): the run, its events, the transcript; nor in what the model was
/// sent, nor in the server's logs.
async fn assert_nothing_leaks(
    scn: &Scenario,
    client: &Client,
    runs: &[(&str, &str)],
    needles: &[String],
) -> anyhow::Result<()> {
    let mut everything = String::new();
    for (run_id, session) in runs {
        let (_, view) = client
            .json(Method::GET, &format!("/v1/runs/{run_id}"), None)
            .await?;
        everything.push_str(&view.to_string());
        everything.push_str(&serde_json::to_string(&client.events(run_id).await?)?);
        everything.push_str(&serde_json::to_string(
            &client.transcript(session).await?.entries,
        )?);
    }
    let model = serde_json::to_string(
        &scn.mock
            .model_requests()?
            .iter()
            .map(|r| r.body.clone())
            .collect::<Vec<_>>(),
    )?;
    let logs = scn.server.stderr_tail(1 << 22);
    for needle in needles {
        assert!(needle.len() >= 8, "a needle too short to mean anything");
        assert!(
            !everything.contains(needle.as_str()),
            "{needle} leaked: {everything}"
        );
        assert!(!model.contains(needle.as_str()), "the model saw {needle}");
        assert!(!logs.contains(needle.as_str()), "the logs hold {needle}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_a_tenant_share_one_token_and_another_tenant_gets_its_own() -> anyhow::Result<()>
{
    // GIVEN an authorization server issuing hour-long tokens, and for two tenants an agent
    // whose HTTP tool uses client credentials, the client secret a tenant secret
    let (tokens, token_url) = token_server(3600).await?;
    let (gate, url) = resource_server(tokens.clone()).await?;
    let scn = start(&[&token_url, &url])?;
    let (a, b) = (scn.a(), scn.b());
    for client in [&a, &b] {
        define(client, CLIENT_SECRET, agent("orders", &url, &token_url)).await?;
    }

    // WHEN tenant A runs two turns in a row that call the tool
    let first = turn(&a, "orders", "cc-1").await?;
    let second = turn(&a, "orders", "cc-2").await?;

    // THEN the token endpoint was asked once, with the client credentials grant, the scope and
    // the client's id and secret in HTTP Basic (not in the form)
    let requests = tokens.requests();
    assert_eq!(requests.len(), 1, "one token for both runs");
    let request = &requests[0];
    assert!(request.granted);
    assert_eq!(request.authorization, basic(CLIENT_ID, CLIENT_SECRET));
    assert_eq!(
        field(&request.form, "grant_type"),
        Some("client_credentials")
    );
    assert_eq!(field(&request.form, "scope"), Some(SCOPE));
    assert_eq!(field(&request.form, "client_secret"), None);
    // AND both calls carried that token, and were accepted
    let token = tokens.tokens()[0].clone();
    let bearer = format!("Bearer {token}");
    assert_eq!(
        gate.seen(),
        [(bearer.clone(), true), (bearer.clone(), true)]
    );
    // AND the endpoint's echo of it is redacted in the tool's result
    for session in ["cc-1", "cc-2"] {
        let (content, is_error) = tool_result(&a, session).await?;
        assert!(!is_error, "{content}");
        assert!(content.contains("o-1"), "{content}");
        assert_eq!(echoed(&content), "Bearer [redacted]", "{content}");
    }

    // WHEN tenant B, with the same client and secret, runs a turn
    let other = turn(&b, "orders", "cc-b").await?;
    // THEN it gets a token of its own: tokens are never shared across tenants
    assert_eq!(tokens.requests().len(), 2);
    let b_token = tokens.tokens()[1].clone();
    assert_ne!(b_token, token);
    assert_eq!(
        gate.seen().last(),
        Some(&(format!("Bearer {b_token}"), true))
    );
    let (content, is_error) = tool_result(&b, "cc-b").await?;
    assert!(
        !is_error && echoed(&content) == "Bearer [redacted]",
        "{content}"
    );

    // AND neither the client secret nor a token appears anywhere
    let needles = vec![
        CLIENT_SECRET.to_owned(),
        token.clone(),
        b_token.clone(),
        basic(CLIENT_ID, CLIENT_SECRET)
            .trim_start_matches("Basic ")
            .to_owned(),
    ];
    assert_nothing_leaks(
        &scn,
        &a,
        &[(&first.run_id, "cc-1"), (&second.run_id, "cc-2")],
        &needles,
    )
    .await?;
    assert_nothing_leaks(&scn, &b, &[(&other.run_id, "cc-b")], &needles).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_is_fetched_shortly_before_the_old_one_expires() -> anyhow::Result<()> {
    // GIVEN tokens that live 4 s: reused for half of that (the early-refresh margin is
    // min(30 s, lifetime / 2))
    let (tokens, token_url) = token_server(4).await?;
    let (gate, url) = resource_server(tokens.clone()).await?;
    let scn = start(&[&token_url, &url])?;
    let a = scn.a();
    define(&a, CLIENT_SECRET, agent("orders", &url, &token_url)).await?;
    turn(&a, "orders", "exp-1").await?;
    let first = tokens.issued()[0].clone();

    // WHEN the next run calls the tool after the margin, while the token has not expired yet
    let refresh_at = first.at + Duration::from_millis(2300);
    tokio::time::sleep(refresh_at.saturating_duration_since(Instant::now())).await;
    turn(&a, "orders", "exp-2").await?;

    // THEN it fetched a new token, and the resource server never got an expired one
    let issued = tokens.issued();
    assert_eq!(issued.len(), 2, "a new token after the reuse time");
    assert!(issued[1].at.duration_since(first.at) >= Duration::from_secs(2));
    assert_eq!(
        gate.seen(),
        [
            (format!("Bearer {}", issued[0].token), true),
            (format!("Bearer {}", issued[1].token), true)
        ]
    );
    let (content, is_error) = tool_result(&a, "exp-2").await?;
    assert!(!is_error, "{content}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_refreshed_once_and_a_second_401_is_a_tool_error() -> anyhow::Result<()>
{
    let (tokens, token_url) = token_server(3600).await?;
    let (gate, url) = resource_server(tokens.clone()).await?;
    let scn = start(&[&token_url, &url])?;
    let a = scn.a();
    define(&a, CLIENT_SECRET, agent("orders", &url, &token_url)).await?;
    let first = turn(&a, "orders", "rev-1").await?;
    let revoked = tokens.tokens()[0].clone();

    // WHEN the resource server revokes the cached token
    gate.revoke(&revoked);
    let second = turn(&a, "orders", "rev-2").await?;

    // THEN the call got a 401, fetched one new token and went through with it
    let fresh = tokens.tokens()[1].clone();
    assert_eq!(tokens.requests().len(), 2);
    assert_eq!(
        gate.seen()[1..],
        [
            (format!("Bearer {revoked}"), false),
            (format!("Bearer {fresh}"), true)
        ]
    );
    let (content, is_error) = tool_result(&a, "rev-2").await?;
    assert!(!is_error, "{content}");
    assert_eq!(echoed(&content), "Bearer [redacted]");

    // WHEN the resource server refuses every token
    gate.refuse_all.store(true, Ordering::SeqCst);
    let third = turn(&a, "orders", "rev-3").await?;

    // THEN the call was refreshed once more and then failed: two requests, one new token, no loop
    assert_eq!(tokens.requests().len(), 3, "exactly one refresh");
    let last = tokens.tokens()[2].clone();
    assert_eq!(
        gate.seen()[3..],
        [
            (format!("Bearer {fresh}"), false),
            (format!("Bearer {last}"), false)
        ]
    );
    // AND the model got a tool error saying so, without the echoed token
    let (content, is_error) = tool_result(&a, "rev-3").await?;
    assert!(is_error, "{content}");
    assert!(
        content.contains(TOOL) && content.contains("401") && content.contains("invalid_token"),
        "{content}"
    );
    assert_nothing_leaks(
        &scn,
        &a,
        &[
            (&first.run_id, "rev-1"),
            (&second.run_id, "rev-2"),
            (&third.run_id, "rev-3"),
        ],
        &[CLIENT_SECRET.to_owned(), revoked, fresh, last],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_is_a_clear_tool_error_that_shows_no_secret() -> anyhow::Result<()> {
    // GIVEN a tenant whose stored client secret is not the one the authorization server knows
    let wrong = "cs-wrong-2b4d6f8a0c1e";
    let (tokens, token_url) = token_server(3600).await?;
    let (gate, url) = resource_server(tokens.clone()).await?;
    let scn = start(&[&token_url, &url])?;
    let a = scn.a();
    define(&a, wrong, agent("orders", &url, &token_url)).await?;

    // WHEN a run calls the tool
    let run = turn(&a, "orders", "wrong").await?;

    // THEN the token endpoint refused the client, the resource server was never called
    let requests = tokens.requests();
    assert_eq!(requests.len(), 1);
    assert!(!requests[0].granted);
    assert_eq!(requests[0].authorization, basic(CLIENT_ID, wrong));
    assert!(gate.seen().is_empty(), "no call without a token");
    // AND the tool result is an error naming the tool, the token endpoint and its answer
    let (content, is_error) = tool_result(&a, "wrong").await?;
    assert!(is_error, "{content}");
    for part in [
        TOOL,
        "OAuth token endpoint",
        "401",
        "invalid_client",
        CLIENT_ID,
    ] {
        assert!(content.contains(part), "{part}: {content}");
    }
    // AND the secret the endpoint echoed (in HTTP Basic) appears nowhere
    assert_nothing_leaks(
        &scn,
        &a,
        &[(&run.run_id, "wrong")],
        &[
            wrong.to_owned(),
            basic(CLIENT_ID, wrong)
                .trim_start_matches("Basic ")
                .to_owned(),
        ],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_url_outside_the_ssrf_allow_list_is_refused() -> anyhow::Result<()> {
    // GIVEN a working authorization server on a loopback port the allow list does not name
    // (the list admits the resource server's port only), and one at the metadata address
    let (tokens, token_url) = token_server(3600).await?;
    let (gate, url) = resource_server(tokens.clone()).await?;
    let scn = start(&[&url])?;
    let a = scn.a();
    define(&a, CLIENT_SECRET, agent("loopback", &url, &token_url)).await?;
    let metadata = "http://169.254.169.254/latest/api/token";
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(agent("metadata", &url, metadata)),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // WHEN runs of both call their tool
    turn(&a, "loopback", "ssrf-loopback").await?;
    turn(&a, "metadata", "ssrf-metadata").await?;

    // THEN both tool calls failed on the SSRF guard, and nothing was requested
    for (session, address) in [
        ("ssrf-loopback", "127.0.0.1"),
        ("ssrf-metadata", "169.254.169.254"),
    ] {
        let (content, is_error) = tool_result(&a, session).await?;
        assert!(is_error, "{content}");
        assert!(
            content.contains(TOOL)
                && content.contains("OAuth token endpoint")
                && content.contains(address)
                && content.contains("allow-listed"),
            "{content}"
        );
    }
    assert!(
        tokens.requests().is_empty(),
        "the token endpoint was never reached"
    );
    assert!(gate.seen().is_empty());
    Ok(())
}

/// A proxy in front of the MCP reference server (which checks no credentials): only the
/// authorization server's current token gets through; every `Authorization` is recorded.
async fn mcp_proxy(
    State((gate, upstream)): State<(Arc<Gate>, String)>,
    request: Request,
) -> Response {
    let auth = authorization(request.headers());
    if !gate.admits(&auth) {
        return invalid_token(&auth);
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut headers = parts.headers.clone();
    for name in [header::HOST, header::AUTHORIZATION, header::CONTENT_LENGTH] {
        headers.remove(name);
    }
    let sent = reqwest::Client::new()
        .request(parts.method, format!("{upstream}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let Ok(answer) = sent else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_gets_the_bearer_token_and_a_refused_one_is_refreshed() -> anyhow::Result<()>
{
    // GIVEN the reference MCP server behind a proxy that admits only the current token, and
    // an agent whose MCP server uses client credentials
    let everything = McpEverything::start().await.map_err(anyhow::Error::msg)?;
    let (tokens, token_url) = token_server(3600).await?;
    let gate = Gate::new(tokens.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy = format!("http://{}/mcp", listener.local_addr()?);
    let upstream = format!("http://127.0.0.1:{}", everything.port());
    let app = Router::new()
        .fallback(mcp_proxy)
        .with_state((gate.clone(), upstream));
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    let scn = start(&[&token_url, &proxy])?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "mcp echo", "hasToolResult": true},
               "response": {"content": "Echoed."}}),
        json!({"match": {"userMessage": "mcp echo", "hasToolResult": false},
               "response": {"content": "Echoing.", "toolCalls": [
                   {"id": "call_echo", "name": "everything__echo",
                    "arguments": {"message": "ping-through-proxy"}}]}}),
    ])?;
    let a = scn.a();
    define(
        &a,
        CLIENT_SECRET,
        json!({"agentId": "mcp-oauth", "tools": {"builtin": [], "mcpServers": [{
            "name": "everything", "url": proxy, "allowedTools": ["echo"],
            "auth": auth(&token_url)}]}}),
    )
    .await?;
    let echo_turn = |session: &'static str| {
        let a = a.clone();
        async move {
            let accepted = a
                .agent_with(
                    json!({"sessionKey": session, "agentId": "mcp-oauth", "message": "mcp echo"}),
                )
                .await?;
            let run = a.wait_done(&accepted.run_id, LONG).await?;
            assert_eq!(run.status, RunStatus::Ok, "{run:?}");
            let (_, view) = a
                .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
                .await?;
            assert!(
                view["warnings"].as_array().is_none_or(Vec::is_empty),
                "{view}"
            );
            let (content, is_error) = tool_result(&a, session).await?;
            assert!(
                !is_error && content.contains("ping-through-proxy"),
                "{content}"
            );
            anyhow::Ok(run)
        }
    };

    // WHEN a run calls the server's echo tool
    let first = echo_turn("mcp-1").await?;

    // THEN every request reached the server with the one token fetched
    assert_eq!(tokens.requests().len(), 1);
    let token = tokens.tokens()[0].clone();
    let seen = gate.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| *s == (format!("Bearer {token}"), true)),
        "{seen:?}"
    );

    // WHEN the proxy revokes that token, and another run calls the tool
    gate.revoke(&token);
    let before = gate.seen().len();
    let second = echo_turn("mcp-2").await?;

    // THEN the refused request was sent again once with a new token, which the rest used
    assert_eq!(tokens.requests().len(), 2, "one refresh");
    let fresh = tokens.tokens()[1].clone();
    let seen = gate.seen()[before..].to_vec();
    assert_eq!(
        seen.iter().filter(|s| !s.1).count(),
        1,
        "one 401, then the new token: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&(format!("Bearer {fresh}"), true)));
    assert_nothing_leaks(
        &scn,
        &a,
        &[(&first.run_id, "mcp-1"), (&second.run_id, "mcp-2")],
        &[CLIENT_SECRET.to_owned(), token, fresh],
    )
    .await?;
    Ok(())
}
