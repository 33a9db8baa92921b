//! The OpenAI provider against an in-process mock server speaking real SSE on loopback, with
//! chunks shaped like OpenAI's (and aimock's).

use crate::mock::*;
use agentlane_core::{Message, ThinkingLevel, ToolCall, Usage};
use agentlane_providers::openai::{OpenAiConfig, OpenAiProvider};
use agentlane_providers::{
    AssistantTurn, FailoverReason, FinishReason, ModelProvider, ModelRequest, ProviderError,
    StreamEvent, ToolSpec,
};
use axum::http::header;
use futures::stream::{self, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Each payload as one SSE `data:` frame.
fn data(payloads: &[String]) -> Vec<String> {
    payloads.iter().map(|p| format!("data: {p}\n\n")).collect()
}

fn sse_frames(payloads: &[String]) -> Frames {
    frames_of(data(payloads))
}

fn sse(body: Frames) -> Reply {
    Reply::stream("text/event-stream", body)
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1_796_040_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
    .to_string()
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1_796_040_000,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
    .to_string()
}

fn provider(server: &Server) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: server.base_url.clone(),
        api_key: Some("sk-test-key".into()),
        extra_headers: vec![("x-team".into(), "blue".into())],
        ..OpenAiConfig::default()
    })
    .unwrap()
}

fn weather_request() -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        system: "You are terse.".into(),
        messages: agentlane_providers::history::shared([
            Message::user("time?"),
            Message::Assistant {
                content: "Checking.".into(),
                reasoning: Some("the user wants the time".into()),
                tool_calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "get_time".into(),
                    arguments: "{}".into(),
                }],
                model: Some("openai/gpt-4o-mini".into()),
            },
            Message::Tool {
                tool_call_id: "call_0".into(),
                name: "get_time".into(),
                content: "12:00".into(),
                is_error: false,
            },
            Message::user("weather in Paris?"),
        ]),
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }].into(),
        max_output_tokens: Some(256),
        thinking: None,
    }
}

#[tokio::test]
async fn text_and_two_parallel_tool_calls_stream_and_accumulate() {
    let (events, error) = protocol()
        .stream(data(&[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Let me "}), None),
            chunk(json!({"content": "check."}), None),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":\"Paris\",\"uni"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "t\":\"celsius\"}"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "id": "call_t1", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"tz\":\"Europe/Paris\"}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(42, 17),
            "[DONE]".into(),
        ]))
        .await;
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Let me ".into()),
            StreamEvent::TextDelta("check.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_w1".into(),
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
                id: "call_t1".into(),
                name: "get_time".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "{\"tz\":\"Europe/Paris\"}".into()
            },
            StreamEvent::Usage(Usage {
                input_tokens: 42,
                output_tokens: 17,
                ..Default::default()
            }),
            StreamEvent::Finished(FinishReason::ToolCalls),
        ]
    );
    assert_eq!(
        accumulate(&events),
        AssistantTurn {
            text: "Let me check.".into(),
            reasoning: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "call_w1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\",\"unit\":\"celsius\"}".into()
                },
                ToolCall {
                    id: "call_t1".into(),
                    name: "get_time".into(),
                    arguments: "{\"tz\":\"Europe/Paris\"}".into()
                },
            ],
            usage: Usage {
                input_tokens: 42,
                output_tokens: 17,
                ..Default::default()
            },
            finish: Some(FinishReason::ToolCalls),
            empty_text: false,
        }
    );
}

