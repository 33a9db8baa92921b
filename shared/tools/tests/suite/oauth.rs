//! OAuth 2.0 client credentials for HTTP tools and MCP servers, against a loopback token
//! endpoint (axum) that counts its requests and hands out `tok-1`, `tok-2`, ..., and loopback
//! receivers that record the `Authorization` they got and refuse revoked tokens with a 401.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_tools::http_tool::{HttpTool, HttpToolConfig};
use agentlane_tools::mcp::{McpError, McpPool, McpServerConfig};
use agentlane_tools::oauth::{ClientCredentials, TokenCache, TokenError};
use agentlane_tools::ssrf::SsrfPolicy;
use agentlane_tools::{Tool, ToolContext, ToolError};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const CLIENT_ID: &str = "lookup-app";
const CLIENT_SECRET: &str = "cs-9f8e7d6c5b4a3210";
/// `Basic base64("lookup-app:cs-9f8e7d6c5b4a3210")`, as RFC 6749 §2.3.1 sends them.
const BASIC: &str = "Basic bG9va3VwLWFwcDpjcy05ZjhlN2Q2YzViNGEzMjEw";

fn ctx() -> ToolContext {
    ToolContext::new(CancellationToken::new(), "run-1", "call-1")
}

fn loopback() -> SsrfPolicy {
    SsrfPolicy {
        allow_hosts: vec!["127.0.0.1".into()],
        ..SsrfPolicy::default()
    }
}

/// A token request's form fields and its `Authorization`.
type TokenRequest = (Vec<(String, String)>, String);

/// The token endpoint: how it answers, and what it was asked.
#[derive(Default)]
struct Issuer {
    /// Token requests received.
    requests: AtomicUsize,
    /// `expires_in` of the tokens it issues (none when 0).
    expires_in: AtomicU64,
    /// How long it takes to answer (ms).
    delay_ms: AtomicU64,
    /// Refuses the client (401 `invalid_client`, echoing the credentials it got).
    refuse: AtomicBool,
    /// Form bodies of the requests, and their `Authorization`.
    forms: Mutex<Vec<TokenRequest>>,
}

