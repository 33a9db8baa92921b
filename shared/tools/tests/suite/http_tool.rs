//! HTTP tools against a loopback axum receiver: validation before sending, the signed request,
//! result limits, retries, time limits, cancellation, the SSRF guard and redaction.

use agentlane_tools::http_tool::{
    DefinitionError, HttpTool, HttpToolConfig, MAX_RESULT_BYTES, check_definition,
};
use agentlane_tools::net::Resolve;
use agentlane_tools::ssrf::SsrfPolicy;
use agentlane_tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "whsec_test_signing_secret";
const API_KEY: &str = "key-0123456789abcdef";

#[derive(Clone, Default)]
struct Receiver {
    /// Every request that reached the receiver, on any route.
    hits: Arc<AtomicUsize>,
    /// Requests to `/flaky`.
    flaky: Arc<AtomicUsize>,
}

impl Receiver {
    fn hit(&self) {
        self.hits.fetch_add(1, Ordering::SeqCst);
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Why the request is not what a signed call of run-1 / call-1 must be, if it is not.
fn check_request(headers: &HeaderMap, body: &[u8]) -> Result<serde_json::Value, String> {
    let signature = header(headers, "x-agentlane-signature");
    let (t, v1) = signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .ok_or_else(|| format!("bad signature header {signature:?}"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sent: u64 = t.parse().map_err(|_| format!("bad t {t:?}"))?;
    if now.abs_diff(sent) > 60 {
        return Err(format!("stale t {sent}, now {now}"));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = hex::decode(v1).map_err(|_| format!("v1 is not hex: {v1:?}"))?;
    mac.verify_slice(&expected)
        .map_err(|_| "signature does not verify".to_owned())?;
    for (name, want) in [
        ("x-agentlane-run", "run-1"),
        ("x-agentlane-tool-call", "call-1"),
        ("content-type", "application/json"),
        ("x-api-key", API_KEY),
    ] {
        if header(headers, name) != want {
            return Err(format!(
                "{name} is {:?}, want {want:?}",
                header(headers, name)
            ));
        }
    }
    serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))
}

async fn echo(State(rx): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    rx.hit();
    match check_request(&headers, &body) {
        Ok(args) => axum::Json(serde_json::json!({"order": args["orderId"], "status": "shipped"}))
            .into_response(),
        Err(why) => (StatusCode::UNAUTHORIZED, why).into_response(),
    }
}

/// Answers whether the request was signed.
async fn signed(State(rx): State<Receiver>, headers: HeaderMap) -> String {
    rx.hit();
    headers.contains_key("x-agentlane-signature").to_string()
}

/// 500 on the first request, 200 after.
async fn flaky(State(rx): State<Receiver>) -> Response {
    rx.hit();
    if rx.flaky.fetch_add(1, Ordering::SeqCst) == 0 {
        (StatusCode::INTERNAL_SERVER_ERROR, "try again").into_response()
    } else {
        "recovered".into_response()
    }
}

async fn boom(State(rx): State<Receiver>) -> Response {
    rx.hit();
    (StatusCode::INTERNAL_SERVER_ERROR, "x".repeat(10_000)).into_response()
}

async fn not_found(State(rx): State<Receiver>) -> Response {
    rx.hit();
    (StatusCode::NOT_FOUND, "no such order").into_response()
}

/// A 401 that quotes the credentials it got.
async fn leaky(State(rx): State<Receiver>, headers: HeaderMap) -> Response {
    rx.hit();
    let body = format!(
        "bad key {} for {}",
        header(&headers, "x-api-key"),
        header(&headers, "x-agentlane-signature")
    );
    (StatusCode::UNAUTHORIZED, body).into_response()
}

async fn big(State(rx): State<Receiver>) -> String {
    rx.hit();
    "a".repeat(1024 * 1024)
}

/// One ASCII byte, then 2-byte characters: the 256 KiB cut falls inside one.
async fn multibyte(State(rx): State<Receiver>) -> String {
    rx.hit();
    format!("a{}", "é".repeat(200_000))
}

/// A body that never ends.
async fn endless(State(rx): State<Receiver>) -> Response {
    rx.hit();
    let chunk = Bytes::from(vec![b'z'; 64 * 1024]);
    let stream = futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
    Body::from_stream(stream).into_response()
}

async fn hang(State(rx): State<Receiver>) -> &'static str {
    rx.hit();
    tokio::time::sleep(Duration::from_secs(30)).await;
    "late"
}

async fn moved(State(rx): State<Receiver>) -> Response {
    rx.hit();
    (StatusCode::FOUND, [(header::LOCATION, "/echo")]).into_response()
}

async fn empty(State(rx): State<Receiver>) -> StatusCode {
    rx.hit();
    StatusCode::NO_CONTENT
}

async fn host(State(rx): State<Receiver>, headers: HeaderMap) -> String {
    rx.hit();
    header(&headers, "host").to_owned()
}

async fn start() -> (SocketAddr, Receiver) {
    let rx = Receiver::default();
    let app = axum::Router::new()
        .route("/echo", post(echo))
        .route("/signed", post(signed))
        .route("/flaky", post(flaky))
        .route("/boom", post(boom))
        .route("/not-found", post(not_found))
        .route("/leaky", post(leaky))
        .route("/big", post(big))
        .route("/multibyte", post(multibyte))
        .route("/endless", post(endless))
        .route("/hang", post(hang))
        .route("/moved", post(moved))
        .route("/empty", post(empty))
        .route("/host", post(host))
        .with_state(rx.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

fn schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "orderId": {"type": "integer", "minimum": 1},
            "note": {"type": "string", "maxLength": 10},
        },
        "required": ["orderId"],
        "additionalProperties": false,
    })
}