#[tokio::test]
async fn request_maps_messages_tools_stream_flags_and_headers() {
    let p = protocol();
    let (server, _, _) = p
        .exchange(p.reply(data(&[
            chunk(json!({"content": "ok"}), Some("stop")),
            "[DONE]".into(),
        ])))
        .await;

    let (headers, body) = server.only_request();
    assert_eq!(
        headers.get(header::AUTHORIZATION).unwrap(),
        "Bearer sk-test-key"
    );
    assert_eq!(headers.get("x-team").unwrap(), "blue");
    assert_eq!(headers.get(header::ACCEPT).unwrap(), "text/event-stream");
    assert_eq!(
        headers.get(header::CONTENT_TYPE).unwrap(),
        "application/json"
    );
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini",
            "stream": true,
            "stream_options": {"include_usage": true},
            // Not api.openai.com: the widely supported field.
            "max_tokens": 256,
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "time?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
                {"role": "user", "content": "weather in Paris?"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
        })
    );
}

#[tokio::test]
async fn no_key_no_authorization_header_and_no_tools_field() {
    let server = serve(OPENAI, || sse(sse_frames(&["[DONE]".into()]))).await;
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{}/", server.base_url),
        name: "ollama".into(),
        self_hosted: true,
        ..OpenAiConfig::default()
    })
    .unwrap();
    assert_eq!((provider.name(), provider.self_hosted()), ("ollama", true));
    let mut request = weather_request();
    request.tools = Vec::new().into();
    let (events, error) = collect(&provider, request).await;
    assert_eq!(
        (events, error),
        (vec![StreamEvent::Finished(FinishReason::Stop)], None)
    );
    let (headers, body) = server.only_request();
    assert!(headers.get(header::AUTHORIZATION).is_none());
    assert!(body.get("tools").is_none(), "{body}");
}

#[tokio::test]
async fn reasoning_content_and_text_then_usage_after_finish() {
    let (events, error) = protocol()
        .stream(data(&[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"reasoning_content": "The user "}), None),
            chunk(json!({"reasoning_content": "greets."}), None),
            chunk(json!({"content": "Hi there!"}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk(9, 5),
            "[DONE]".into(),
        ]))
        .await;
    assert_eq!(error, None);
    let turn = accumulate(&events);
    assert_eq!(
        turn,
        AssistantTurn {
            text: "Hi there!".into(),
            reasoning: "The user greets.".into(),
            tool_calls: vec![],
            usage: Usage {
                input_tokens: 9,
                output_tokens: 5,
                ..Default::default()
            },
            finish: Some(FinishReason::Stop),
            empty_text: false,
        }
    );
    // Finished is the last event, once, after the usage that followed finish_reason.
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Finished(_)))
            .count(),
        1
    );
    assert_eq!(
        events[events.len() - 2],
        StreamEvent::Usage(Usage {
            input_tokens: 9,
            output_tokens: 5,
            ..Default::default()
        })
    );
}

#[tokio::test]
async fn rate_limit_429_carries_retry_after() {
    let err = protocol()
        .refused(|| {
        Reply::json(
            429,
            vec![("retry-after", "1")],
            json!({"error": {"message": "Rate limit exceeded", "type": "rate_limit_error", "param": null, "code": "rate_limit_exceeded"}}),
        )
        })
        .await;
    assert_eq!(
        err,
        ProviderError {
            reason: FailoverReason::RateLimit,
            status: Some(429),
            message: "HTTP 429: Rate limit exceeded (rate_limit_error, rate_limit_exceeded)".into(),
            retry_after: Some(Duration::from_secs(1)),
        }
    );
}

#[tokio::test]
async fn overloaded_529_is_classified() {
    let err = protocol()
        .refused(|| {
            Reply::json(
                529,
                vec![],
                json!({"error": {"message": "Overloaded", "type": "overloaded_error"}}),
            )
        })
        .await;
    assert_eq!(
        (err.reason, err.status, err.retry_after),
        (FailoverReason::Overloaded, Some(529), None)
    );
}

