//! `GET /v1/sessions/{key}`, its transcript, and reset.

use crate::common::*;
use agentlane_api::ApiConfig;
use agentlane_core::{Message, QueueMode, RunStatus};
use axum::http::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_session_shows_its_id_lane_counters_and_lock() {
    let h = Harness::new().await;
    let accepted = h.submit(ACME_KEY, "user@example.com", "hi").await;
    let reply = h.get("/v1/sessions/user@example.com", ACME_KEY).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["sessionKey"], "user@example.com");
    assert_eq!(reply.json["sessionId"], accepted["sessionId"]);
    assert_eq!(reply.json["lane"], "acme/user@example.com");
    assert_eq!(reply.json["status"], "idle");
    assert_eq!(reply.json["runsAccepted"], 1);
    assert_eq!(reply.json["runsFinished"], 0);
    assert_eq!(reply.json["generation"], 0);
    assert_eq!(reply.json["createdAt"], T0);
    assert_eq!(reply.json["locked"], false);
    assert_eq!(reply.json.get("lockOwner"), None);
    assert_eq!(reply.json.get("tenant"), None);

    let _fence = h.lock(&acme(), "user@example.com").await;
    let locked = h.get("/v1/sessions/user@example.com", ACME_KEY).await;
    assert_eq!(locked.json["locked"], true);
    // The lease ends: the session no longer counts as locked.
    h.clock.advance(60_001);
    let expired = h.get("/v1/sessions/user@example.com", ACME_KEY).await;
    assert_eq!(expired.json["locked"], false);
}