fn config(url: String) -> HttpToolConfig {
    HttpToolConfig {
        name: "lookup_order".into(),
        description: "Looks an order up".into(),
        parameters: schema(),
        url,
        headers: vec![("X-Api-Key".into(), API_KEY.into())],
        timeout: Duration::from_secs(10),
        signing_secret: Some(SECRET.into()),
        idempotent: false,
        auth: None,
    }
}

fn loopback() -> SsrfPolicy {
    SsrfPolicy {
        allow_hosts: vec!["127.0.0.1".into()],
        ..SsrfPolicy::default()
    }
}

fn tool(config: HttpToolConfig) -> HttpTool {
    HttpTool::new(config, loopback()).unwrap()
}

fn ctx() -> ToolContext {
    ToolContext::new(CancellationToken::new(), "run-1", "call-1")
}

async fn call(tool: &HttpTool, args: &str) -> Result<String, ToolError> {
    tool.call(args, ctx()).await.map(|o| o.content)
}

const ARGS: &str = r#"{"orderId": 42, "note": "rush"}"#;

fn failed(err: ToolError) -> String {
    match err {
        ToolError::Failed(text) => text,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn signed_round_trip_returns_the_receivers_answer() {
    let (addr, rx) = start().await;
    let tool = tool(config(format!("http://{addr}/echo?tenant=t1")));
    let out = call(&tool, ARGS).await.unwrap();
    // The receiver verified signature, X-Agentlane headers, the configured header and the body.
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"order": 42, "status": "shipped"})
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
    assert_eq!(tool.spec().name, "lookup_order");
    assert_eq!(tool.spec().parameters, schema());
}

#[tokio::test]
async fn without_a_secret_nothing_is_signed_and_an_empty_answer_says_so() {
    let (addr, _) = start().await;
    let unsigned = tool(HttpToolConfig {
        signing_secret: None,
        ..config(format!("http://{addr}/signed"))
    });
    assert_eq!(call(&unsigned, ARGS).await.unwrap(), "false");
    let signed = tool(config(format!("http://{addr}/signed")));
    assert_eq!(call(&signed, ARGS).await.unwrap(), "true");

    let empty = tool(config(format!("http://{addr}/empty")));
    assert_eq!(
        call(&empty, ARGS).await.unwrap(),
        "[no content: 204 No Content]"
    );
}

