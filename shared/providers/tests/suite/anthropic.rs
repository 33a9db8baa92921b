//! The Anthropic provider against an in-process mock server speaking real SSE on loopback, with
//! events shaped exactly like the Messages API's (and llama-server's deviations), plus one round
//! trip against the real aimock.

use crate::mock::*;
use agentlane_core::{Message, ThinkingLevel, ToolCall, Usage};
use agentlane_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use agentlane_providers::{
    AssistantTurn, FailoverReason, FinishReason, ModelProvider, ModelRequest, ProviderError,
    RateLimitWindow, StreamEvent, ToolSpec,
};
use axum::http::header;
use serde_json::{Value, json};
use std::time::Duration;

/// One SSE event as the API frames it: `event: <type>` then the JSON payload.
fn ev(data: Value) -> String {
    let kind = data["type"].as_str().unwrap().to_owned();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// Each event as one SSE frame.
fn events(events: Vec<Value>) -> Vec<String> {
    events.into_iter().map(ev).collect()
}

fn frames(events_: Vec<Value>) -> Frames {
    frames_of(events(events_))
}

fn sse(body: Frames) -> Reply {
    Reply::stream("text/event-stream; charset=utf-8", body)
}

fn message_start(input_tokens: u64) -> Value {
    json!({"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }})
}

fn text_start(index: u64) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
}

fn tool_start(index: u64, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

fn delta(index: u64, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn text_delta(index: u64, text: &str) -> Value {
    delta(index, json!({"type": "text_delta", "text": text}))
}

fn json_delta(index: u64, partial: &str) -> Value {
    delta(
        index,
        json!({"type": "input_json_delta", "partial_json": partial}),
    )
}

fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_delta(stop_reason: &str, output_tokens: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}})
}

fn message_stop() -> Value {
    json!({"type": "message_stop"})
}

fn ping() -> Value {
    json!({"type": "ping"})
}

fn provider_for(base_url: &str) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: base_url.to_owned(),
        api_key: Some("sk-ant-test-key".into()),
        extra_headers: vec![("anthropic-beta".into(), "tools-2024-04-04".into())],
        ..AnthropicConfig::default()
    })
    .unwrap()
}

fn provider(server: &Server) -> AnthropicProvider {
    provider_for(&server.base_url)
}

fn weather_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Time in a timezone".into(),
            parameters: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
        },
    ]
}

/// A history with a finished tool round (two parallel calls, one failed) and a new question.
fn weather_request() -> ModelRequest {
    ModelRequest {
        model: "claude-sonnet-4-5".into(),
        system: "You are terse.".into(),
        messages: agentlane_providers::history::shared([
            Message::user("time and weather?"),
            Message::Assistant {
                content: "Checking.".into(),
                reasoning: Some("the user wants two things".into()),
                tool_calls: vec![
                    ToolCall {
                        id: "toolu_01".into(),
                        name: "get_time".into(),
                        arguments: r#"{"tz":"UTC"}"#.into(),
                    },
                    ToolCall {
                        id: "toolu_02".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                ],
                model: Some("anthropic/claude-sonnet-4-5".into()),
            },
            Message::Tool {
                tool_call_id: "toolu_01".into(),
                name: "get_time".into(),
                content: "12:00".into(),
                is_error: false,
            },
            Message::Tool {
                tool_call_id: "toolu_02".into(),
                name: "get_weather".into(),
                content: "weather service unavailable".into(),
                is_error: true,
            },
            Message::user("and in Rome?"),
        ]),
        tools: weather_tools().into(),
        max_output_tokens: Some(256),
        thinking: None,
    }
}

fn args(turn: &AssistantTurn) -> Vec<(String, String, Value)> {
    turn.tool_calls
        .iter()
        .map(|c| {
            (
                c.id.clone(),
                c.name.clone(),
                serde_json::from_str(&c.arguments).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn text_streams_with_usage_then_finished() {
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(25),
            text_start(0),
            ping(),
            text_delta(0, "Hello"),
            text_delta(0, " there!"),
            block_stop(0),
            message_delta("end_turn", 6),
            message_stop(),
        ]))
        .await;
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Hello".into()),
            StreamEvent::TextDelta(" there!".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 6,
                ..Default::default()
            }),
            StreamEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn two_parallel_tool_use_blocks_with_arguments_split_mid_token() {
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(40),
            text_start(0),
            text_delta(0, "Let me check."),
            block_stop(0),
            tool_start(1, "toolu_w1", "get_weather"),
            json_delta(1, ""),
            json_delta(1, "{\"city\":\"Paris\",\"uni"),
            json_delta(1, "t\":\"celsius\"}"),
            block_stop(1),
            tool_start(2, "toolu_t1", "get_time"),
            json_delta(2, "{\"tz\":\"Europe/Paris\""),
            json_delta(2, "}"),
            block_stop(2),
            message_delta("tool_use", 55),
            message_stop(),
        ]))
        .await;
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Let me check.".into()),
            // The call's ordinal among tool_use blocks, not the content block index.
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_w1".into(),
                name: "get_weather".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "{\"city\":\"Paris\",\"uni".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "t\":\"celsius\"}".into()
            },
            StreamEvent::ToolCallStart {
                index: 1,
                id: "toolu_t1".into(),
                name: "get_time".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "{\"tz\":\"Europe/Paris\"".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "}".into()
            },
            StreamEvent::Usage(Usage {
                input_tokens: 40,
                output_tokens: 55,
                ..Default::default()
            }),
            StreamEvent::Finished(FinishReason::ToolCalls),
        ]
    );
    let turn = accumulate(&events);
    assert_eq!(turn.text, "Let me check.");
    assert_eq!(
        args(&turn),
        vec![
            (
                "toolu_w1".into(),
                "get_weather".into(),
                json!({"city": "Paris", "unit": "celsius"})
            ),
            (
                "toolu_t1".into(),
                "get_time".into(),
                json!({"tz": "Europe/Paris"})
            ),
        ]
    );
}

