//! MCP servers as tool sources: against the real reference server (`tools/mcp-everything`) and
//! against a scripted Streamable HTTP JSON-RPC responder that hangs, fails, returns images,
//! expires its session, counts `tools/list` and records what the client sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_tools::http_fetch::Resolve;
use agentlane_tools::mcp::{McpError, McpPool, McpServerConfig};
use agentlane_tools::ssrf::SsrfPolicy;
use agentlane_tools::testing::McpEverything;
use agentlane_tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "Bearer sk-live-0123456789abcdef";
const PROTOCOL: &str = "2025-06-18";

fn ctx() -> ToolContext {
    ToolContext::new(CancellationToken::new(), "run-1", "call-1")
}

fn loopback_policy() -> SsrfPolicy {
    SsrfPolicy {
        allow_hosts: vec!["127.0.0.1".into()],
        ..SsrfPolicy::default()
    }
}

fn find(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.spec().name == name)
        .cloned()
        .unwrap_or_else(|| {
            let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
            panic!("no tool {name} in {names:?}")
        })
}

// --- the real reference server ---------------------------------------------------------------

#[tokio::test]
async fn everything_lists_and_calls_echo_and_get_sum() {
    // Fails (does not skip) when node or the package is missing, saying how to install it.
    let server = McpEverything::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pool = McpPool::new(server.ssrf_policy());
    let config = server.config("everything");

    let started = Instant::now();
    let tools = pool.tools(&config).await.unwrap();
    let first_list = started.elapsed();
    let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
    assert!(names.contains(&"everything__echo".to_owned()), "{names:?}");
    assert!(
        names.contains(&"everything__get-sum".to_owned()),
        "{names:?}"
    );
    assert!(names.iter().all(|n| n.starts_with("everything__")));
    let echo = find(&tools, "everything__echo");
    let schema = echo.spec().parameters;
    assert_eq!(schema["type"], "object", "{schema}");
    assert!(schema["properties"]["message"].is_object(), "{schema}");

    let started = Instant::now();
    let out = echo
        .call(r#"{"message":"hello mcp"}"#, ctx())
        .await
        .unwrap();
    let first_call = started.elapsed();
    assert_eq!(out.content, "Echo: hello mcp");

    let sum = find(&tools, "everything__get-sum");
    let started = Instant::now();
    let out = sum.call(r#"{"a": 2, "b": 40}"#, ctx()).await.unwrap();
    let second_call = started.elapsed();
    assert!(out.content.contains("42"), "{}", out.content);

    // Wrong arguments come back as a tool error, not a panic or a transport failure.
    let err = sum.call(r#"{"a": "x"}"#, ctx()).await.unwrap_err();
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");

    // allowed_tools filters by the server-side name.
    let mut only_echo = config.clone();
    only_echo.allowed_tools = Some(vec!["echo".into()]);
    let tools = pool.tools(&only_echo).await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
    assert_eq!(names, ["everything__echo"]);

    // tools/list alone, on a live session: a pool without a cache, warmed up once.
    let fresh = pool.clone().with_tools_ttl(Duration::ZERO);
    fresh.tools(&config).await.unwrap();
    let started = Instant::now();
    fresh.tools(&config).await.unwrap();
    let warm_list = started.elapsed();
    eprintln!(
        "server-everything on loopback: connect+initialize+tools/list {first_list:?}, \
         tools/list on a live session {warm_list:?}, first tools/call (echo) {first_call:?}, \
         tools/call (get-sum) {second_call:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn everything_long_running_operation_is_cancelled_by_the_run() {
    let server = McpEverything::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pool = McpPool::new(server.ssrf_policy());
    let tools = pool.tools(&server.config("everything")).await.unwrap();
    let long = find(&tools, "everything__trigger-long-running-operation");
    let cx = ctx();
    let cancel = cx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let err = long
        .call(r#"{"duration": 10, "steps": 5}"#, cx)
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(3));
    // The session is still usable afterwards.
    let echo = find(&tools, "everything__echo");
    let out = echo
        .call(r#"{"message":"still here"}"#, ctx())
        .await
        .unwrap();
    assert_eq!(out.content, "Echo: still here");
}

#[tokio::test]
async fn a_missing_reference_server_fails_with_the_install_command() {
    let root = std::env::temp_dir().join("agentlane-no-such-checkout");
    let err = McpEverything::start_in(&root).await.unwrap_err();
    assert!(
        err.contains("npm ci --prefix tools/mcp-everything"),
        "{err}"
    );
}

// --- a scripted server -----------------------------------------------------------------------

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    session: Option<String>,
    protocol: Option<String>,
    authorization: Option<String>,
}

#[derive(Default)]
struct Script {
    initializes: AtomicUsize,
    lists: AtomicUsize,
    calls: AtomicUsize,
    next_session: AtomicUsize,
    /// Sessions the server still knows; a request with another one gets 404.
    sessions: Mutex<Vec<String>>,
    /// The next `tools/call` forgets its session and answers 404.
    expire_next_call: AtomicBool,
    /// Every `tools/call` does.
    expire_every_call: AtomicBool,
    seen: Mutex<Vec<Seen>>,
    /// The protocol version the client proposed in `initialize`.
    proposed: Mutex<Option<String>>,
    /// Params of every `notifications/cancelled`.
    cancelled: Mutex<Vec<Value>>,
    /// The JSON-RPC id of the last `tools/call`.
    last_call_id: Mutex<Option<Value>>,
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn json_response(id: &Value, result: Value) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

fn json_error(id: &Value, code: i64, message: &str) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
        .into_response()
}

fn tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("the {name} tool"),
        "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}},
    })
}

async fn call(script: &Script, id: &Value, params: &Value, headers: &HeaderMap) -> Response {
    script.calls.fetch_add(1, Ordering::SeqCst);
    *script.last_call_id.lock().unwrap() = Some(id.clone());
    match params["name"].as_str().unwrap_or_default() {
        "hang" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            json_response(id, json!({"content": [{"type": "text", "text": "late"}]}))
        }
        "fail" => json_response(
            id,
            json!({"content": [{"type": "text", "text": "the widget broke"}], "isError": true}),
        ),
        "media" => json_response(
            id,
            json!({
                "content": [
                    {"type": "text", "text": "here is the chart"},
                    // 1234 bytes of base64 ("AAAA" = 3 bytes; 411 * 3 + 1 = 1234).
                    {"type": "image", "mimeType": "image/png", "data": format!("{}AA==", "AAAA".repeat(411))},
                    {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
                ],
                "structuredContent": {"width": 640, "height": 480},
            }),
        ),
        // A server that echoes the credential back in its error.
        "leak" => {
            let auth = header(headers, "authorization").unwrap_or_default();
            json_error(id, -32000, &format!("token {auth} is not valid"))
        }
        _ => json_response(
            id,
            json!({"content": [{"type": "text", "text": format!("ok {}", params["arguments"])}]}),
        ),
    }
}

async fn mcp(State(script): State<Arc<Script>>, headers: HeaderMap, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap();
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let session = header(&headers, "mcp-session-id");
    script.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        session: session.clone(),
        protocol: header(&headers, "mcp-protocol-version"),
        authorization: header(&headers, "authorization"),
    });
    if let Some(session) = &session {
        let known = script.sessions.lock().unwrap().contains(session);
        let expire = method == "tools/call"
            && (script.expire_every_call.load(Ordering::SeqCst)
                || script.expire_next_call.swap(false, Ordering::SeqCst));
        if !known || expire {
            script.sessions.lock().unwrap().retain(|s| s != session);
            return (StatusCode::NOT_FOUND, "session not found").into_response();
        }
    }
    match method.as_str() {
        "initialize" => {
            script.initializes.fetch_add(1, Ordering::SeqCst);
            *script.proposed.lock().unwrap() = message["params"]["protocolVersion"]
                .as_str()
                .map(str::to_owned);
            let n = script.next_session.fetch_add(1, Ordering::SeqCst);
            let session = format!("session-{n}");
            script.sessions.lock().unwrap().push(session.clone());
            let mut response = json_response(
                &id,
                json!({
                    "protocolVersion": PROTOCOL,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "scripted", "version": "1.0.0"},
                }),
            );
            response
                .headers_mut()
                .insert("mcp-session-id", session.parse().unwrap());
            response
        }
        "notifications/cancelled" => {
            script
                .cancelled
                .lock()
                .unwrap()
                .push(message["params"].clone());
            StatusCode::ACCEPTED.into_response()
        }
        m if m.starts_with("notifications/") => StatusCode::ACCEPTED.into_response(),
        "ping" => json_response(&id, json!({})),
        "tools/list" => {
            script.lists.fetch_add(1, Ordering::SeqCst);
            let long = "t".repeat(70);
            json_response(
                &id,
                json!({"tools": [
                    tool("hang"), tool("fail"), tool("media"), tool("ok"), tool("leak"),
                    tool("bad.name"), tool(&long),
                ]}),
            )
        }
        "tools/call" => call(&script, &id, &message["params"], &headers).await,
        _ => json_error(&id, -32601, "method not found"),
    }
}