#[tokio::test]
async fn arguments_violating_the_schema_are_never_sent() {
    let (addr, rx) = start().await;
    let tool = tool(config(format!("http://{addr}/echo")));
    let err = call(
        &tool,
        r#"{"orderId": "abc", "note": "far too long a note", "extra": 1}"#,
    )
    .await
    .unwrap_err();
    let ToolError::InvalidArguments(text) = err else {
        panic!("expected InvalidArguments, got {err:?}");
    };
    assert!(
        text.starts_with("the arguments of lookup_order do not match its parameters schema:\n"),
        "{text}"
    );
    assert!(
        text.contains("- /orderId: \"abc\" is not of type \"integer\""),
        "{text}"
    );
    assert!(text.contains("- /note: "), "{text}");
    assert!(text.contains("- /: ") && text.contains("extra"), "{text}");
    assert_eq!(text.lines().count(), 4, "{text}");

    let err = call(&tool, r#"{"note": "hi"}"#).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments(t) if t.contains("- /: \"orderId\" is a required property")),
        "{err:?}"
    );
    let err = call(&tool, "{not json").await.unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments(t) if t.starts_with("the arguments of lookup_order are not JSON")),
        "{err:?}"
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_idempotent_tool_retries_a_5xx() {
    let (addr, rx) = start().await;
    let tool = tool(HttpToolConfig {
        idempotent: true,
        ..config(format!("http://{addr}/flaky"))
    });
    let started = Instant::now();
    assert_eq!(call(&tool, ARGS).await.unwrap(), "recovered");
    let hits = rx.hits.load(Ordering::SeqCst);
    assert!((2..=3).contains(&hits), "{hits} requests");
    // After a backoff of 200 ms -20 % at least.
    assert!(started.elapsed() >= Duration::from_millis(160));
}

