//! The OpenAI-compatible routes in process: a turn answered by the played runner, as a
//! completion and as chunks; errors in OpenAI's shape; the streaming ingress's routes.

use crate::common::{ACME_KEY, BETA_KEY, Harness, T0, acme, event, within};
use agentlane_core::{Payload, QueueMode, RunStatus, TenantId, Usage};
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

/// Plays the runner for the next queued turn of `tenant`: starts it with one assistant delta,
/// ends it `ok` with a second one and `reply` as its payload. Returns the run id.
async fn answer_next_turn(h: &Harness, tenant: &TenantId, deltas: [&str; 2]) -> String {
    let delivery = within(10, async {
        loop {
            if let Some(delivery) = h.queued().await.into_iter().next() {
                return delivery;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let run_id = delivery.message.body.run_id.to_string();
    let (fence, mut run) = h.start(tenant, &run_id, vec![event(0, deltas[0])]).await;
    run.status = RunStatus::Ok;
    run.ended_at = Some(T0 + 10);
    run.usage = Usage {
        input_tokens: 21,
        output_tokens: 4,
        ..Default::default()
    };
    run.payloads = vec![Payload {
        text: deltas.concat(),
        is_error: false,
    }];
    h.commit(&fence, run, vec![event(1, deltas[1])], vec![], true)
        .await;
    run_id
}

fn chat(body: Value) -> axum::http::Request<axum::body::Body> {
    Harness::request(
        Method::POST,
        "/v1/chat/completions",
        Some(ACME_KEY),
        axum::body::Body::from(body.to_string()),
    )
}

#[tokio::test]
async fn a_chat_completion_is_the_turns_reply_naming_its_run_and_session() {
    // GIVEN a client asking for a completion on the session "ada"
    let h = Harness::new().await;
    let asked = tokio::spawn(Harness::send_to(
        h.app.clone(),
        chat(json!({
            "model": "agentlane",
            "user": "ada",
            "temperature": 0.3,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "an earlier question"},
                {"role": "assistant", "content": "an earlier answer"},
                {"role": "user", "content": "hello"}
            ]
        })),
    ));

    // WHEN the runner answers the turn
    let run_id = answer_next_turn(&h, &acme(), ["Hi ", "there!"]).await;
    let reply = within(10, asked).await.unwrap();

    // THEN the answer is a chat.completion with the reply, its usage, the run as its id
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["object"], "chat.completion");
    assert_eq!(reply.json["id"], run_id.as_str());
    assert_eq!(reply.json["model"], "agentlane");
    assert_eq!(reply.json["choices"][0]["message"]["content"], "Hi there!");
    assert_eq!(reply.json["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        reply.json["usage"],
        json!({"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25})
    );
    assert_eq!(reply.headers["x-agentlane-run-id"], run_id.as_str());
    assert_eq!(reply.headers["x-agentlane-session-key"], "ada");

    // AND the turn was the last user message on that session, system prompt added, the
    // earlier messages not replayed (the session's transcript is the context), a followup
    let run = h.run(&acme(), &run_id).await;
    assert_eq!(run.session_key.as_str(), "ada");
    assert_eq!(run.request.message, "hello");
    assert_eq!(
        run.request.extra_system_prompt.as_deref(),
        Some("Be brief.")
    );
    assert_eq!(run.request.history, Vec::new());
    assert_eq!(run.request.queue_mode, Some(QueueMode::Followup));
}

#[tokio::test]
async fn a_streamed_completion_sends_chunks_as_the_run_goes_then_done() {
    // GIVEN a client asking for a streamed completion with usage, without a session
    let h = Harness::new().await;
    let asked = tokio::spawn(Harness::send_to(
        h.app.clone(),
        chat(json!({
            "model": "agentlane",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "user", "content": "my name is Ada"},
                {"role": "assistant", "content": "Hello Ada."},
                {"role": "user", "content": "what is my name?"}
            ]
        })),
    ));

    // WHEN the runner answers in two deltas
    let run_id = answer_next_turn(&h, &acme(), ["You are ", "Ada."]).await;
    let reply = within(10, asked).await.unwrap();

    // THEN the body is SSE: the role chunk, one chunk per delta, the stop chunk, the usage
    // chunk, then [DONE]
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data: Vec<&str> = reply
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{}", reply.text);
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let deltas: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|c| c["delta"].clone()))
        .collect();
    assert_eq!(
        deltas,
        [
            json!({"role": "assistant", "content": ""}),
            json!({"content": "You are "}),
            json!({"content": "Ada."}),
            json!({}),
        ]
    );
    assert!(chunks.iter().all(|c| c["id"] == run_id.as_str()));
    assert_eq!(
        chunks.last().unwrap()["usage"],
        json!({"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25})
    );

    // AND the stateless turn ran on a fresh session seeded with the earlier messages
    let run = h.run(&acme(), &run_id).await;
    assert!(run.session_key.as_str().starts_with("openai-"), "{run:?}");
    assert_eq!(run.request.message, "what is my name?");
    assert_eq!(run.request.history.len(), 2);
}

#[tokio::test]
async fn refusals_are_in_openais_error_shape_and_queue_nothing() {
    let h = Harness::new().await;
    let user = |content: &str| json!([{"role": "user", "content": content}]);
    // a session of the agent main
    h.submit(ACME_KEY, "taken", "hi").await;
    let beta_run = h.submit_run(BETA_KEY, "theirs", "hi").await;
    // (the two turns above taken off the queue)
    assert_eq!(h.queued().await.len(), 2);
    // (path, key, body) → (status, code, param)
    type Case<'a> = ((&'a str, Option<&'a str>, Value), (u16, &'a str, &'a str));
    let cases: Vec<Case> = vec![
        (
            (
                "/v1/chat/completions",
                None,
                json!({"model": "agentlane", "messages": user("hi")}),
            ),
            (401, "invalid_api_key", ""),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane"}),
            ),
            (400, "", ""),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "gpt-4o", "messages": user("hi")}),
            ),
            (404, "model_not_found", "model"),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane/ghost", "messages": user("hi")}),
            ),
            (404, "model_not_found", "model"),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane", "messages": user("hi"),
                   "tools": [{"type": "retrieval"}]}),
            ),
            (400, "tool_type_not_supported", "tools[0]"),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane", "messages": [
                    {"role": "tool", "tool_call_id": "call_1", "content": "x"}]}),
            ),
            (400, "", "messages"),
        ),
        (
            (
                "/v1/responses",
                Some(ACME_KEY),
                json!({"model": "agentlane", "input": "hi",
                   "tools": [{"type": "function", "name": "lookup", "parameters": {}}]}),
            ),
            (400, "tools_not_supported", "tools"),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane", "n": 3, "messages": user("hi")}),
            ),
            (400, "n_not_supported", "n"),
        ),
        (
            (
                "/v1/responses",
                Some(ACME_KEY),
                json!({"model": "agentlane", "input": "hi", "previous_response_id": beta_run}),
            ),
            (404, "previous_response_not_found", "previous_response_id"),
        ),
        (
            (
                "/v1/chat/completions",
                Some(ACME_KEY),
                json!({"model": "agentlane", "messages": user("hi"), "user": "has spaces"}),
            ),
            (400, "", "user"),
        ),
    ];
    for (index, ((path, key, body), (status, code, param))) in cases.into_iter().enumerate() {
        let request = Harness::request(
            Method::POST,
            path,
            key,
            axum::body::Body::from(body.to_string()),
        );
        let reply = h.send(request).await;
        assert_eq!(
            reply.status.as_u16(),
            status,
            "case #{index}: {}",
            reply.text
        );
        let error = &reply.json["error"];
        assert_eq!(
            error.as_object().map(|o| {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                keys
            }),
            Some(vec![
                &"code".to_owned(),
                &"message".to_owned(),
                &"param".to_owned(),
                &"type".to_owned()
            ]),
            "case #{index}: {}",
            reply.text
        );
        assert_eq!(
            error["code"].as_str().unwrap_or_default(),
            code,
            "case #{index}: {}",
            reply.text
        );
        assert_eq!(
            error["param"].as_str().unwrap_or_default(),
            param,
            "case #{index}: {}",
            reply.text
        );
        let kind = if status == 401 || status == 400 || status == 404 {
            "invalid_request_error"
        } else {
            "server_error"
        };
        assert_eq!(error["type"], kind, "case #{index}");
        assert!(!error["message"].as_str().unwrap_or_default().is_empty());
    }
    let denied = h
        .send(Harness::request(
            Method::GET,
            "/v1/models",
            None,
            axum::body::Body::empty(),
        ))
        .await;
    assert_eq!(denied.headers["www-authenticate"], "Bearer");
    assert_eq!(
        h.queued().await.len(),
        0,
        "no refused request queued a turn"
    );

    // A session of another agent is a conflict the SDKs are told not to retry.
    let create = h
        .post("/v1/agents", ACME_KEY, json!({"agentId": "support"}))
        .await;
    assert_eq!(create.status, StatusCode::CREATED, "{}", create.text);
    let conflict = h
        .send(chat(
            json!({"model": "agentlane/support", "user": "taken", "messages": user("hi")}),
        ))
        .await;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.text);
    assert_eq!(conflict.json["error"]["code"], "conflict");
    assert_eq!(conflict.headers["x-should-retry"], "false");
}

