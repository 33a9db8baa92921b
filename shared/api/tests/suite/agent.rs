//! `POST /v1/agent`, `agent.wait`, auth, request validation and the error shape.

use crate::common::*;
use agentlane_api::ApiConfig;
use agentlane_conformance::fixtures;
use agentlane_core::{Clock, Lane, NewTurn, QueueMode, RunId, RunStatus, SessionKey, TurnMessage};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn an_accepted_turn_is_queued_once_on_its_lane() {
    // GIVEN a fresh API
    let h = Harness::new().await;
    // WHEN acme submits a turn
    let body = h.submit(ACME_KEY, "main", "hello").await;
    // THEN the answer names a queued run on a new session
    let run_id = body["runId"].as_str().unwrap().to_owned();
    assert!(run_id.starts_with("run_"), "{body}");
    assert_eq!(body["sessionKey"], "main");
    assert_eq!(body["status"], "queued");
    assert_eq!(body["acceptedAt"], T0);
    assert_eq!(body.get("deduplicated"), None);
    let run = h.run(&acme(), &run_id).await;
    assert_eq!(run.status, RunStatus::Queued);
    assert_eq!(run.session_id.as_str(), body["sessionId"].as_str().unwrap());
    assert_eq!(run.request.message, "hello");
    // AND exactly one message sits on the session's lane
    let deliveries = h.queued().await;
    assert_eq!(deliveries.len(), 1);
    let message = &deliveries[0].message;
    assert_eq!(message.lane, Lane::new("acme/main"));
    assert_eq!(message.dedup_id, run_id);
    assert_eq!(
        message.body,
        TurnMessage {
            session_key: Some(agentlane_core::SessionKey::new("main")),
            tenant: acme(),
            run_id: RunId::new(run_id),
            accepted: None,
        }
    );
}

#[tokio::test]
async fn an_idempotent_replay_answers_the_same_run_and_enqueues_nothing_more() {
    let h = Harness::new().await;
    let request = json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-1"});
    let first = h.agent(ACME_KEY, request.clone()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let replay = h.agent(ACME_KEY, request).await;
    assert_eq!(replay.status, StatusCode::ACCEPTED, "{}", replay.text);
    assert_eq!(replay.json["runId"], first.json["runId"]);
    assert_eq!(replay.json["sessionId"], first.json["sessionId"]);
    assert_eq!(replay.json["acceptedAt"], first.json["acceptedAt"]);
    assert_eq!(replay.json["deduplicated"], true);
    // One message, and none behind it once it is acked.
    let deliveries = h.queued().await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].message.dedup_id, first.json["runId"]);
    h.queue.ack(&deliveries[0].receipt).await.unwrap();
    let rest = h.queued().await;
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn a_replay_heals_a_run_that_was_accepted_but_never_enqueued() {
    // GIVEN a run written by accept_turn whose enqueue never happened (crash in between)
    let h = Harness::new().await;
    let outcome = h
        .store
        .accept_turn(NewTurn {
            request: fixtures::request("hi"),
            idempotency_key: Some("k-crash".into()),
            ..fixtures::turn(&acme(), &SessionKey::new("main"), T0)
        })
        .await
        .unwrap();
    assert!(h.queued().await.is_empty());
    // WHEN the client retries with the same key
    let replay = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-crash"}),
        )
        .await;
    // THEN it gets the same run, and the run is now on its lane
    assert_eq!(replay.status, StatusCode::ACCEPTED);
    assert_eq!(replay.json["runId"], outcome.run.run_id.as_str());
    let deliveries = h.queued().await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].message.body.run_id, outcome.run.run_id);
}

