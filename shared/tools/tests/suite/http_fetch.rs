//! `http_fetch` against a loopback axum server: the SSRF guard, redirects, limits.

use agentlane_tools::http_fetch::{HttpFetch, HttpFetchConfig, Resolve};
use agentlane_tools::ssrf::SsrfPolicy;
use agentlane_tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Site {
    hits: Arc<AtomicUsize>,
    /// A Location to redirect `/elsewhere` to.
    elsewhere: String,
}

async fn hello(State(site): State<Site>) -> Response {
    site.hits.fetch_add(1, Ordering::SeqCst);
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "hello from loopback",
    )
        .into_response()
}

async fn host(State(site): State<Site>, headers: HeaderMap) -> String {
    site.hits.fetch_add(1, Ordering::SeqCst);
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())]).into_response()
}

async fn start() -> (SocketAddr, Arc<AtomicUsize>) {
    start_with(String::new()).await
}

async fn start_with(elsewhere: String) -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let site = Site {
        hits: hits.clone(),
        elsewhere,
    };
    let app = axum::Router::new()
        .route("/hello", get(hello))
        .route("/host", get(host))
        .route("/hop", get(|| async { redirect("/hello") }))
        .route("/loop", get(|| async { redirect("/loop") }))
        .route(
            "/elsewhere",
            get(|State(site): State<Site>| async move { redirect(&site.elsewhere) }),
        )
        .route("/big", get(|| async { "a".repeat(10_000) }))
        .route(
            "/image",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0u8, 1, 2, 3]) }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        .with_state(site);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hits)
}

fn ctx() -> ToolContext {
    ToolContext {
        cancel: CancellationToken::new(),
        run_id: "run-1".into(),
        tool_call_id: "call-1".into(),
    }
}

fn allowing(hosts: &[&str]) -> HttpFetchConfig {
    HttpFetchConfig {
        policy: SsrfPolicy {
            allow_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            max_redirects: 5,
        },
        ..HttpFetchConfig::default()
    }
}

async fn fetch(tool: &HttpFetch, args: serde_json::Value) -> Result<String, ToolError> {
    tool.call(&args.to_string(), ctx()).await.map(|o| o.content)
}

/// `http_fetch` of `url` with no other argument.
async fn fetch_url(tool: &HttpFetch, url: String) -> Result<String, ToolError> {
    fetch(tool, serde_json::json!({ "url": url })).await
}