async fn issue(State(issuer): State<Arc<Issuer>>, headers: HeaderMap, body: String) -> Response {
    let n = issuer.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let basic = header_of(&headers, header::AUTHORIZATION.as_str());
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    issuer.forms.lock().unwrap().push((form, basic.clone()));
    let delay = issuer.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if issuer.refuse.load(Ordering::SeqCst) || basic != BASIC {
        let body = json!({"error": "invalid_client",
            "error_description": format!("unknown client {basic} ({CLIENT_SECRET})")});
        return (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let mut token = json!({"access_token": format!("tok-{n}"), "token_type": "Bearer"});
    let expires_in = issuer.expires_in.load(Ordering::SeqCst);
    if expires_in > 0 {
        token["expires_in"] = json!(expires_in);
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        token.to_string(),
    )
        .into_response()
}

async fn start_issuer() -> (SocketAddr, Arc<Issuer>) {
    let issuer = Arc::new(Issuer {
        expires_in: AtomicU64::new(3600),
        ..Issuer::default()
    });
    let app = axum::Router::new()
        .route("/oauth/token", post(issue))
        .with_state(issuer.clone());
    (serve(app).await, issuer)
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn header_of(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// A resource server: records each request's `Authorization`, refuses revoked tokens (or every
/// request) with a 401 whose body echoes the token.
#[derive(Default)]
struct Receiver {
    seen: Mutex<Vec<String>>,
    revoked: Mutex<HashSet<String>>,
    refuse_all: AtomicBool,
}

impl Receiver {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn revoke(&self, token: &str) {
        self.revoked
            .lock()
            .unwrap()
            .insert(format!("Bearer {token}"));
    }

    /// The 401 for this request, if it is refused.
    fn check(&self, headers: &HeaderMap) -> Option<Response> {
        let auth = header_of(headers, "authorization");
        self.seen.lock().unwrap().push(auth.clone());
        let refused =
            self.refuse_all.load(Ordering::SeqCst) || self.revoked.lock().unwrap().contains(&auth);
        refused.then(|| {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")],
                format!("token rejected: {auth}"),
            )
                .into_response()
        })
    }
}

async fn tool_endpoint(State(receiver): State<Arc<Receiver>>, headers: HeaderMap) -> Response {
    match receiver.check(&headers) {
        Some(refused) => refused,
        None => (StatusCode::OK, "order 42 shipped").into_response(),
    }
}

async fn start_receiver() -> (SocketAddr, Arc<Receiver>) {
    let receiver = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .route("/lookup", post(tool_endpoint))
        .with_state(receiver.clone());
    (serve(app).await, receiver)
}

fn credentials(issuer: SocketAddr, scopes: &[&str]) -> ClientCredentials {
    ClientCredentials {
        tenant: "tenant-a".into(),
        token_url: format!("http://{issuer}/oauth/token"),
        client_id: CLIENT_ID.into(),
        client_secret: CLIENT_SECRET.into(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn http_tool(receiver: SocketAddr, auth: ClientCredentials, policy: SsrfPolicy) -> HttpTool {
    let config = HttpToolConfig {
        name: "lookup_order".into(),
        description: "Looks an order up".into(),
        parameters: json!({"type": "object"}),
        url: format!("http://{receiver}/lookup"),
        headers: vec![("X-Api-Key".into(), "key-0123456789abcdef".into())],
        timeout: Duration::from_secs(10),
        signing_secret: None,
        idempotent: false,
        auth: Some(auth),
    };
    HttpTool::new(config, policy).unwrap()
}

/// Every text a failure could show, for leak checks.
fn assert_no_secrets(text: &str, tokens: &[&str]) {
    assert!(!text.contains(CLIENT_SECRET), "client secret in {text:?}");
    assert!(!text.contains(&BASIC[6..]), "basic credential in {text:?}");
    for token in tokens {
        assert!(!text.contains(token), "token {token} in {text:?}");
    }
}

#[tokio::test]
async fn concurrent_calls_share_one_token_request_and_send_the_bearer_token() {
    let (issuer_addr, issuer) = start_issuer().await;
    issuer.delay_ms.store(200, Ordering::SeqCst);
    let (receiver_addr, receiver) = start_receiver().await;
    let tokens = TokenCache::new(loopback());
    let tool = http_tool(
        receiver_addr,
        credentials(issuer_addr, &["orders:read", "x"]),
        loopback(),
    )
    .with_token_cache(tokens.clone());

    let calls = (0..8).map(|_| {
        let tool = tool.clone();
        async move { tool.call("{}", ctx()).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap().content, "order 42 shipped");
    }
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 1);
    assert_eq!(receiver.seen(), vec!["Bearer tok-1".to_owned(); 8]);

    // The grant as RFC 6749 §4.4 asks: client credentials with HTTP Basic, the scopes
    // space-separated, no secret in the body.
    let (form, basic) = issuer.forms.lock().unwrap()[0].clone();
    assert_eq!(basic, BASIC);
    assert!(form.contains(&("grant_type".into(), "client_credentials".into())));
    assert!(form.contains(&("scope".into(), "orders:read x".into())));
    assert!(!form.iter().any(|(_, v)| v.contains(CLIENT_SECRET)));

    // Another tool of the same client (same cache) reuses the token too.
    let other = http_tool(
        receiver_addr,
        credentials(issuer_addr, &["x", "orders:read"]),
        loopback(),
    )
    .with_token_cache(tokens);
    other.call("{}", ctx()).await.unwrap();
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_token_is_reused_until_shortly_before_it_expires_then_fetched_again() {
    let (issuer_addr, issuer) = start_issuer().await;
    // 2 s tokens are reused for 1 s (half their life; longer ones until 30 s before expiry).
    issuer.expires_in.store(2, Ordering::SeqCst);
    let (receiver_addr, receiver) = start_receiver().await;
    let tool = http_tool(receiver_addr, credentials(issuer_addr, &[]), loopback());

    tool.call("{}", ctx()).await.unwrap();
    tool.call("{}", ctx()).await.unwrap();
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    tool.call("{}", ctx()).await.unwrap();
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 2);
    assert_eq!(
        receiver.seen(),
        ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2"]
    );
}

#[tokio::test]
async fn a_401_refreshes_the_token_once_and_the_call_is_sent_again() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (receiver_addr, receiver) = start_receiver().await;
    receiver.revoke("tok-1");
    let tool = http_tool(receiver_addr, credentials(issuer_addr, &[]), loopback());

    let out = tool.call("{}", ctx()).await.unwrap();
    assert_eq!(out.content, "order 42 shipped");
    assert_eq!(receiver.seen(), ["Bearer tok-1", "Bearer tok-2"]);
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 2);
    // The new token is kept.
    tool.call("{}", ctx()).await.unwrap();
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_second_401_fails_the_call_without_looping_or_showing_the_token() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (receiver_addr, receiver) = start_receiver().await;
    receiver.refuse_all.store(true, Ordering::SeqCst);
    let tool = http_tool(receiver_addr, credentials(issuer_addr, &[]), loopback());

    let err = tool.call("{}", ctx()).await.unwrap_err();
    let ToolError::Failed(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("401 Unauthorized"), "{text}");
    assert!(text.contains("token rejected: Bearer [redacted]"), "{text}");
    assert_no_secrets(text, &["tok-1", "tok-2"]);
    assert_eq!(receiver.seen().len(), 2);
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_client_is_a_failure_that_shows_neither_secret_nor_credentials() {
    let (issuer_addr, issuer) = start_issuer().await;
    issuer.refuse.store(true, Ordering::SeqCst);
    let (receiver_addr, receiver) = start_receiver().await;
    let tool = http_tool(receiver_addr, credentials(issuer_addr, &[]), loopback());

    let err = tool.call("{}", ctx()).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");
    assert!(text.contains("invalid_client"), "{text}");
    assert!(text.contains("401 Unauthorized"), "{text}");
    assert!(text.contains(CLIENT_ID), "{text}");
    assert_no_secrets(&text, &[]);
    assert!(
        receiver.seen().is_empty(),
        "the tool was called without a token"
    );
    assert!(!format!("{tool:?}").contains(CLIENT_SECRET));
}

#[tokio::test]
async fn the_token_endpoint_passes_the_same_ssrf_guard_as_the_tool() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (receiver_addr, receiver) = start_receiver().await;
    // Only the receiver's port is allowed: the token endpoint on another loopback port is not.
    let receiver_only = SsrfPolicy {
        allow_hosts: vec![format!("127.0.0.1:{}", receiver_addr.port())],
        ..SsrfPolicy::default()
    };
    let tool = http_tool(
        receiver_addr,
        credentials(issuer_addr, &[]),
        receiver_only.clone(),
    );
    let err = tool.call("{}", ctx()).await.unwrap_err();
    let ToolError::Blocked(why) = &err else {
        panic!("{err:?}")
    };
    assert!(why.contains("OAuth token endpoint"), "{why}");
    assert_no_secrets(why, &[]);
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 0);
    assert!(receiver.seen().is_empty());

    // A private address literal is refused before any connection.
    let private = ClientCredentials {
        token_url: "http://10.20.30.40/oauth/token".into(),
        ..credentials(issuer_addr, &[])
    };
    let err = TokenCache::new(receiver_only)
        .token(&private)
        .await
        .unwrap_err();
    assert!(matches!(err, TokenError::Blocked(_)), "{err:?}");

    // Allowed once the policy admits loopback.
    http_tool(receiver_addr, credentials(issuer_addr, &[]), loopback())
        .call("{}", ctx())
        .await
        .unwrap();
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tenants_and_rotated_secrets_never_share_a_token() {
    let (issuer_addr, issuer) = start_issuer().await;
    let cache = TokenCache::new(loopback());
    let a = credentials(issuer_addr, &[]);
    let b = ClientCredentials {
        tenant: "tenant-b".into(),
        ..a.clone()
    };
    assert_eq!(cache.token(&a).await.unwrap().secret(), "tok-1");
    assert_eq!(cache.token(&b).await.unwrap().secret(), "tok-2");
    assert_eq!(cache.token(&a).await.unwrap().secret(), "tok-1");
    // A rotated secret (the issuer refuses the old one from now on) gets its own token.
    issuer.refuse.store(true, Ordering::SeqCst);
    let rotated = ClientCredentials {
        client_secret: "cs-rotated-000000".into(),
        ..a.clone()
    };
    let err = cache.token(&rotated).await.unwrap_err();
    assert!(!err.to_string().contains("cs-rotated-000000"), "{err}");
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 3);
    // Invalidating a token another caller already replaced keeps the new one.
    issuer.refuse.store(false, Ordering::SeqCst);
    let stale = cache.token(&a).await.unwrap();
    cache.invalidate(&a, &stale);
    let fresh = cache.token(&a).await.unwrap();
    assert_eq!(fresh.secret(), "tok-4");
    cache.invalidate(&a, &stale);
    assert_eq!(cache.token(&a).await.unwrap().secret(), "tok-4");
}

#[test]
fn auth_cannot_be_combined_with_an_authorization_header() {
    let config = HttpToolConfig {
        name: "t".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
        url: "https://api.example/t".into(),
        headers: vec![("authorization".into(), "Bearer static".into())],
        timeout: Duration::from_secs(10),
        signing_secret: None,
        idempotent: false,
        auth: Some(credentials("127.0.0.1:1".parse().unwrap(), &[])),
    };
    let err = HttpTool::new(config.clone(), SsrfPolicy::default()).unwrap_err();
    assert_eq!(err.field, "auth", "{err}");
    let err = HttpTool::new(
        HttpToolConfig {
            headers: Vec::new(),
            auth: Some(ClientCredentials {
                token_url: "ftp://auth.example/t".into(),
                ..credentials("127.0.0.1:1".parse().unwrap(), &[])
            }),
            ..config
        },
        SsrfPolicy::default(),
    )
    .unwrap_err();
    assert_eq!(err.field, "auth", "{err}");

    let mut server = McpServerConfig::new("srv", "https://mcp.example/mcp");
    server.auth = Some(credentials("127.0.0.1:1".parse().unwrap(), &[]));
    assert_eq!(server.validate(), Ok(()));
    assert!(!format!("{server:?}").contains(CLIENT_SECRET));
    server.headers = vec![("Authorization".into(), "Bearer x".into())];
    assert!(server.validate().unwrap_err().contains("Authorization"));
}

// MCP: a minimal Streamable HTTP responder behind the same receiver.

fn rpc(id: &Value, result: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

async fn mcp_endpoint(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Some(refused) = receiver.check(&headers) {
        return refused;
    }
    let message: Value = serde_json::from_str(&body).unwrap();
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => {
            let mut response = rpc(
                &id,
                json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "guarded", "version": "1.0.0"}}),
            );
            response
                .headers_mut()
                .insert("mcp-session-id", "s-1".parse().unwrap());
            response
        }
        m if m.starts_with("notifications/") => StatusCode::ACCEPTED.into_response(),
        "tools/list" => rpc(
            &id,
            json!({"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]}),
        ),
        "tools/call" => rpc(
            &id,
            json!({"content": [{"type": "text", "text": "you are in"}]}),
        ),
        _ => rpc(&id, json!({})),
    }
}

async fn start_mcp() -> (SocketAddr, Arc<Receiver>) {
    let receiver = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(mcp_endpoint)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(receiver.clone());
    (serve(app).await, receiver)
}

fn mcp_config(server: SocketAddr, auth: ClientCredentials) -> McpServerConfig {
    let mut config = McpServerConfig::new("guarded", format!("http://{server}/mcp"));
    config.auth = Some(auth);
    config
}

#[tokio::test]
async fn mcp_requests_carry_the_bearer_token_and_a_401_refreshes_it_once() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (mcp_addr, server) = start_mcp().await;
    let pool = McpPool::new(loopback());
    let config = mcp_config(mcp_addr, credentials(issuer_addr, &["mcp"]));

    let tools = pool.tools(&config).await.unwrap();
    assert_eq!(tools.len(), 1);
    let seen = server.seen();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|a| a == "Bearer tok-1"), "{seen:?}");
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 1);

    // The server revokes the token mid-session: the call is refused once, sent again with a
    // new token, and answered.
    server.revoke("tok-1");
    let out = tools[0].call("{}", ctx()).await.unwrap();
    assert_eq!(out.content, "you are in");
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 2);
    let seen = server.seen();
    assert_eq!(seen[seen.len() - 2..], ["Bearer tok-1", "Bearer tok-2"]);

    // Refused whatever the token: the call fails after one refresh, without secrets.
    server.refuse_all.store(true, Ordering::SeqCst);
    let before = server.seen().len();
    let err = tools[0].call("{}", ctx()).await.unwrap_err();
    assert_eq!(server.seen().len() - before, 2, "one retry, no loop");
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 3);
    assert_no_secrets(&err.to_string(), &["tok-1", "tok-2", "tok-3"]);
}

