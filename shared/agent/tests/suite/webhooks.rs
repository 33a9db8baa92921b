//! Webhook hooks against an in-process HTTP server on 127.0.0.1: the documented request, answers,
//! failures, limits and timeouts.

use crate::hook_support::*;
use agentlane_agent::hooks::*;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

async fn serve() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let json = |body: &'static str| {
        move |State(seen): State<Seen>, headers: HeaderMap, axum::Json(v): axum::Json<Value>| async move {
            seen.lock().unwrap().push((headers, v));
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
    };
    let app = Router::new()
        .route("/allow", post(json("{}")))
        .route("/params", post(json(r#"{"params":{"cmd":"ls -la"}}"#)))
        .route(
            "/block",
            post(json(r#"{"block":true,"blockReason":"rm is not allowed"}"#)),
        )
        .route("/typo", post(json(r#"{"blocked":true}"#)))
        .route("/invalid", post(json("this is not json")))
        .route(
            "/gate",
            post(json(
                r#"{"outcome":"block","reason":"maintenance","message":"Back soon."}"#,
            )),
        )
        .route("/rewrite", post(json(r#"{"content":"rewritten"}"#)))
        .route(
            "/fail",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "secret stack trace") }),
        )
        .route(
            "/redirect",
            post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/allow")],
                )
            }),
        )
        .route(
            "/big",
            post(|| async { format!("{{}}{}", " ".repeat(100 * 1024)) }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "{}"
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

fn hook(name: &str, url: String, points: &[HookPoint], timeout: Duration) -> Arc<WebhookHook> {
    Arc::new(
        WebhookHook::new(WebhookConfig {
            name: name.into(),
            url,
            points: points.to_vec(),
            priority: 0,
            timeout,
            secret_header: Some(("x-hook-secret".into(), "s3cret-value".into())),
        })
        .unwrap(),
    )
}

fn guard(url: String) -> HookRegistry {
    HookRegistry::new().with(hook(
        "guard",
        url,
        &[HookPoint::BeforeToolCall],
        Duration::from_millis(500),
    ))
}

#[tokio::test]
async fn allow_and_params_round_trip_with_the_documented_request() {
    let (base, seen) = serve().await;
    assert_eq!(
        guard(format!("{base}/allow"))
            .before_tool_call(&ctx(), tool_event())
            .await,
        ToolCallDecision::Allow { params: None }
    );
    assert_eq!(
        guard(format!("{base}/params"))
            .before_tool_call(&ctx(), tool_event())
            .await,
        ToolCallDecision::Allow {
            params: Some(json!({"cmd": "ls -la"}))
        }
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let (headers, body) = &seen[0];
    assert_eq!(headers["x-hook-secret"], "s3cret-value");
    assert_eq!(
        body,
        &json!({
            "hook": "before_tool_call",
            "context": {"tenant": "t1", "sessionKey": "main", "sessionId": "s1", "runId": "run_1"},
            "event": {"toolName": "shell", "toolCallId": "call_1", "arguments": {"cmd": "rm -rf /"}}
        })
    );
}

#[tokio::test]
async fn a_block_answer_blocks() {
    let (base, _) = serve().await;
    assert_eq!(
        guard(format!("{base}/block"))
            .before_tool_call(&ctx(), tool_event())
            .await,
        ToolCallDecision::Block {
            reason: "rm is not allowed".into(),
            hook: "guard".into(),
        }
    );
    let gate = HookRegistry::new().with(hook(
        "gate",
        format!("{base}/gate"),
        &[HookPoint::BeforeAgentRun],
        Duration::from_secs(5),
    ));
    let event = AgentRunEvent {
        prompt: "hi".into(),
        model: None,
    };
    assert_eq!(
        gate.before_agent_run(&ctx(), event).await,
        RunGate::Block {
            reason: "maintenance".into(),
            message: Some("Back soon.".into()),
        }
    );
}

#[tokio::test]
async fn every_webhook_failure_fails_closed_at_a_policy_point() {
    let (base, _) = serve().await;
    // A port nobody listens on: bind, read the port, close.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/x", l.local_addr().unwrap())
    };
    let cases = [
        (format!("{base}/fail"), "answered HTTP 500"),
        (format!("{base}/redirect"), "answered HTTP 307"),
        (format!("{base}/invalid"), "unreadable answer: "),
        (
            format!("{base}/typo"),
            "unreadable answer: unknown field `blocked`",
        ),
        (format!("{base}/big"), "answer larger than 65536 bytes"),
        (format!("{base}/slow"), "timed out after 500ms"),
        (refused.clone(), "request failed: "),
    ];
    for (url, expected) in cases {
        let started = std::time::Instant::now();
        let decision = guard(url.clone())
            .before_tool_call(&ctx(), tool_event())
            .await;
        let ToolCallDecision::Block { reason, hook } = decision else {
            panic!("{url}: expected a block, got {decision:?}");
        };
        assert_eq!(hook, "guard");
        let prefix = "before_tool_call hook \"guard\" failed: ";
        assert!(
            reason.starts_with(prefix) && reason[prefix.len()..].starts_with(expected),
            "{url}: reason {reason:?} should start with {expected:?}"
        );
        let port = url.rsplit(':').next().unwrap().split('/').next().unwrap();
        assert!(!reason.contains(port), "{reason:?} leaks the URL");
        assert!(!reason.contains("s3cret") && !reason.contains("stack trace"));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{url}: not bounded by the timeout"
        );
    }
}

#[tokio::test]
async fn a_failing_webhook_at_a_non_policy_point_fails_open() {
    let (base, seen) = serve().await;
    let msg = || MessageEvent {
        text: "hello".into(),
    };
    let sending = |path: &str| {
        HookRegistry::new().with(hook(
            path,
            format!("{base}{path}"),
            &[HookPoint::MessageSending],
            Duration::from_millis(300),
        ))
    };
    assert_eq!(
        sending("/rewrite").message_sending(&ctx(), msg()).await,
        SendDecision::Send {
            content: "rewritten".into()
        }
    );
    for broken in ["/fail", "/invalid", "/slow"] {
        assert_eq!(
            sending(broken).message_sending(&ctx(), msg()).await,
            SendDecision::Send {
                content: "hello".into()
            },
            "{broken} must fail open"
        );
    }
    // Observers ignore the answer body entirely.
    let observer = HookRegistry::new().with(hook(
        "observer",
        format!("{base}/invalid"),
        &[HookPoint::MessageSent],
        Duration::from_secs(5),
    ));
    observer.message_sent(&ctx(), msg()).await;
    let bodies: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b["hook"].clone())
        .collect();
    assert_eq!(
        bodies,
        vec![
            json!("message_sending"),
            json!("message_sending"),
            json!("message_sent")
        ]
    );
}