#[tokio::test]
async fn an_idempotency_key_reused_for_another_request_is_a_conflict() {
    let h = Harness::new().await;
    let first = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-2"}),
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    for other in [
        json!({"sessionKey": "main", "message": "something else", "idempotencyKey": "k-2"}),
        json!({"sessionKey": "other", "message": "hi", "idempotencyKey": "k-2"}),
        json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-2", "timeoutSeconds": 5}),
    ] {
        h.agent(ACME_KEY, other).await.assert_error(409, "conflict");
    }
    // Nothing was accepted or enqueued for the refused requests.
    let deliveries = h.queued().await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].message.dedup_id, first.json["runId"]);
    let session = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(session.json["runsAccepted"], 1);
    h.get("/v1/sessions/other", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn an_idempotency_key_expires_after_its_ttl() {
    let h = Harness::new().await;
    let request = json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-ttl"});
    let first = h.agent(ACME_KEY, request.clone()).await;
    h.clock.advance(24 * 3600 * 1000 + 1);
    let later = h.agent(ACME_KEY, request).await;
    assert_eq!(later.status, StatusCode::ACCEPTED);
    assert_ne!(later.json["runId"], first.json["runId"]);
    assert_eq!(later.json.get("deduplicated"), None);
}

#[tokio::test]
async fn the_same_idempotency_key_of_two_tenants_names_two_runs() {
    let h = Harness::new().await;
    let request = json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "shared"});
    let a = h.agent(ACME_KEY, request.clone()).await;
    let b = h.agent(BETA_KEY, request).await;
    assert_eq!(b.status, StatusCode::ACCEPTED);
    assert_ne!(a.json["runId"], b.json["runId"]);
    assert_eq!(b.json.get("deduplicated"), None);
}

#[tokio::test]
async fn bad_bodies_answer_4xx_in_the_error_shape() {
    let h = Harness::with_config(ApiConfig {
        max_message_bytes: 1024,
        max_body_bytes: 4096,
        ..ApiConfig::default()
    })
    .await;
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        (
            "malformed JSON",
            "{\"sessionKey\": ".into(),
            400,
            "invalid_request",
            "malformed JSON",
        ),
        (
            "not an object",
            "[1,2]".into(),
            400,
            "invalid_request",
            "must be a JSON object",
        ),
        ("empty body", String::new(), 400, "invalid_request", "empty"),
        (
            "unknown field",
            json!({"sessionKey": "main", "message": "hi", "sesionKey": "x"}).to_string(),
            400,
            "invalid_request",
            "unknown field `sesionKey`",
        ),
        (
            "missing message",
            json!({"sessionKey": "main"}).to_string(),
            400,
            "invalid_request",
            "missing field `message`",
        ),
        (
            "wrong type",
            json!({"sessionKey": "main", "message": 5}).to_string(),
            400,
            "invalid_request",
            "invalid type",
        ),
        (
            "empty message",
            json!({"sessionKey": "main", "message": ""}).to_string(),
            400,
            "invalid_request",
            "message must not be empty",
        ),
        (
            "oversize message",
            json!({"sessionKey": "main", "message": "x".repeat(1025)}).to_string(),
            413,
            "payload_too_large",
            "1025 bytes",
        ),
        (
            "oversize body",
            json!({"sessionKey": "main", "message": "x".repeat(5000)}).to_string(),
            413,
            "payload_too_large",
            "larger than 4096 bytes",
        ),
        (
            "bad session key",
            json!({"sessionKey": "a?b", "message": "hi"}).to_string(),
            400,
            "invalid_request",
            "sessionKey",
        ),
        (
            "unknown queue mode",
            json!({"sessionKey": "main", "message": "hi", "queueMode": "soon"}).to_string(),
            400,
            "invalid_request",
            "unknown",
        ),
        (
            "model without provider",
            json!({"sessionKey": "main", "message": "hi", "model": "gpt-4o"}).to_string(),
            400,
            "invalid_request",
            "provider/model",
        ),
        (
            "negative timeout",
            json!({"sessionKey": "main", "message": "hi", "timeoutSeconds": -1}).to_string(),
            400,
            "invalid_request",
            "timeoutSeconds",
        ),
        (
            "timeout over 7 days",
            json!({"sessionKey": "main", "message": "hi", "timeoutSeconds": 604_801}).to_string(),
            400,
            "invalid_request",
            "7 days",
        ),
    ];
    for (name, body, status, code, hint) in cases {
        let reply = h.post_raw("/v1/agent", ACME_KEY, &body).await;
        reply.assert_error(status, code);
        let message = reply.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(hint), "{name}: {message}");
    }
    // Nothing of that reached the queue.
    assert!(h.queued().await.is_empty());
}