#[tokio::test]
async fn loopback_is_denied_by_default_without_any_request() {
    let (addr, hits) = start().await;
    let err = fetch_url(&HttpFetch::default(), format!("http://{addr}/hello"))
        .await
        .unwrap_err();
    match err {
        ToolError::Blocked(why) => {
            assert!(why.contains("127.0.0.1 is a loopback address"), "{why}")
        }
        other => panic!("expected Blocked, got {other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // By name too.
    let err = fetch_url(
        &HttpFetch::default(),
        format!("http://localhost:{}/hello", addr.port()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ToolError::Blocked(why) if why.contains("\"localhost\"")),
        "{err:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn loopback_is_allowed_when_allow_listed() {
    let (addr, hits) = start().await;
    let tool = HttpFetch::new(allowing(&["127.0.0.1"]));
    let out = fetch_url(&tool, format!("http://{addr}/hello"))
        .await
        .unwrap();
    assert_eq!(
        out,
        format!(
            "URL: http://{addr}/hello\nStatus: 200 OK\nContent-Type: text/plain; charset=utf-8\n\nhello from loopback"
        )
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_are_followed_and_each_hop_is_checked() {
    let (addr, _) = start().await;
    let tool = HttpFetch::new(allowing(&["127.0.0.1"]));
    let out = fetch_url(&tool, format!("http://{addr}/hop"))
        .await
        .unwrap();
    assert!(
        out.starts_with(&format!("URL: http://{addr}/hello\nStatus: 200 OK")),
        "{out}"
    );

    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2:9/",
        "http://10.0.0.1/",
    ] {
        let (addr, hits) = start_with(target.to_owned()).await;
        let err = fetch_url(&tool, format!("http://{addr}/elsewhere"))
            .await
            .unwrap_err();
        match err {
            ToolError::Blocked(why) => assert!(
                why.starts_with(&format!("redirect to {target} refused:")),
                "{why}"
            ),
            other => panic!("expected Blocked, got {other:?}"),
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    let err = fetch_url(&tool, format!("http://{addr}/loop"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::Failed("too many redirects (more than 5)".into())
    );
}

#[tokio::test]
async fn body_is_cut_at_the_size_limit_with_a_marker() {
    let (addr, _) = start().await;
    let tool = HttpFetch::new(HttpFetchConfig {
        max_bytes: 4096,
        ..allowing(&["127.0.0.1"])
    });

    let out = fetch(
        &tool,
        serde_json::json!({"url": format!("http://{addr}/big"), "maxBytes": 1000}),
    )
    .await
    .unwrap();
    let body = out.split_once("\n\n").unwrap().1;
    assert_eq!(
        body,
        format!(
            "{}\n[truncated: the body is longer than 1000 bytes]",
            "a".repeat(1000)
        )
    );

    // The model cannot raise the configured cap.
    let out = fetch(
        &tool,
        serde_json::json!({"url": format!("http://{addr}/big"), "maxBytes": 1_000_000}),
    )
    .await
    .unwrap();
    let body = out.split_once("\n\n").unwrap().1;
    assert_eq!(
        body,
        format!(
            "{}\n[truncated: the body is longer than 4096 bytes]",
            "a".repeat(4096)
        )
    );

    let out = fetch_url(&tool, format!("http://{addr}/image"))
        .await
        .unwrap();
    assert!(
        out.ends_with("Content-Type: image/png\n\n[binary body omitted: 4 bytes read]"),
        "{out}"
    );
}

#[tokio::test]
async fn slow_server_hits_the_time_limit() {
    let (addr, _) = start().await;
    let tool = HttpFetch::new(HttpFetchConfig {
        timeout: Duration::from_millis(300),
        ..allowing(&["127.0.0.1"])
    });
    let started = Instant::now();
    let err = fetch_url(&tool, format!("http://{addr}/slow"))
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Timeout(300));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn cancellation_stops_the_fetch() {
    let (addr, _) = start().await;
    let tool = HttpFetch::new(allowing(&["127.0.0.1"]));
    let ctx = ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let args = serde_json::json!({"url": format!("http://{addr}/slow")}).to_string();
    assert_eq!(
        tool.call(&args, ctx).await.unwrap_err(),
        ToolError::Cancelled
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn metadata_address_and_bad_arguments_are_refused() {
    let tool = HttpFetch::default();
    let cases = [
        (
            serde_json::json!({"url": "http://169.254.169.254/latest/meta-data/"}),
            "blocked",
        ),
        (
            serde_json::json!({"url": "http://[fd00:ec2::254]/latest/meta-data/"}),
            "blocked",
        ),
        (
            serde_json::json!({"url": "http://metadata.google.internal/computeMetadata/v1/"}),
            "blocked",
        ),
        (serde_json::json!({"url": "file:///etc/passwd"}), "blocked"),
        (serde_json::json!({"url": "not a url"}), "invalid"),
        (serde_json::json!({"href": "http://example.com"}), "invalid"),
    ];
    for (args, want) in cases {
        let err = fetch(&tool, args.clone()).await.unwrap_err();
        let got = match err {
            ToolError::Blocked(_) => "blocked",
            ToolError::InvalidArguments(_) => "invalid",
            _ => "other",
        };
        assert_eq!(got, want, "{args}: {err:?}");
    }
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
async fn connects_only_to_the_checked_addresses_of_a_name() {
    let (addr, hits) = start().await;
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();

    // The name resolves (via the resolver, not DNS) to the allow-listed loopback: the request goes
    // there, with the original Host header.
    let tool = HttpFetch::with_resolver(
        allowing(&["127.0.0.1"]),
        Arc::new(FixedResolver(vec![loopback])),
    );
    let out = fetch_url(&tool, format!("http://pinned.test:{}/host", addr.port()))
        .await
        .unwrap();
    assert!(
        out.ends_with(&format!("\n\npinned.test:{}", addr.port())),
        "{out}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // One refused address among the answers refuses the name.
    let mixed = FixedResolver(vec![loopback, "10.0.0.1".parse().unwrap()]);
    let tool = HttpFetch::with_resolver(allowing(&["127.0.0.1"]), Arc::new(mixed));
    let err = fetch_url(&tool, format!("http://pinned.test:{}/host", addr.port()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Blocked(why) if why.contains("pinned.test resolves to 10.0.0.1")),
        "{err:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