#[tokio::test]
async fn session_lookups_validate_the_key_and_404_unknown_ones() {
    let h = Harness::new().await;
    h.get("/v1/sessions/nobody", ACME_KEY)
        .await
        .assert_error(404, "not_found");
    h.get("/v1/sessions/bad%20key", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
    h.get("/v1/sessions/a%3Fb/transcript", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
    // a key holding `/` (OpenClaw's keys do) is one percent-encoded segment
    h.get("/v1/sessions/a%2Fb/transcript", ACME_KEY)
        .await
        .assert_error(404, "not_found");
    h.post("/v1/sessions/nobody/reset", ACME_KEY, json!({}))
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn the_transcript_lists_entries_in_order_and_pages() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let fence = h.lock(&acme(), "main").await;
    let mut run = h.run(&acme(), &run_id).await;
    run.status = RunStatus::Ok;
    let entries = vec![
        entry(1, &run_id, Message::user("hi")),
        entry(
            2,
            &run_id,
            Message::Assistant {
                content: "hello!".into(),
                reasoning: None,
                tool_calls: vec![],
                model: Some("demo/echo".into()),
            },
        ),
    ];
    h.commit(&fence, run.clone(), vec![], entries, true).await;

    let reply = h.get("/v1/sessions/main/transcript", ACME_KEY).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["sessionKey"], "main");
    assert_eq!(reply.json["sessionId"], run.session_id.as_str());
    assert_eq!(
        reply.json["entries"],
        json!([
            {"seq": 1, "runId": run_id, "ts": T0 + 1, "message": {"role": "user", "content": "hi"}},
            {"seq": 2, "runId": run_id, "ts": T0 + 2,
             "message": {"role": "assistant", "content": "hello!", "model": "demo/echo"}},
        ])
    );
    let page = h
        .get("/v1/sessions/main/transcript?after=1&limit=1", ACME_KEY)
        .await;
    let seqs: Vec<_> = page.json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].clone())
        .collect();
    assert_eq!(seqs, vec![json!(2)]);
    h.get("/v1/sessions/main/transcript?limit=5001", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn reset_mints_a_new_session_id_unless_a_turn_holds_the_lock() {
    let h = Harness::with_config(ApiConfig {
        reset_wait_ms: 300,
        ..ApiConfig::default()
    })
    .await;
    let accepted = h.submit(ACME_KEY, "main", "hi").await;
    let old_id = accepted["sessionId"].as_str().unwrap().to_owned();
    let run_id = accepted["runId"].as_str().unwrap().to_owned();

    // While a runner holds the lock past the reset's wait, reset is refused.
    let fence = h.lock(&acme(), "main").await;
    h.post("/v1/sessions/main/reset", ACME_KEY, json!({}))
        .await
        .assert_error(409, "session_busy");
    h.end_ok(
        &fence,
        &acme(),
        &run_id,
        vec![entry(1, &run_id, Message::user("hi"))],
    )
    .await;

    // Once released, reset (with an empty body) gives a new id and bumps the generation.
    let reply = h
        .send(Harness::request(
            axum::http::Method::POST,
            "/v1/sessions/main/reset",
            Some(ACME_KEY),
            axum::body::Body::empty(),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let new_id = reply.json["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(new_id, old_id);
    assert_eq!(reply.json["generation"], 1);
    assert_eq!(reply.json["locked"], false);
    let session = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(session.json["sessionId"], new_id);

    // The new session starts empty; the old transcript stays readable by id.
    let fresh = h.get("/v1/sessions/main/transcript", ACME_KEY).await;
    assert_eq!(fresh.json["sessionId"], new_id);
    assert_eq!(fresh.json["entries"], json!([]));
    let old = h
        .get(
            &format!("/v1/sessions/main/transcript?sessionId={old_id}"),
            ACME_KEY,
        )
        .await;
    assert_eq!(old.json["entries"].as_array().unwrap().len(), 1);

    // A new turn lands on the new session id.
    let next = h.submit(ACME_KEY, "main", "again").await;
    assert_eq!(next["sessionId"], new_id);

    h.post("/v1/sessions/main/reset", ACME_KEY, json!({"force": true}))
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn another_tenants_sessions_answer_404() {
    let h = Harness::new().await;
    let accepted = h.submit(ACME_KEY, "main", "hi").await;
    for path in ["/v1/sessions/main", "/v1/sessions/main/transcript"] {
        h.get(path, BETA_KEY).await.assert_error(404, "not_found");
    }
    let by_id = format!(
        "/v1/sessions/main/transcript?sessionId={}",
        accepted["sessionId"].as_str().unwrap()
    );
    h.get(&by_id, BETA_KEY).await.assert_error(404, "not_found");
    h.post("/v1/sessions/main/reset", BETA_KEY, json!({}))
        .await
        .assert_error(404, "not_found");
    // acme's session is untouched.
    let own = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(own.json["sessionId"], accepted["sessionId"]);
    assert_eq!(own.json["generation"], 0);
}

#[tokio::test]
async fn a_reset_waits_for_the_running_turn_to_release_the_lock() {
    let h = Harness::new().await;
    let accepted = h.submit(ACME_KEY, "main", "hi").await;
    let old_id = accepted["sessionId"].as_str().unwrap().to_owned();
    let run_id = accepted["runId"].as_str().unwrap().to_owned();
    let fence = h.lock(&acme(), "main").await;

    // WHEN a reset comes while a turn runs, and the turn ends 300 ms later
    let reset = {
        let app = h.app.clone();
        tokio::spawn(async move {
            Harness::send_to(
                app,
                Harness::request(
                    axum::http::Method::POST,
                    "/v1/sessions/main/reset",
                    Some(ACME_KEY),
                    axum::body::Body::empty(),
                ),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reset.is_finished(), "the reset did not wait for the lock");
    h.end_ok(
        &fence,
        &acme(),
        &run_id,
        vec![entry(0, &run_id, Message::user("hi"))],
    )
    .await;

    // THEN the reset goes through after the turn, which kept the old session whole
    let reply = reset.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_ne!(reply.json["sessionId"], old_id);
    let old = h
        .get(
            &format!("/v1/sessions/main/transcript?sessionId={old_id}"),
            ACME_KEY,
        )
        .await;
    assert_eq!(old.json["entries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn patch_sets_the_sessions_default_queue_mode_for_turns_without_one() {
    let h = Harness::new().await;
    h.submit(ACME_KEY, "main", "hi").await;

    // WHEN the session's default mode is set by an alias
    let reply = h
        .patch(
            "/v1/sessions/main",
            ACME_KEY,
            json!({"queueMode": "steering"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["queueMode"], "steer");

    // THEN a turn without a mode is accepted as a steer, one with a mode keeps it
    let steer = h.submit(ACME_KEY, "main", "turn left").await;
    let run = h.run(&acme(), steer["runId"].as_str().unwrap()).await;
    assert_eq!(run.request.queue_mode, Some(QueueMode::Steer));
    let explicit = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "then", "queueMode": "followup"}),
        )
        .await;
    let run = h
        .run(&acme(), explicit.json["runId"].as_str().unwrap())
        .await;
    assert_eq!(run.request.queue_mode, Some(QueueMode::Followup));
    assert_eq!(
        h.get("/v1/sessions/main", ACME_KEY).await.json["queueMode"],
        "steer"
    );

    // AND null clears it; bad values, unknown fields and unknown sessions are refused
    let reply = h
        .patch("/v1/sessions/main", ACME_KEY, json!({"queueMode": null}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(reply.json.get("queueMode").is_none(), "{}", reply.text);
    let bad_bodies = [
        json!({"queueMode": "sideways"}),
        json!({"queueMode": 3}),
        json!({"mode": "steer"}),
    ];
    for body in bad_bodies {
        h.patch("/v1/sessions/main", ACME_KEY, body)
            .await
            .assert_error(400, "invalid_request");
    }
    let nobody = json!({"queueMode": "steer"});
    h.patch("/v1/sessions/nobody", ACME_KEY, nobody)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn the_deployment_default_mode_applies_only_where_neither_turn_nor_session_names_one() {
    let h = Harness::with_config(ApiConfig {
        default_queue_mode: Some(QueueMode::Steer),
        ..ApiConfig::default()
    })
    .await;
    let h = &h;
    let mode_of = |reply: serde_json::Value| async move {
        h.run(&acme(), reply["runId"].as_str().unwrap())
            .await
            .request
            .queue_mode
    };

    // A turn naming no mode on a session without a default takes the deployment's
    let first = h.submit(ACME_KEY, "main", "hi").await;
    assert_eq!(mode_of(first).await, Some(QueueMode::Steer));

    // A turn's own mode wins
    let explicit = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "then", "queueMode": "followup"}),
        )
        .await;
    assert_eq!(mode_of(explicit.json).await, Some(QueueMode::Followup));

    // And so does the session's default
    let reply = h
        .patch(
            "/v1/sessions/main",
            ACME_KEY,
            json!({"queueMode": "followup"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let later = h.submit(ACME_KEY, "main", "later").await;
    assert_eq!(mode_of(later).await, Some(QueueMode::Followup));
}