#[tokio::test]
async fn an_idempotent_tool_gives_up_after_two_retries() {
    let (addr, rx) = start().await;
    let tool = tool(HttpToolConfig {
        idempotent: true,
        ..config(format!("http://{addr}/boom"))
    });
    let text = failed(call(&tool, ARGS).await.unwrap_err());
    assert!(text.ends_with("\n[gave up after 3 attempts]"), "{text}");
    assert_eq!(rx.hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_5xx_is_not_retried_without_idempotent() {
    let (addr, rx) = start().await;
    let tool = tool(config(format!("http://{addr}/boom?secret-ish=1")));
    let text = failed(call(&tool, ARGS).await.unwrap_err());
    // The URL without its query, the status, and the first 2 KiB of the body.
    assert_eq!(
        text,
        format!(
            "HTTP tool lookup_order: http://{addr}/boom answered 500 Internal Server Error: {}",
            "x".repeat(2048)
        )
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_4xx_is_never_retried() {
    let (addr, rx) = start().await;
    let tool = tool(HttpToolConfig {
        idempotent: true,
        ..config(format!("http://{addr}/not-found"))
    });
    let text = failed(call(&tool, ARGS).await.unwrap_err());
    assert_eq!(
        text,
        format!(
            "HTTP tool lookup_order: http://{addr}/not-found answered 404 Not Found: no such order"
        )
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connect_errors_are_retried_only_when_idempotent() {
    // A port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/gone");

    let once = tool(config(url.clone()));
    let text = failed(call(&once, ARGS).await.unwrap_err());
    assert!(
        text.starts_with(&format!(
            "HTTP tool lookup_order: could not connect to {url}: "
        )),
        "{text}"
    );
    assert!(!text.contains("gave up"), "{text}");

    let retried = tool(HttpToolConfig {
        idempotent: true,
        ..config(url)
    });
    let started = Instant::now();
    let text = failed(call(&retried, ARGS).await.unwrap_err());
    assert!(text.ends_with("\n[gave up after 3 attempts]"), "{text}");
    // Two backoffs: 200 ms and 400 ms, each -20 % at least.
    assert!(started.elapsed() >= Duration::from_millis(480));
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (addr, rx) = start().await;
    let tool = tool(config(format!("http://{addr}/moved")));
    let text = failed(call(&tool, ARGS).await.unwrap_err());
    assert_eq!(
        text,
        format!("HTTP tool lookup_order: http://{addr}/moved answered 302 Found: ")
    );
    // /echo was never asked.
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_big_answer_is_cut_at_256_kib_with_a_marker() {
    let (addr, _) = start().await;
    let marker = format!("\n[truncated: response exceeded {MAX_RESULT_BYTES} bytes]");
    assert_eq!(MAX_RESULT_BYTES, 262_144);

    let out = call(&tool(config(format!("http://{addr}/big"))), ARGS)
        .await
        .unwrap();
    assert_eq!(out, format!("{}{marker}", "a".repeat(MAX_RESULT_BYTES)));

    // The cut falls inside a 2-byte character: it is dropped, not mangled.
    let out = call(&tool(config(format!("http://{addr}/multibyte"))), ARGS)
        .await
        .unwrap();
    let body = out.strip_suffix(&marker).unwrap();
    assert_eq!(body.len(), MAX_RESULT_BYTES - 1);
    assert!(body.ends_with('é') && !body.contains('\u{FFFD}'));

    // A body that never ends is read up to the cap, not buffered until the time limit.
    let started = Instant::now();
    let out = call(&tool(config(format!("http://{addr}/endless"))), ARGS)
        .await
        .unwrap();
    assert_eq!(out, format!("{}{marker}", "z".repeat(MAX_RESULT_BYTES)));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn loopback_is_refused_without_an_allow_list_before_any_request() {
    let (addr, rx) = start().await;
    let tool = HttpTool::new(config(format!("http://{addr}/echo")), SsrfPolicy::default()).unwrap();
    let err = call(&tool, ARGS).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::Blocked(why) if why.contains("127.0.0.1 is a loopback address")),
        "{err:?}"
    );
    let by_name = HttpTool::new(
        config(format!("http://localhost:{}/echo", addr.port())),
        SsrfPolicy::default(),
    )
    .unwrap();
    let err = call(&by_name, ARGS).await.unwrap_err();
    assert!(matches!(&err, ToolError::Blocked(_)), "{err:?}");
    assert_eq!(rx.hits.load(Ordering::SeqCst), 0);
}

/// Resolves every name to fixed addresses.
struct FixedResolver(Vec<std::net::IpAddr>);

#[async_trait]
impl Resolve for FixedResolver {
    async fn resolve(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(self.0.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }
}

#[tokio::test]
async fn a_name_is_checked_at_connect_time_and_pinned_to_its_checked_addresses() {
    let (addr, rx) = start().await;
    let url = format!("http://orders.test:{}/host", addr.port());
    let to_loopback = || Arc::new(FixedResolver(vec!["127.0.0.1".parse().unwrap()]));

    // A public-looking name that resolves to loopback is refused without the allow list.
    let tool =
        HttpTool::with_resolver(config(url.clone()), SsrfPolicy::default(), to_loopback()).unwrap();
    let err = call(&tool, ARGS).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::Blocked(why) if why.contains("orders.test resolves to 127.0.0.1")),
        "{err:?}"
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 0);

    // Allow-listed, the request goes to the resolved address with the original Host.
    let tool = HttpTool::with_resolver(config(url), loopback(), to_loopback()).unwrap();
    assert_eq!(
        call(&tool, ARGS).await.unwrap(),
        format!("orders.test:{}", addr.port())
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
}

/// Resolves to loopback until told to answer a private address instead.
#[derive(Default)]
struct Rebinding(std::sync::atomic::AtomicBool);

#[async_trait]
impl Resolve for Rebinding {
    async fn resolve(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let ip = if self.0.load(Ordering::SeqCst) {
            "10.0.0.1"
        } else {
            "127.0.0.1"
        };
        Ok(vec![SocketAddr::new(ip.parse().unwrap(), port)])
    }
}

#[tokio::test]
async fn every_call_checks_the_name_again_though_its_client_is_kept() {
    let (addr, rx) = start().await;
    let resolver = Arc::new(Rebinding::default());
    let tool = HttpTool::with_resolver(
        config(format!("http://orders.test:{}/host", addr.port())),
        loopback(),
        resolver.clone(),
    )
    .unwrap();
    for _ in 0..2 {
        call(&tool, ARGS).await.unwrap();
    }
    assert_eq!(rx.hits.load(Ordering::SeqCst), 2);

    // The name now resolves to a private address: refused, the kept client is not used.
    resolver.0.store(true, Ordering::SeqCst);
    let err = call(&tool, ARGS).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::Blocked(why) if why.contains("orders.test resolves to 10.0.0.1")),
        "{err:?}"
    );
    assert_eq!(rx.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_hanging_receiver_hits_the_time_limit_once() {
    let (addr, rx) = start().await;
    let tool = tool(HttpToolConfig {
        timeout: Duration::from_millis(300),
        // A timeout is not a connect error: not retried even so.
        idempotent: true,
        ..config(format!("http://{addr}/hang"))
    });
    let started = Instant::now();
    assert_eq!(
        call(&tool, ARGS).await.unwrap_err(),
        ToolError::Timeout(300)
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(rx.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn cancellation_stops_the_call_at_once() {
    let (addr, _) = start().await;
    let tool = tool(config(format!("http://{addr}/hang")));
    let ctx = ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    assert_eq!(
        tool.call(ARGS, ctx).await.unwrap_err(),
        ToolError::Cancelled
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // Cancelled during a retry's backoff too.
    let tool = always_failing_idempotent(addr);
    let during_backoff = self::ctx();
    let cancel = during_backoff.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    assert_eq!(
        tool.call(ARGS, during_backoff).await.unwrap_err(),
        ToolError::Cancelled
    );
    // The shortest backoff is 160 ms: ending before it shows the wait itself was cut (a
    // check between attempts only would end after it), with room for a loaded machine.
    assert!(started.elapsed() < Duration::from_millis(160));
}

/// An idempotent tool whose endpoint always answers 500: it waits about 200 ms before a retry.
fn always_failing_idempotent(addr: SocketAddr) -> HttpTool {
    tool(HttpToolConfig {
        idempotent: true,
        ..config(format!("http://{addr}/boom"))
    })
}

#[tokio::test]
async fn secrets_stay_out_of_debug_and_errors() {
    let (addr, _) = start().await;
    let config = config(format!("http://{addr}/leaky"));
    for debug in [format!("{config:?}"), format!("{:?}", tool(config.clone()))] {
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(!debug.contains(API_KEY), "{debug}");
        assert!(debug.contains("X-Api-Key"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
    }

    // The receiver quotes the key it got: the error does not.
    let text = failed(call(&tool(config), ARGS).await.unwrap_err());
    assert!(!text.contains(API_KEY), "{text}");
    assert!(
        text.contains("answered 401 Unauthorized: bad key [redacted] for t="),
        "{text}"
    );
}

#[test]
fn definitions_are_checked_field_by_field() {
    let schema = schema();
    let url = "https://orders.example/lookup";
    let long = "d".repeat(4097);
    let name65 = "n".repeat(65);
    type Case<'a> = (
        &'a str,
        &'a str,
        serde_json::Value,
        &'a str,
        Option<u64>,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("lookup_order", "Looks up", schema.clone(), url, None, None),
        (
            "a-B_9",
            "x",
            schema.clone(),
            "http://10.0.0.1:8080/",
            Some(300_000),
            None,
        ),
        (&name65[..64], "x", schema.clone(), url, Some(1), None),
        ("", "x", schema.clone(), url, None, Some("name")),
        (&name65, "x", schema.clone(), url, None, Some("name")),
        ("has space", "x", schema.clone(), url, None, Some("name")),
        ("dot.ted", "x", schema.clone(), url, None, Some("name")),
        ("émoji", "x", schema.clone(), url, None, Some("name")),
        ("t", "", schema.clone(), url, None, Some("description")),
        ("t", "  \n", schema.clone(), url, None, Some("description")),
        ("t", &long, schema.clone(), url, None, Some("description")),
        ("t", &long[..4096], schema.clone(), url, None, None),
        (
            "t",
            "x",
            serde_json::json!("object"),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"type": "string"}),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"properties": {}}),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"type": "object", "properties": {"a": {"type": "nope"}}}),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"type": "object", "required": "a"}),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
            url,
            None,
            Some("parameters"),
        ),
        (
            "t",
            "x",
            serde_json::json!({"type": "object", "properties": {"a": {"$ref": "https://schemas.example/a.json"}}}),
            url,
            None,
            Some("parameters"),
        ),
        ("t", "x", schema.clone(), "not a url", None, Some("url")),
        (
            "t",
            "x",
            schema.clone(),
            "/relative/path",
            None,
            Some("url"),
        ),
        (
            "t",
            "x",
            schema.clone(),
            "ftp://orders.example/",
            None,
            Some("url"),
        ),
        (
            "t",
            "x",
            schema.clone(),
            "file:///etc/passwd",
            None,
            Some("url"),
        ),
        (
            "t",
            "x",
            schema.clone(),
            "http://user:pw@orders.example/",
            None,
            Some("url"),
        ),
        ("t", "x", schema.clone(), url, Some(0), Some("timeoutMs")),
        (
            "t",
            "x",
            schema.clone(),
            url,
            Some(300_001),
            Some("timeoutMs"),
        ),
    ];
    for (name, description, parameters, url, timeout_ms, want) in cases {
        let got = check_definition(name, description, &parameters, url, timeout_ms);
        assert_eq!(
            got.as_ref().err().map(|e| e.field),
            want,
            "{name:?} {parameters} {url:?} {timeout_ms:?}: {got:?}"
        );
        if let Err(DefinitionError { message, .. }) = got {
            assert!(!message.is_empty());
        }
    }
}

#[test]
fn the_tool_refuses_bad_headers_secrets_and_timeouts() {
    let base = config("https://orders.example/lookup".into());
    let cases: Vec<(HttpToolConfig, &str)> = vec![
        (
            HttpToolConfig {
                headers: vec![("bad name".into(), "v".into())],
                ..base.clone()
            },
            "headers",
        ),
        (
            HttpToolConfig {
                headers: vec![("X-Agentlane-Run".into(), "spoofed".into())],
                ..base.clone()
            },
            "headers",
        ),
        (
            HttpToolConfig {
                headers: vec![("Content-Type".into(), "text/plain".into())],
                ..base.clone()
            },
            "headers",
        ),
        (
            HttpToolConfig {
                headers: vec![("X-Key".into(), "line\nbreak-secret".into())],
                ..base.clone()
            },
            "headers",
        ),
        (
            HttpToolConfig {
                signing_secret: Some(String::new()),
                ..base.clone()
            },
            "signingSecret",
        ),
        (
            HttpToolConfig {
                timeout: Duration::from_secs(301),
                ..base.clone()
            },
            "timeoutMs",
        ),
        (
            HttpToolConfig {
                name: "bad name".into(),
                ..base.clone()
            },
            "name",
        ),
    ];
    for (config, field) in cases {
        let err = HttpTool::new(config, SsrfPolicy::default()).unwrap_err();
        assert_eq!(err.field, field, "{err}");
        assert!(!err.message.contains("break-secret"), "{err}");
    }
    assert!(HttpTool::new(base, SsrfPolicy::default()).is_ok());
}

/// `cargo test -p agentlane-tools --release --test suite -- --ignored --nocapture signed_round_trip_timing`
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn signed_round_trip_timing() {
    let (addr, _) = start().await;
    let tool = tool(config(format!("http://{addr}/echo")));
    for _ in 0..10 {
        call(&tool, ARGS).await.unwrap();
    }
    let mut times: Vec<Duration> = Vec::with_capacity(100);
    for _ in 0..100 {
        let started = Instant::now();
        call(&tool, ARGS).await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "signed round trip on loopback, 100 calls: median {:?}, p90 {:?}, max {:?}",
        times[50], times[90], times[99]
    );
}