#[tokio::test]
async fn thinking_then_text() {
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(12),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "Seventeen times"}),
            ),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": " twenty-three."}),
            ),
            delta(
                0,
                json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
            ),
            block_stop(0),
            text_start(1),
            text_delta(1, "391"),
            block_stop(1),
            message_delta("end_turn", 30),
            message_stop(),
        ]))
        .await;
    assert_eq!(error, None);
    assert_eq!(
        events[..3],
        [
            StreamEvent::ReasoningDelta("Seventeen times".into()),
            StreamEvent::ReasoningDelta(" twenty-three.".into()),
            StreamEvent::TextDelta("391".into()),
        ]
    );
    assert_eq!(
        accumulate(&events),
        AssistantTurn {
            text: "391".into(),
            reasoning: "Seventeen times twenty-three.".into(),
            tool_calls: vec![],
            usage: Usage {
                input_tokens: 12,
                output_tokens: 30,
                ..Default::default()
            },
            finish: Some(FinishReason::Stop),
            empty_text: false,
        }
    );
}

#[tokio::test]
async fn overloaded_error_inside_the_stream_is_classified() {
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(10),
            text_start(0),
            text_delta(0, "partial"),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]))
        .await;
    assert_eq!(events, vec![StreamEvent::TextDelta("partial".into())]);
    let error = error.unwrap();
    assert_eq!(
        (error.reason, error.status, error.retry_after),
        (FailoverReason::Overloaded, None, None)
    );
    assert_eq!(
        error.message,
        "error in stream: Overloaded (overloaded_error)"
    );
}