#[tokio::test]
async fn models_are_the_tenants_agents() {
    let h = Harness::new().await;
    for id in ["support", "billing"] {
        let created = h.post("/v1/agents", ACME_KEY, json!({"agentId": id})).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    }
    let listed = h.get("/v1/models", ACME_KEY).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    assert_eq!(listed.json["object"], "list");
    let ids: Vec<&str> = listed.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["agentlane", "agentlane/billing", "agentlane/support"]);
    assert_eq!(listed.json["data"][1]["object"], "model");
    assert_eq!(listed.json["data"][1]["owned_by"], "acme");
    assert_eq!(listed.json["data"][1]["created"], T0 / 1000);
    // another tenant sees only main
    let theirs = h.get("/v1/models", BETA_KEY).await;
    assert_eq!(theirs.json["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_streaming_ingress_serves_the_openai_routes_and_refers_the_rest_to_the_http_api() {
    let h = Harness::streaming().await;
    let models = h.get("/v1/models", ACME_KEY).await;
    assert_eq!(models.status, StatusCode::OK, "{}", models.text);
    assert_eq!(h.get("/healthz", ACME_KEY).await.status, StatusCode::OK);
    let refused = h
        .agent(ACME_KEY, json!({"sessionKey": "s", "message": "hi"}))
        .await;
    refused.assert_error(404, "not_found");
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("use the HTTP API"),
        "{}",
        refused.text
    );
    for path in [
        "/v1/cron/jobs",
        "/v1/sessions/s/transcript",
        "/v1/agents",
        "/v1/openapi.json",
    ] {
        h.get(path, ACME_KEY).await.assert_error(404, "not_found");
    }
    // A completion accepts its turn there (the runner answers it as anywhere).
    let asked = tokio::spawn(Harness::send_to(
        h.app.clone(),
        chat(json!({"model": "agentlane", "messages": [{"role": "user", "content": "hi"}]})),
    ));
    let run_id = answer_next_turn(&h, &acme(), ["o", "k"]).await;
    let reply = within(10, asked).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["id"], run_id.as_str());
}