async fn start_script() -> (SocketAddr, Arc<Script>) {
    let script = Arc::new(Script::default());
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, script)
}

fn scripted(addr: SocketAddr) -> McpServerConfig {
    let mut config = McpServerConfig::new("scripted", format!("http://{addr}/mcp"));
    config.headers = vec![("Authorization".into(), SECRET.into())];
    config
}

/// Waits until `check` holds (the server sees notifications a little after the client moves on).
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn session_id_protocol_version_and_headers_are_sent_back() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let out = find(&tools, "scripted__ok")
        .call(r#"{"x": 1}"#, ctx())
        .await
        .unwrap();
    assert_eq!(out.content, r#"ok {"x":1}"#);

    // rmcp proposed its version; the server chose an older one, which later requests carry.
    let proposed = script.proposed.lock().unwrap().clone().unwrap();
    assert!(proposed.as_str() >= PROTOCOL, "{proposed}");
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen[0].method, "initialize");
    assert_eq!(seen[0].session, None);
    let later: Vec<&Seen> = seen.iter().skip(1).collect();
    assert!(later.iter().any(|s| s.method == "tools/list"));
    assert!(later.iter().any(|s| s.method == "tools/call"));
    for s in &later {
        assert_eq!(s.session.as_deref(), Some("session-0"), "{s:?}");
        assert_eq!(s.protocol.as_deref(), Some(PROTOCOL), "{s:?}");
    }
    for s in &seen {
        assert_eq!(s.authorization.as_deref(), Some(SECRET), "{s:?}");
    }
}