#[tokio::test]
async fn a_non_json_content_type_is_refused() {
    let h = Harness::new().await;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/agent")
        .header("authorization", format!("Bearer {ACME_KEY}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("sessionKey=main&message=hi"))
        .unwrap();
    let reply = h.send(request).await;
    reply.assert_error(400, "invalid_request");
    assert!(reply.text.contains("application/json"), "{}", reply.text);
}

#[tokio::test]
async fn requests_without_a_valid_key_are_unauthorized() {
    let h = Harness::new().await;
    let body = || Body::from(json!({"sessionKey": "main", "message": "hi"}).to_string());
    let headers: [Option<String>; 5] = [
        None,
        Some("Bearer wrong-key-0123456789".into()),
        Some(format!("Basic {ACME_KEY}")),
        Some("Bearer".into()),
        Some(format!("Bearer {ACME_KEY}x")),
    ];
    for header in headers {
        let mut builder = Request::builder().method(Method::POST).uri("/v1/agent");
        if let Some(value) = &header {
            builder = builder.header("authorization", value);
        }
        let reply = h.send(builder.body(body()).unwrap()).await;
        reply.assert_error(401, "unauthorized");
        assert_eq!(reply.headers["www-authenticate"], "Bearer");
        assert!(!reply.text.contains("key-0123456789"), "{}", reply.text);
    }
    for path in [
        "/v1/runs/run_x",
        "/v1/sessions/main",
        "/v1/sessions/main/transcript",
    ] {
        let reply = h
            .send(Request::get(path).body(Body::empty()).unwrap())
            .await;
        reply.assert_error(401, "unauthorized");
    }
    assert!(h.queued().await.is_empty());
}

#[tokio::test]
async fn health_needs_no_key_and_unknown_routes_answer_json() {
    let h = Harness::new().await;
    let health = h
        .send(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json, json!({"ok": true}));

    h.get("/v1/nothing-here", ACME_KEY)
        .await
        .assert_error(404, "not_found");
    h.get("/v1/agent", ACME_KEY)
        .await
        .assert_error(405, "method_not_allowed");
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let h = Harness::new().await;
    let echoed = h
        .send(
            Request::get("/healthz")
                .header("x-request-id", "req-42")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(echoed.headers["x-request-id"], "req-42");
    let generated = h
        .send(
            Request::get("/healthz")
                .header("x-request-id", "bad id with spaces")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let id = generated.headers["x-request-id"].to_str().unwrap();
    assert!(!id.is_empty() && !id.contains(' '), "{id}");
    let error = h.get("/v1/runs/run_none", ACME_KEY).await;
    assert!(error.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn wait_on_a_queued_run_times_out_quickly_and_the_run_goes_on() {
    let h = Harness::new().await;
    let run_id = h.submit(ACME_KEY, "main", "hi").await["runId"].clone();
    let started = Instant::now();
    let reply = h
        .wait(ACME_KEY, json!({"runId": run_id, "timeoutMs": 100}))
        .await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.json,
        json!({"runId": run_id, "status": "pending", "runStatus": "queued", "livenessState": "working", "timeoutPhase": "queue"})
    );
    assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert_eq!(
        h.run(&acme(), run_id.as_str().unwrap()).await.status,
        RunStatus::Queued
    );
}

#[tokio::test]
async fn wait_timeouts_are_capped() {
    let h = Harness::with_config(ApiConfig {
        max_wait_ms: 150,
        ..ApiConfig::default()
    })
    .await;
    let run_id = h.submit(ACME_KEY, "main", "hi").await["runId"].clone();
    let started = Instant::now();
    let reply = h
        .wait(ACME_KEY, json!({"runId": run_id, "timeoutMs": 600_000}))
        .await;
    assert_eq!(reply.json["status"], "pending");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn wait_returns_ok_once_the_runner_finishes_the_run() {
    let h = std::sync::Arc::new(Harness::new().await);
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let runner = {
        let h = h.clone();
        let run_id = run_id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            h.finish(&acme(), &run_id, RunStatus::Ok, vec![]).await;
        })
    };
    let started = Instant::now();
    let reply = within(
        10,
        h.wait(ACME_KEY, json!({"runId": run_id, "timeoutMs": 5000})),
    )
    .await;
    runner.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["status"], "ok");
    assert_eq!(reply.json["runStatus"], "ok");
    assert_eq!(reply.json["startedAt"], T0);
    assert_eq!(reply.json["endedAt"], T0 + 5);
    assert_eq!(reply.json.get("error"), None);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn wait_reports_failed_aborted_and_timed_out_runs() {
    let h = Harness::new().await;
    let cases = [
        (RunStatus::Error, "error", "error"),
        (RunStatus::Aborted, "error", "aborted"),
        (RunStatus::Timeout, "timeout", "timeout"),
    ];
    for (run_status, status, code) in cases {
        let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
        h.finish(&acme(), &run_id, run_status, vec![]).await;
        let reply = h.wait(ACME_KEY, json!({"runId": run_id})).await;
        assert_eq!(reply.json["status"], status, "{}", reply.text);
        assert_eq!(reply.json["runStatus"], run_status.as_str());
        assert_eq!(reply.json["error"]["code"], code, "{}", reply.text);
    }
}

#[tokio::test]
async fn wait_rejects_bad_bodies_and_unknown_runs() {
    let h = Harness::new().await;
    h.wait(ACME_KEY, json!({"timeoutMs": 5}))
        .await
        .assert_error(400, "invalid_request");
    h.wait(ACME_KEY, json!({"runId": "r", "wait": 5}))
        .await
        .assert_error(400, "invalid_request");
    h.wait(ACME_KEY, json!({"runId": "run_unknown"}))
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn thinking_is_refused_for_a_model_without_reasoning_and_kept_for_one_with_it() {
    let h = Harness::with_config(ApiConfig {
        configured_models: vec!["openai/gpt-4o-mini".into()],
        limits: agentlane_api::Limits {
            allowed_models: [
                "openai/gpt-4o-mini",
                "openai/o3-mini",
                "anthropic/claude-3-5-haiku-latest",
            ]
            .map(String::from)
            .to_vec(),
            ..agentlane_api::Limits::default()
        },
        ..ApiConfig::default()
    })
    .await;
    // The default model (gpt-4o-mini) has no reasoning mode: the level is refused, by name.
    let refused = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "t", "message": "hi", "thinking": "high"}),
        )
        .await;
    refused.assert_error(400, "invalid_request");
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("thinking"), "{message}");
    assert!(message.contains("openai/gpt-4o-mini"), "{message}");
    let named = h
        .agent(ACME_KEY,
            json!({"sessionKey": "t", "message": "hi", "model": "anthropic/claude-3-5-haiku-latest", "thinking": "low"}),
        )
        .await;
    named.assert_error(400, "invalid_request");
    assert!(named.text.contains("claude-3-5-haiku"), "{}", named.text);
    // An unknown level names the accepted ones.
    let unknown = h
        .agent(ACME_KEY,
            json!({"sessionKey": "t", "message": "hi", "model": "openai/o3-mini", "thinking": "max"}),
        )
        .await;
    unknown.assert_error(400, "invalid_request");
    assert!(
        unknown.text.contains("minimal, low, medium, high"),
        "{}",
        unknown.text
    );
    assert!(h.queued().await.is_empty());

    // `off` is fine anywhere; a reasoning model keeps its level on the run.
    let off = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "t", "message": "hi", "thinking": "off"}),
        )
        .await;
    assert_eq!(off.status, StatusCode::ACCEPTED, "{}", off.text);
    let accepted = h
        .agent(ACME_KEY,
            json!({"sessionKey": "t", "message": "hi", "model": "openai/o3-mini", "thinking": "high"}),
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.text);
    let run = h
        .run(&acme(), accepted.json["runId"].as_str().unwrap())
        .await;
    assert_eq!(run.request.thinking.as_deref(), Some("high"));
}

