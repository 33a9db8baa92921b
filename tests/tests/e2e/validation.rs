//! Bad requests get a 4xx with `{"error": {"code", "message"}}` and start nothing.

use crate::support::scenario;
use agentlane_tests::{ErrorBody, RawBody};
use reqwest::{Method, StatusCode};
use serde_json::json;

const LIMIT: usize = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_invalid_agent_requests_are_refused_with_a_clear_error() -> anyhow::Result<()>
{
    // GIVEN a running server
    let scn = scenario()?;
    let a = scn.a();
    let too_long_key = "k".repeat(257);
    let cases: Vec<(&str, RawBody, StatusCode, &str)> = vec![
        (
            "malformed JSON",
            RawBody::Text(r#"{"sessionKey": "s", "message": "#.to_owned()),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "not JSON at all",
            RawBody::Text("hello".to_owned()),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "an unknown field",
            RawBody::Json(json!({"sessionKey": "s", "message": "hi", "colour": "blue"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "no message",
            RawBody::Json(json!({"sessionKey": "s"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "an empty message",
            RawBody::Json(json!({"sessionKey": "s", "message": ""})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "a message that is not a string",
            RawBody::Json(json!({"sessionKey": "s", "message": 42})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "a message over 256 KiB",
            RawBody::Json(json!({"sessionKey": "s", "message": "x".repeat(LIMIT + 1)})),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            "a session key with a space",
            RawBody::Json(json!({"sessionKey": "a b", "message": "hi"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "a session key with a space",
            RawBody::Json(json!({"sessionKey": "a b", "message": "hi"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "an empty session key",
            RawBody::Json(json!({"sessionKey": "", "message": "hi"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "a session key of 257 characters",
            RawBody::Json(json!({"sessionKey": too_long_key, "message": "hi"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "an unknown queue mode",
            RawBody::Json(json!({"sessionKey": "s", "message": "hi", "queueMode": "sideways"})),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
    ];

    for (what, body, status, code) in cases {
        // WHEN tenant A posts it
        let response = a.raw(Method::POST, "/v1/agent", Some(body)).await?;

        // THEN it is refused with the documented status and error shape
        assert_eq!(response.status, status, "{what}: {}", response.body);
        let error: ErrorBody = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("{what}: error body {:?}: {e}", response.body));
        assert_eq!(error.error.code, code, "{what}");
        assert!(
            !error.error.message.trim().is_empty(),
            "{what}: a message says why"
        );
    }

    // AND nothing reached the model, and no session was created
    assert_eq!(scn.mock.model_requests()?.len(), 0);
    let (status, _) = a
        .json(Method::GET, "/v1/sessions/s/transcript", None)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // AND a message of exactly 256 KiB is still accepted
    let (status, body) = a
        .post_agent(json!({"sessionKey": "big", "message": "y".repeat(LIMIT)}))
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runs_answer_404_with_the_error_shape() -> anyhow::Result<()> {
    // GIVEN a running server
    let scn = scenario()?;
    let a = scn.a();

    // WHEN tenant A asks about a run that does not exist
    for (method, path, body) in [
        (Method::GET, "/v1/runs/run_does_not_exist", None),
        (Method::GET, "/v1/runs/run_does_not_exist/events", None),
        (
            Method::POST,
            "/v1/runs/run_does_not_exist/abort",
            Some(json!({})),
        ),
        (
            Method::POST,
            "/v1/agent.wait",
            Some(json!({"runId": "run_does_not_exist", "timeoutMs": 10})),
        ),
    ] {
        let (status, body) = a.json(method.clone(), path, body).await?;

        // THEN the answer is 404 not_found
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert_eq!(
            body["error"]["code"], "not_found",
            "{method} {path}: {body}"
        );
    }
    Ok(())
}