#[tokio::test]
async fn mcp_sessions_are_not_shared_across_tenants_and_a_401_at_connect_is_retried() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (mcp_addr, server) = start_mcp().await;
    let pool = McpPool::new(loopback());
    server.revoke("tok-1");
    let a = mcp_config(mcp_addr, credentials(issuer_addr, &[]));
    // `initialize` with tok-1 is refused: refreshed once, the session opens with tok-2.
    assert_eq!(pool.tools(&a).await.unwrap().len(), 1);
    assert_eq!(server.seen()[..2], ["Bearer tok-1", "Bearer tok-2"]);

    let b = mcp_config(
        mcp_addr,
        ClientCredentials {
            tenant: "tenant-b".into(),
            ..credentials(issuer_addr, &[])
        },
    );
    let before = server.seen().len();
    assert_eq!(pool.tools(&b).await.unwrap().len(), 1);
    let seen = server.seen();
    assert!(
        seen[before..].iter().all(|a| a == "Bearer tok-3"),
        "{seen:?}"
    );
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_mcp_token_endpoint_refused_by_the_guard_or_the_issuer_is_reported() {
    let (issuer_addr, issuer) = start_issuer().await;
    let (mcp_addr, server) = start_mcp().await;
    let server_only = SsrfPolicy {
        allow_hosts: vec![format!("127.0.0.1:{}", mcp_addr.port())],
        ..SsrfPolicy::default()
    };
    let config = mcp_config(mcp_addr, credentials(issuer_addr, &[]));
    let err = McpPool::new(server_only)
        .tools(&config)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, McpError::Blocked { .. }), "{err:?}");
    assert_eq!(issuer.requests.load(Ordering::SeqCst), 0);
    assert!(server.seen().is_empty());

    issuer.refuse.store(true, Ordering::SeqCst);
    let err = McpPool::new(loopback()).tools(&config).await.err().unwrap();
    let McpError::Unavailable { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("invalid_client"), "{message}");
    assert_no_secrets(&err.to_string(), &[]);
    assert!(server.seen().is_empty());
}