/// llama-server opens the second tool_use block before stopping the first (both stops come at
/// the end) and sends no `input` in content_block_start.
#[tokio::test]
async fn llama_server_block_order_and_missing_input_decode_the_same() {
    let tool = |index: u64, id: &str| json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": "get_weather"}});
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(80),
            tool(0, "call_a"),
            json_delta(0, "{\"city\": "),
            json_delta(0, "\"Paris\"}"),
            tool(1, "call_b"),
            json_delta(1, "{\"city\": \"Rome\"}"),
            block_stop(0),
            block_stop(1),
            message_delta("tool_use", 20),
            message_stop(),
        ]))
        .await;
    assert_eq!(error, None);
    let turn = accumulate(&events);
    assert_eq!(
        args(&turn),
        vec![
            (
                "call_a".into(),
                "get_weather".into(),
                json!({"city": "Paris"})
            ),
            (
                "call_b".into(),
                "get_weather".into(),
                json!({"city": "Rome"})
            ),
        ]
    );
    assert_eq!(turn.finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn rate_limit_429_carries_retry_after_and_a_short_window() {
    let err = protocol()
        .refused(|| {
        Reply::json(
            429,
            vec![("retry-after", "7"), ("anthropic-ratelimit-input-tokens-remaining", "0")],
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}),
        )
        })
        .await;
    assert_eq!(
        err,
        ProviderError {
            reason: FailoverReason::RateLimit,
            status: Some(429),
            message: "HTTP 429: This request would exceed the rate limit for your organization of 50,000 input tokens per minute. (rate_limit_error)".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    assert_eq!(err.rate_limit_window(), RateLimitWindow::Short);
}

#[tokio::test]
async fn overloaded_529_is_classified() {
    let err = protocol()
        .refused(|| {
        Reply::json(
            529,
            vec![],
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
        })
        .await;
    assert_eq!(
        (err.reason, err.status, err.retry_after),
        (FailoverReason::Overloaded, Some(529), None)
    );
}

#[tokio::test]
async fn authentication_error_is_auth_and_never_shows_the_key() {
    let err = protocol()
        .refused(|| {
        Reply::json(
            401,
            vec![],
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        )
        })
        .await;
    assert_eq!(err.reason, FailoverReason::Auth);
    assert!(!err.to_string().contains("sk-ant-test-key"), "{err}");
}

#[tokio::test]
async fn stream_closed_before_message_stop_is_a_network_error() {
    let (events, error) = protocol()
        .stream(events(vec![
            message_start(10),
            text_start(0),
            text_delta(0, "This response will"),
            block_stop(0),
            message_delta("end_turn", 4),
        ]))
        .await;
    assert_eq!(
        events,
        vec![StreamEvent::TextDelta("This response will".into())]
    );
    let error = error.unwrap();
    assert_eq!(error.reason, FailoverReason::Network);
    assert_eq!(
        error.message,
        "stream ended before the response was complete"
    );
}

fn done_reply() -> Reply {
    sse(frames(vec![
        message_start(1),
        message_delta("end_turn", 1),
        message_stop(),
    ]))
}

#[tokio::test]
async fn request_maps_system_messages_tool_results_tools_and_headers() {
    let (server, _, error) = protocol().exchange(done_reply).await;
    assert_eq!(error, None);

    let (headers, body) = server.only_request();
    assert_eq!(headers.get("x-api-key").unwrap(), "sk-ant-test-key");
    assert_eq!(headers.get("anthropic-version").unwrap(), "2023-06-01");
    assert_eq!(headers.get("anthropic-beta").unwrap(), "tools-2024-04-04");
    assert!(headers.get(header::AUTHORIZATION).is_none());
    assert_eq!(headers.get(header::ACCEPT).unwrap(), "text/event-stream");
    assert_eq!(
        headers.get(header::CONTENT_TYPE).unwrap(),
        "application/json"
    );
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "stream": true,
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": "time and weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_time", "input": {"tz": "UTC"}},
                    {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "Paris"}},
                ]},
                // Both results in ONE user message.
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "12:00", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_02", "content": "weather service unavailable", "is_error": true},
                ]},
                {"role": "user", "content": "and in Rome?"},
            ],
            "tools": [
                {"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "description": "Time in a timezone", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}},
            ],
        })
    );
}