#[tokio::test]
async fn timeout_cancels_the_call_and_notifies_the_server() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let mut config = scripted(addr);
    config.timeout = Duration::from_millis(400);
    let tools = pool.tools(&config).await.unwrap();
    let started = Instant::now();
    let err = find(&tools, "scripted__hang")
        .call("{}", ctx())
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Timeout(400));
    assert!(started.elapsed() < Duration::from_secs(2));
    eventually("notifications/cancelled", || {
        !script.cancelled.lock().unwrap().is_empty()
    })
    .await;
    let cancelled = script.cancelled.lock().unwrap()[0].clone();
    let call_id = script.last_call_id.lock().unwrap().clone().unwrap();
    assert_eq!(cancelled["requestId"], call_id, "{cancelled}");
}

#[tokio::test]
async fn run_cancel_cancels_the_call_and_notifies_the_server() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let cx = ctx();
    let cancel = cx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let err = find(&tools, "scripted__hang")
        .call("{}", cx)
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Cancelled);
    eventually("notifications/cancelled", || {
        !script.cancelled.lock().unwrap().is_empty()
    })
    .await;
    let cancelled = script.cancelled.lock().unwrap()[0].clone();
    let call_id = script.last_call_id.lock().unwrap().clone().unwrap();
    assert_eq!(cancelled["requestId"], call_id, "{cancelled}");
    // The session survives for the next call.
    let out = find(&tools, "scripted__ok")
        .call("{}", ctx())
        .await
        .unwrap();
    assert!(out.content.starts_with("ok"), "{}", out.content);
    assert_eq!(script.initializes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn is_error_result_is_a_tool_failure() {
    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let err = find(&tools, "scripted__fail")
        .call("{}", ctx())
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Failed("the widget broke".into()));
}

#[tokio::test]
async fn images_audio_and_structured_content_become_text() {
    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let out = find(&tools, "scripted__media")
        .call("{}", ctx())
        .await
        .unwrap();
    assert_eq!(
        out.content,
        "here is the chart\n[image: image/png, 1234 bytes omitted]\n\
         [audio: audio/wav, 3 bytes omitted]\n{\"height\":480,\"width\":640}"
    );
}

#[tokio::test]
async fn expired_session_is_reinitialized_once_and_the_call_retried() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let ok = find(&tools, "scripted__ok");

    script.expire_next_call.store(true, Ordering::SeqCst);
    let out = ok.call(r#"{"x": 7}"#, ctx()).await.unwrap();
    assert_eq!(out.content, r#"ok {"x":7}"#);
    assert_eq!(script.initializes.load(Ordering::SeqCst), 2);
    assert_eq!(
        script.calls.load(Ordering::SeqCst),
        1,
        "the 404 was not a call"
    );
    let seen = script.seen.lock().unwrap().clone();
    let calls: Vec<Option<String>> = seen
        .iter()
        .filter(|s| s.method == "tools/call")
        .map(|s| s.session.clone())
        .collect();
    assert_eq!(
        calls,
        [Some("session-0".to_owned()), Some("session-1".to_owned())]
    );

    // A session that keeps expiring is re-initialized once per call, not in a loop.
    script.expire_every_call.store(true, Ordering::SeqCst);
    let err = ok.call("{}", ctx()).await.unwrap_err();
    let ToolError::Failed(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("scripted"), "{message}");
    assert!(message.to_lowercase().contains("session"), "{message}");
    assert_eq!(script.initializes.load(Ordering::SeqCst), 3);
}

/// Resolves every name to one address (a DNS answer the attacker controls).
struct FixedResolver(std::net::IpAddr);

#[async_trait]
impl Resolve for FixedResolver {
    async fn resolve(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new(self.0, port)])
    }
}