#[tokio::test]
async fn stream_closed_before_done_is_a_network_error() {
    let (events, error) = protocol()
        .stream(data(&[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "This response will"}), None),
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

#[tokio::test]
async fn error_inside_the_stream_is_classified() {
    let (events, error) = protocol()
        .stream(data(&[
            chunk(json!({"content": "partial"}), None),
            r#"{"error":{"code":500,"message":"The model produced output that does not match the expected format"}}"#.into(),
        ]))
        .await;
    assert_eq!(events, vec![StreamEvent::TextDelta("partial".into())]);
    let error = error.unwrap();
    assert_eq!(
        (error.reason, error.status),
        (FailoverReason::Server, Some(500))
    );
    assert!(
        error.message.contains("does not match"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn non_streamed_json_answer_is_decoded() {
    let (_, events, error) = protocol()
        .exchange(|| {
        Reply::json(
            200,
            vec![],
            json!({
                "id": "chatcmpl-1", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Whole answer."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            }),
        )
        })
        .await;
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Whole answer.".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2,
                ..Default::default()
            }),
            StreamEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn request_timeout_is_a_timeout_error() {
    let server = serve(OPENAI, || {
        let first = sse_frames(&[chunk(json!({"content": "slow"}), None)]);
        sse(first.chain(stream::pending()).boxed())
    })
    .await;
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: server.base_url.clone(),
        request_timeout: Some(Duration::from_millis(300)),
        ..OpenAiConfig::default()
    })
    .unwrap();
    let (events, error) = collect(&provider, weather_request()).await;
    assert_eq!(events, vec![StreamEvent::TextDelta("slow".into())]);
    assert_eq!(error.unwrap().reason, FailoverReason::Timeout);
}

#[tokio::test]
async fn connection_refused_is_a_network_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: format!("http://{addr}/v1"),
        api_key: Some("sk-never-shown".into()),
        ..OpenAiConfig::default()
    })
    .unwrap();
    let err = provider
        .stream(weather_request(), CancellationToken::new())
        .await
        .err()
        .unwrap();
    assert_eq!(err.reason, FailoverReason::Network);
    assert!(!err.message.contains("sk-never-shown"));
    // The provider's address is shown as its name (issue 25 §3).
    assert!(!err.message.contains(&addr.to_string()), "{}", err.message);
    assert!(err.message.contains("openai"), "{}", err.message);
}

/// This protocol's frames for the shared transport checks.
fn protocol() -> Protocol<OpenAiProvider> {
    Protocol {
        api: OPENAI,
        sse,
        text: |text| sse_frames(&[chunk(json!({"content": text}), None)]),
        idle: || ": keep-alive\n\n".to_owned(),
        done: || sse(sse_frames(&["[DONE]".into()])),
        provider,
        request: weather_request,
    }
}

crate::transport_checks!(protocol());

#[tokio::test]
async fn a_thinking_level_is_sent_as_reasoning_effort() {
    let frames = data(&[
        chunk(json!({"reasoning_content": "Thinking it over."}), None),
        chunk(json!({"content": "42"}), Some("stop")),
        "[DONE]".into(),
    ]);
    let levels = [
        (Some(ThinkingLevel::Minimal), Some("minimal")),
        (Some(ThinkingLevel::Low), Some("low")),
        (Some(ThinkingLevel::Medium), Some("medium")),
        (Some(ThinkingLevel::High), Some("high")),
        (Some(ThinkingLevel::Off), None),
        (None, None),
    ];
    let requests = levels.iter().map(|(level, _)| {
        let mut request = weather_request();
        request.model = "o3-mini".into();
        request.thinking = *level;
        request
    });
    let answers = protocol().each(frames, requests.collect()).await;
    for ((level, effort), (events, error, body)) in levels.iter().zip(answers) {
        assert_eq!(error, None);
        assert_eq!(accumulate(&events).text, "42");
        assert_eq!(body["model"], "o3-mini");
        match effort {
            Some(effort) => assert_eq!(body["reasoning_effort"], *effort, "{level:?}"),
            None => assert!(body.get("reasoning_effort").is_none(), "{level:?}: {body}"),
        }
    }
}