#[tokio::test]
async fn defaults_max_tokens_omit_empty_system_and_tools_and_accept_a_v1_base() {
    let server = serve(ANTHROPIC, done_reply).await;
    let provider = AnthropicProvider::new(AnthropicConfig {
        base_url: format!("{}/v1/", server.base_url),
        name: "local-claude".into(),
        self_hosted: true,
        anthropic_version: "2025-01-01".into(),
        ..AnthropicConfig::default()
    })
    .unwrap();
    assert_eq!(
        (provider.name(), provider.self_hosted()),
        ("local-claude", true)
    );
    let request = ModelRequest {
        model: "m".into(),
        system: String::new(),
        messages: agentlane_providers::history::shared([Message::user("hi")]),
        tools: vec![].into(),
        max_output_tokens: None,
        thinking: None,
    };
    let (events, error) = collect(&provider, request).await;
    assert_eq!(error, None);
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finished(FinishReason::Stop))
    );
    let (headers, body) = server.only_request();
    assert!(headers.get("x-api-key").is_none());
    assert_eq!(headers.get("anthropic-version").unwrap(), "2025-01-01");
    assert_eq!(
        body,
        json!({"model": "m", "max_tokens": 4096, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
    );
}

/// This protocol's frames for the shared transport checks.
fn protocol() -> Protocol<AnthropicProvider> {
    Protocol {
        api: ANTHROPIC,
        sse,
        text: |text| frames(vec![message_start(1), text_start(0), text_delta(0, text)]),
        idle: || ev(ping()),
        done: done_reply,
        provider,
        request: weather_request,
    }
}
crate::transport_checks!(protocol());

mod aimock {
    //! One round trip against the real aimock (`tools/aimock`, installed by `scripts/test`).
    //! A missing aimock or node fails this test: it is never skipped.

    use super::*;
    use std::path::PathBuf;
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};

    fn cli() -> PathBuf {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tools/aimock/node_modules/@copilotkit/aimock/dist/cli.js");
        assert!(
            path.is_file(),
            "aimock is not installed at {} (run scripts/test, or npm ci --prefix tools/aimock)",
            path.display()
        );
        path
    }

    /// Starts aimock on a free loopback port and returns it with its base URL.
    async fn start(fixtures: &std::path::Path) -> (Child, String) {
        let mut child = Command::new("node")
            .arg(cli())
            .args(["-p", "0", "-h", "127.0.0.1", "-f"])
            .arg(fixtures)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node must be installed to run aimock");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some((_, rest)) = line.split_once("listening on ") {
                    return rest.split_whitespace().next().unwrap().to_owned();
                }
            }
            panic!("aimock exited before it was listening");
        })
        .await
        .expect("aimock did not start within 30 s");
        // Keep draining its log so it can never block on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        (child, url)
    }

    #[tokio::test]
    async fn tool_round_trip_against_aimock() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = dir.path().join("fixtures.json");
        std::fs::write(
            &fixtures,
            json!({"fixtures": [
                {"match": {"userMessage": "weather", "hasToolResult": true},
                 "response": {"content": "It is 21C and sunny in Paris."}},
                {"match": {"userMessage": "weather", "hasToolResult": false},
                 "response": {"content": "Let me check.", "toolCalls": [
                    {"id": "call_w1", "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    {"id": "call_t1", "name": "get_time", "arguments": {"tz": "Europe/Paris"}}]}},
            ]})
            .to_string(),
        )
        .unwrap();
        let (mut child, url) = start(&fixtures).await;
        let provider = provider_for(&url);

        let mut request = ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: "You are terse.".into(),
            messages: agentlane_providers::history::shared([Message::user("weather in Paris?")]),
            tools: weather_tools().into(),
            max_output_tokens: None,
            thinking: None,
        };
        let (events, error) = collect(&provider, request.clone()).await;
        assert_eq!(error, None);
        let turn = accumulate(&events);
        assert_eq!(turn.text, "Let me check.");
        assert_eq!(turn.finish, Some(FinishReason::ToolCalls));
        assert_eq!(
            args(&turn),
            vec![
                (
                    "call_w1".into(),
                    "get_weather".into(),
                    json!({"city": "Paris", "unit": "celsius"})
                ),
                (
                    "call_t1".into(),
                    "get_time".into(),
                    json!({"tz": "Europe/Paris"})
                ),
            ]
        );

        // Round 2: the results go back as tool_result blocks, which aimock must recognise.
        request
            .messages
            .push(agentlane_providers::SharedMessage::new(
                Message::Assistant {
                    content: turn.text.clone(),
                    reasoning: None,
                    tool_calls: turn.tool_calls.clone(),
                    model: None,
                },
            ));
        for (call, result) in turn.tool_calls.iter().zip(["21C, sunny", "14:00"]) {
            request
                .messages
                .push(agentlane_providers::SharedMessage::new(Message::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: result.into(),
                    is_error: false,
                }));
        }
        let (events, error) = collect(&provider, request).await;
        assert_eq!(error, None);
        let turn = accumulate(&events);
        assert_eq!(turn.text, "It is 21C and sunny in Paris.");
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.finish, Some(FinishReason::Stop));

        child.kill().await.unwrap();
    }
}

#[tokio::test]
async fn a_thinking_level_enables_extended_thinking_with_its_budget_above_the_answer_cap() {
    let frames = events(vec![
        message_start(12),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Let me think."}),
        ),
        block_stop(0),
        text_start(1),
        text_delta(1, "42"),
        block_stop(1),
        message_delta("end_turn", 30),
        message_stop(),
    ]);
    let levels = [
        (ThinkingLevel::Minimal, Some(1024)),
        (ThinkingLevel::High, Some(32_000)),
        (ThinkingLevel::Off, None),
    ];
    let requests = levels.iter().map(|(level, _)| {
        let mut request = weather_request();
        request.thinking = Some(*level);
        request
    });
    let answers = protocol().each(frames, requests.collect()).await;
    // weather_request caps the answer at 256 tokens.
    for ((level, budget), (events, error, body)) in levels.iter().zip(answers) {
        assert_eq!(error, None);
        assert_eq!(
            accumulate(&events).reasoning,
            "Let me think.",
            "the thinking block streams back as reasoning"
        );
        match budget {
            Some(budget) => {
                assert_eq!(
                    body["thinking"],
                    json!({"type": "enabled", "budget_tokens": budget}),
                    "{level:?}"
                );
                assert_eq!(body["max_tokens"], json!(budget + 256), "{level:?}");
            }
            None => {
                assert!(body.get("thinking").is_none(), "{level:?}: {body}");
                assert_eq!(body["max_tokens"], json!(256));
            }
        }
    }
}