#[tokio::test]
async fn loopback_url_is_refused_without_allow_list() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(SsrfPolicy::default());
    for url in [
        format!("http://{addr}/mcp"),
        format!("http://localhost:{}/mcp", addr.port()),
        "http://169.254.169.254/mcp".to_owned(),
    ] {
        let config = McpServerConfig::new("scripted", url.clone());
        let err = pool.tools(&config).await.err().unwrap();
        assert!(matches!(err, McpError::Blocked { .. }), "{url}: {err:?}");
        assert!(
            matches!(ToolError::from(err), ToolError::Blocked(_)),
            "{url}"
        );
    }
    assert!(script.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_at_connect() {
    let (addr, script) = start_script().await;
    let url = format!("http://mcp.innocent.example:{}/mcp", addr.port());
    let config = McpServerConfig::new("scripted", url);
    let resolver = Arc::new(FixedResolver(addr.ip()));

    // The URL passes the string check; the address it resolves to does not.
    let pool = McpPool::with_resolver(SsrfPolicy::default(), resolver.clone());
    let err = pool.tools(&config).await.err().unwrap();
    let McpError::Blocked { reason, .. } = &err else {
        panic!("{err:?}")
    };
    eprintln!("refused: {err}");
    assert!(reason.contains("127.0.0.1"), "{reason}");
    assert!(reason.contains("loopback"), "{reason}");
    assert!(script.seen.lock().unwrap().is_empty());

    // Allow-listing the address admits it.
    let pool = McpPool::with_resolver(loopback_policy(), resolver);
    let tools = pool.tools(&config).await.unwrap();
    assert!(!tools.is_empty());
}

#[tokio::test]
async fn an_allow_list_entry_with_a_port_admits_a_named_server_as_it_does_an_http_tool() {
    // GIVEN a server on a loopback port, reached by a host name that resolves there
    let (addr, _script) = start_script().await;
    let url = format!("http://mcp.internal.example:{}/mcp", addr.port());
    let config = McpServerConfig::new("scripted", url);
    let resolver = Arc::new(FixedResolver(addr.ip()));
    let policy = |entry: String| SsrfPolicy {
        allow_hosts: vec![entry],
        ..SsrfPolicy::default()
    };

    // WHEN the allow-list names the host on that port THEN the server is reached
    let pool = McpPool::with_resolver(
        policy(format!("mcp.internal.example:{}", addr.port())),
        resolver.clone(),
    );
    let tools = pool.tools(&config).await.unwrap();
    assert!(!tools.is_empty());

    // AND an entry for another port does not admit it
    let other = if addr.port() == 1 { 2 } else { addr.port() - 1 };
    let pool = McpPool::with_resolver(policy(format!("mcp.internal.example:{other}")), resolver);
    let err = pool.tools(&config).await.err().unwrap();
    assert!(matches!(err, McpError::Blocked { .. }), "{err:?}");
}

#[tokio::test]
async fn tools_list_is_cached_and_the_session_reused() {
    let (addr, script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let config = scripted(addr);
    let first = pool.tools(&config).await.unwrap();
    // Another handle of the same pool (another run), another name and filter: same cache.
    let mut other = config.clone();
    other.name = "again".into();
    other.allowed_tools = Some(vec!["ok".into()]);
    let second = pool.clone().tools(&other).await.unwrap();
    assert_eq!(script.lists.load(Ordering::SeqCst), 1);
    assert_eq!(script.initializes.load(Ordering::SeqCst), 1);
    assert_eq!(first.len(), 5);
    let names: Vec<String> = second.iter().map(|t| t.spec().name).collect();
    assert_eq!(names, ["again__ok"]);

    // Other header values are another client: its own session and list.
    let mut other_key = config.clone();
    other_key.headers = vec![("Authorization".into(), "Bearer another-token-42".into())];
    pool.tools(&other_key).await.unwrap();
    assert_eq!(script.lists.load(Ordering::SeqCst), 2);
    assert_eq!(script.initializes.load(Ordering::SeqCst), 2);

    // Once the cache is stale the list is asked again, on the same session.
    let stale = McpPool::new(loopback_policy()).with_tools_ttl(Duration::ZERO);
    let before = script.initializes.load(Ordering::SeqCst);
    stale.tools(&config).await.unwrap();
    stale.tools(&config).await.unwrap();
    assert_eq!(script.lists.load(Ordering::SeqCst), 4);
    assert_eq!(script.initializes.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn names_that_do_not_fit_are_skipped_with_a_warning_and_schemas_kept() {
    let Some(logs) =
        logged_alone("mcp::names_that_do_not_fit_are_skipped_with_a_warning_and_schemas_kept")
    else {
        return;
    };
    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "scripted__fail",
            "scripted__hang",
            "scripted__leak",
            "scripted__media",
            "scripted__ok"
        ]
    );
    let warnings: Vec<String> = logs
        .text()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("MCP tool skipped"))
        .map(str::to_owned)
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(warnings[0].contains("bad.name"), "{warnings:#?}");
    let spec = find(&tools, "scripted__ok").spec();
    assert_eq!(spec.description, "the ok tool");
    assert_eq!(
        spec.parameters,
        json!({"type": "object", "properties": {"x": {"type": "integer"}}})
    );
}

#[tokio::test]
async fn bad_arguments_and_bad_config_are_clear_errors() {
    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let err = find(&tools, "scripted__ok")
        .call("[1, 2]", ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");

    let mut bad = scripted(addr);
    bad.name = "a__b".into();
    assert!(matches!(
        pool.tools(&bad).await,
        Err(McpError::InvalidConfig(_))
    ));
    let mut bad = scripted(addr);
    bad.timeout = Duration::from_secs(301);
    assert!(matches!(
        pool.tools(&bad).await,
        Err(McpError::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn a_credential_echoed_by_the_server_is_redacted_from_errors() {
    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let tools = pool.tools(&scripted(addr)).await.unwrap();
    let err = find(&tools, "scripted__leak")
        .call("{}", ctx())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::Failed(
            "MCP server \"scripted\": tools/call leak failed: error -32000: token [redacted] is \
             not valid"
                .into()
        )
    );
}

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Set in the child process a log test runs alone in.
const ALONE: &str = "AGENTLANE_TEST_LOGGED_ALONE";

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// What `test` logs, at every level. Logging is process-wide state (tracing caches which
/// callsites are enabled globally, and other tests hit the same callsites concurrently), so the
/// test runs again alone in a child process with a global subscriber: there this returns the
/// capture; here it checks the child passed and returns `None`.
fn logged_alone(test: &str) -> Option<Captured> {
    if std::env::var_os(ALONE).is_some() {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        return Some(logs);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed when run alone:\n{stdout}\n{stderr}"
    );
    None
}

#[tokio::test]
async fn header_values_never_appear_in_errors_debug_or_logs() {
    let Some(logs) = logged_alone("mcp::header_values_never_appear_in_errors_debug_or_logs") else {
        return;
    };
    let token = SECRET.split_once(' ').unwrap().1;

    let (addr, _script) = start_script().await;
    let pool = McpPool::new(loopback_policy());
    let config = scripted(addr);
    let tools = pool.tools(&config).await.unwrap();

    // A call that runs normally, so every layer logs something.
    find(&tools, "scripted__ok")
        .call("{}", ctx())
        .await
        .unwrap();

    // A transport failure (nothing listens any more) and a refused address.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut gone = config.clone();
    gone.url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let err = pool.tools(&gone).await.err().unwrap();
    assert!(matches!(err, McpError::Unavailable { .. }), "{err:?}");
    eprintln!("unreachable: {err}");
    let mut blocked = config.clone();
    blocked.url = "http://10.0.0.1/mcp".into();
    let blocked_err = McpPool::new(SsrfPolicy::default())
        .tools(&blocked)
        .await
        .err()
        .unwrap();

    let debug = format!("{config:?} {pool:?} {err:?} {blocked_err:?}");
    for shown in [err.to_string(), blocked_err.to_string(), debug] {
        assert!(!shown.contains(token), "{shown}");
    }
    let logs = logs.text();
    assert!(logs.contains("MCP tool called"), "nothing was logged");
    let leaked: Vec<&str> = logs.lines().filter(|l| l.contains(token)).collect();
    assert!(leaked.is_empty(), "a header value was logged: {leaked:#?}");
}