#[tokio::test]
async fn metrics_answer_prometheus_text_to_the_operator_key_only_and_404_where_turned_off() {
    // GIVEN a counter the runner would have moved, and an operator key
    agentlane_core::metrics::incr(agentlane_core::metrics::TURNS, &[("status", "ok")]);
    const OPERATOR: &str = "operator-0123456789abcdef";
    let h = Harness::with_config(ApiConfig {
        metrics_key: Some(agentlane_api::OperatorKey::new(OPERATOR).unwrap()),
        ..ApiConfig::default()
    })
    .await;

    // WHEN /metrics is read with the operator key: the Prometheus text, with that counter
    let reply = h.get("/metrics", OPERATOR).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(
        reply
            .text
            .contains("agentlane_turns_total{status=\"ok\"} 1\n"),
        "{}",
        reply.text
    );
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        reply.headers
    );
    // THEN without a key, or with an unknown one, it is 401; a tenant's key is 403
    h.send(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .assert_error(401, "unauthorized");
    h.get("/metrics", "operator-0123456789abcdeX")
        .await
        .assert_error(401, "unauthorized");
    h.get("/metrics", ACME_KEY)
        .await
        .assert_error(403, "forbidden");
    // AND without a configured operator key no key reads them
    let unset = Harness::new().await;
    let refused = unset.get("/metrics", ACME_KEY).await;
    refused.assert_error(403, "forbidden");
    assert!(
        refused.text.contains("none is configured"),
        "{}",
        refused.text
    );
    unset
        .get("/metrics", OPERATOR)
        .await
        .assert_error(401, "unauthorized");

    // AND where the host turns it off (the ingress Lambda) it is not there
    let off = Harness::with_config(ApiConfig {
        expose_metrics: false,
        ..ApiConfig::default()
    })
    .await;
    off.get("/metrics", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn a_steered_run_resolves_with_the_run_that_carried_it() {
    // GIVEN a running turn, a followup behind it, and a steer the turn took at a boundary
    let h = Harness::new().await;
    let carrier = h.submit_run(ACME_KEY, "main", "drive").await;
    h.submit(ACME_KEY, "main", "later").await;
    let steer = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "turn left", "queueMode": "steering"}),
        )
        .await;
    assert_eq!(steer.status, StatusCode::ACCEPTED, "{}", steer.text);
    let steer_id = steer.json["runId"].as_str().unwrap().to_owned();
    let fence = h.lock(&acme(), "main").await;
    let mut run = h.run(&acme(), &carrier).await;
    let taken = h
        .store
        .take_steers(
            &fence,
            agentlane_core::SteerTake {
                carrier: run.run_id.clone(),
                carrier_seq: run.session_seq,
                session_id: run.session_id.clone(),
                next_seq: 0,
                now: h.clock.now_ms(),
                mode: QueueMode::Steer,
            },
        )
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);

    // WHILE the carrier runs, a wait on the steer is still pending
    let reply = h
        .wait(ACME_KEY, json!({"runId": steer_id, "timeoutMs": 100}))
        .await;
    assert_eq!(reply.json["status"], "pending", "{}", reply.text);

    // WHEN the carrier ends with its answer (the followup still queued, the steer's own
    // message not delivered yet)
    run.status = RunStatus::Ok;
    run.ended_at = Some(h.clock.now_ms());
    run.payloads = vec![agentlane_core::Payload {
        text: "left it is".into(),
        is_error: false,
    }];
    h.commit(&fence, run, vec![], vec![], true).await;

    // THEN a wait on the steer answers what the carrier answered
    let reply = h
        .wait(ACME_KEY, json!({"runId": steer_id, "timeoutMs": 2000}))
        .await;
    assert_eq!(reply.json["status"], "ok", "{}", reply.text);
    assert_eq!(reply.json["runId"], steer_id.as_str());
    assert_eq!(reply.json["payloads"][0]["text"], "left it is");
    // AND the run record says where it went
    let shown = h.get(&format!("/v1/runs/{steer_id}"), ACME_KEY).await;
    assert_eq!(shown.json["queueOutcome"], "steered", "{}", shown.text);
    assert_eq!(shown.json["intoRunId"], carrier.as_str());
}
